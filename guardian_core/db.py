"""Database helpers the services share: retrying a short transaction that lost a race."""

import logging
import time
from collections.abc import Callable

from django.db import OperationalError, connection

logger = logging.getLogger(__name__)

# PostgreSQL's codes for "try again": serialization_failure, deadlock_detected.
_RETRYABLE = {"40001", "40P01"}


def retry_on_conflict[T](work: Callable[[], T], *, attempts: int = 3) -> T:
    """Run `work` (one whole transaction) again when the database broke a deadlock or a
    serialization conflict by aborting it; any other error, or the last attempt's, is raised.
    Locks are taken in one order (run first) so this is a safety net, not the design."""
    for attempt in range(1, attempts + 1):
        try:
            return work()
        except OperationalError as exc:
            code = conflict_code(exc)
            if code is None or attempt == attempts or connection.in_atomic_block:
                raise
            logger.warning("transaction conflict (%s), attempt %d: retrying", code, attempt)
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")


def conflict_code(exc: OperationalError) -> str | None:
    """PostgreSQL's code when `exc` is a deadlock or a serialization failure, else None."""
    cause = getattr(exc, "__cause__", None)
    code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    return code if code in _RETRYABLE else None
