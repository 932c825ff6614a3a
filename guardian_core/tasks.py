"""Celery tasks of the project package."""

import os
import socket

from celery import shared_task


@shared_task(name="guardian_core.worker_ping")
def worker_ping() -> dict:
    """Answer with who ran it: proves a worker consumes from the configured broker."""
    return {"hostname": socket.gethostname(), "pid": os.getpid()}
