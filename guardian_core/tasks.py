"""Celery tasks of the project package."""

import os
import socket

from celery import shared_task
from django.db import connection


@shared_task(name="guardian_core.worker_ping")
def worker_ping() -> dict:
    """Answer with who ran it and which database connection it used: proves a worker consumes
    from the configured broker, and whether it keeps its connection between tasks."""
    connection.ensure_connection()
    return {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "db_connection": id(connection.connection),
    }


# A pass stops after this many batches (the next minute's pass goes on), so one task never
# holds a worker for long whatever backlog there is.
MONITORING_BATCHES_PER_PASS = 20


@shared_task(name="guardian_core.monitoring_catch_up", ignore_result=True)
def monitoring_catch_up() -> int:
    """Fold the decisions logged since the last pass into the monitoring page's days (beat,
    every minute), batch after batch until caught up; how many were folded."""
    from guardian_core import monitoring

    total = 0
    for _ in range(MONITORING_BATCHES_PER_PASS):
        done = monitoring.monitoring_catch_up(limit=monitoring.FOLD_BATCH)
        total += done
        if not done:
            break
    return total


@shared_task(name="guardian_core.run_guardian_model_job", ignore_result=True)
def run_guardian_model_job(job_id: int) -> str:
    """Make the guardian model version an admin asked for (learning.guardian_model_job_run);
    a duplicate message finds the job claimed and does nothing."""
    from guardian_core.learning import guardian_model_job_run

    return guardian_model_job_run(job_id=job_id)
