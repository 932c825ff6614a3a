"""A process that serves steps (a gunicorn worker, a Celery worker) says it has started, before
it takes its first request or task: what that first step would otherwise load lazily (the
guardian's model, 1-2 s) loads then. The floor only sends the signal; runs/warm.py, a room
above it, loads the guardian (the arrow turned around, as docs/ARCHITECTURE.md asks)."""

import logging

from django.dispatch import Signal

logger = logging.getLogger(__name__)

# Sent with sender = a word for the process ("gunicorn worker", "celery worker").
serving_process_started = Signal()


def serving_process_start(where: str) -> None:
    """Send serving_process_started. A receiver that fails is logged, never fatal: the first
    step then loads what it needs itself, or fails closed as any step would."""
    for receiver, result in serving_process_started.send_robust(sender=where):
        if isinstance(result, Exception):
            logger.error("%s: warming at start failed in %s", where, receiver, exc_info=result)
