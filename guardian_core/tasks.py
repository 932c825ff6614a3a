"""Celery tasks of the floor: the worker ping (the rooms' tasks are in their own tasks.py)."""

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
