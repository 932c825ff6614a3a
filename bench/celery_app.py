"""The Celery app of the bench's workers: Guardian's own, with the turn task routed to the
bench's private queue (BENCH_QUEUE), so a worker that is already running on the same broker
(`make demo`'s) takes none of the bench's turns and the bench's workers take none of its.

A worker enqueues a run's next turn itself, so the route has to be set in the worker too, not
only where the first turn is sent. Used as: celery --app bench.celery_app worker -Q QUEUE
"""

import os

from django.conf import settings

from guardian_core.celery import app

# Read on every send, so the bench process can move to a new queue for each pass
# (Celery builds its router once, from the routes it finds at the first send).
queue: str | None = os.environ.get("BENCH_QUEUE")


def route_turns(name: str, args, kwargs, options, task=None, **kw) -> dict | None:
    if name == "runs.advance_run" and queue:
        return {"queue": queue}
    return None


# The bench's route first; every other task keeps its queue from the settings
# (CELERY_TASK_ROUTES), where a running demo worker takes it.
app.conf.task_routes = (route_turns, settings.CELERY_TASK_ROUTES)

__all__ = ["app"]
