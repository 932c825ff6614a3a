"""Database helpers the services share: retrying a short transaction that lost a race, and
telling a database that does not answer from one that refused a statement."""

import logging
import time
from collections.abc import Callable

from django.db import InterfaceError, OperationalError, connection

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


# PostgreSQL's codes for "the server is not there for you now": connection exceptions (08…),
# the server shutting down or starting (57P01-57P03), too many connections (53300).
_UNAVAILABLE_PREFIXES = ("08", "57P01", "57P02", "57P03", "53300")


def database_unavailable(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached or used now (down, restarting, out
    of connections, a dropped connection), as opposed to a statement it refused: a moment
    later the same request may succeed. A lost race (conflict_code) is not this."""
    if isinstance(exc, InterfaceError):
        return True  # Django's word for a connection that is already closed
    if not isinstance(exc, OperationalError) or conflict_code(exc):
        return False
    cause = getattr(exc, "__cause__", None)
    code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    if code is not None:
        return code.startswith(_UNAVAILABLE_PREFIXES)
    if connection.vendor == "sqlite":
        # SQLite's file cannot be opened, or stays locked past the busy timeout.
        text = str(exc).lower()
        return "unable to open" in text or "locked" in text or "disk i/o" in text
    return True  # no code at all: the driver never reached a server (connection refused)
