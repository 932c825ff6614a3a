"""Telling the wait server (runs/wait_server.py) that an escalation has settled, so the callers
it holds for it answer now rather than at its next poll.

One Redis pub/sub channel carries escalation ids, published once the change has committed.
An announcement is a hint, never the truth: the wait server reads the escalation itself, and
one that is lost (Redis down, the wait server reconnecting) only delays an answer until the
wait server's poll (GUARDIAN_WAIT_FALLBACK_SECONDS)."""

import functools
import logging

import redis
from django.conf import settings
from django.db import transaction

logger = logging.getLogger(__name__)

CHANNEL = "guardian:escalation-settled"
# A verdict is committed already when this runs: a Redis that does not answer costs the
# reviewer's request at most this long, and the caller its poll's delay.
PUBLISH_TIMEOUT_SECONDS = 1.0


@functools.cache
def _client(url: str) -> redis.Redis:
    # One pool per process (redis-py makes a fresh one in a forked child by itself).
    return redis.Redis.from_url(
        url,
        socket_timeout=PUBLISH_TIMEOUT_SECONDS,
        socket_connect_timeout=PUBLISH_TIMEOUT_SECONDS,
    )


def escalation_settled_after_commit(escalation_id: int) -> None:
    """Announce that `escalation_id` left the open state, once this transaction commits."""
    transaction.on_commit(lambda: escalation_settled_announce(escalation_id))


def escalation_settled_announce(escalation_id: int) -> bool:
    """Publish now; True if Redis took it. A failure is logged, never raised: the verdict
    stands whatever becomes of its announcement."""
    url = settings.GUARDIAN_WAIT_REDIS_URL
    if not url:
        return False
    try:
        _client(url).publish(CHANNEL, str(escalation_id))
    except redis.RedisError as exc:
        logger.warning(
            "escalation %s settled but not announced to the wait server (it finds out by "
            "its poll): %s",
            escalation_id,
            exc,
        )
        return False
    return True
