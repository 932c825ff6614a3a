"""Celery tasks of the floor: the worker ping (the rooms' tasks are in their own tasks.py)."""

import itertools
import os
import socket

from celery import shared_task
from django.db import connection
from django.db.backends.signals import connection_created

# Each database connection this process opens gets the next number: a closed connection's
# object is freed, and the next one often takes its address, so id() alone cannot tell a new
# connection from a kept one.
_serials = itertools.count(1)
_opened = {"serial": 0}


def _count_connection(sender, connection, **kwargs) -> None:
    _opened["serial"] = next(_serials)


connection_created.connect(_count_connection, dispatch_uid="guardian_core.worker_ping")


@shared_task(name="guardian_core.worker_ping")
def worker_ping() -> dict:
    """Answer with who ran it and which database connection it used: proves a worker consumes
    from the configured broker, and whether it keeps its connection between tasks."""
    connection.ensure_connection()
    return {
        "hostname": socket.gethostname(),
        "pid": os.getpid(),
        "db_connection": f"{id(connection.connection)}#{_opened['serial']}",
    }
