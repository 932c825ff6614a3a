"""The Celery app: configured from Django settings (CELERY_*), tasks found in each app."""

import os

from celery import Celery
from celery.signals import task_postrun, task_prerun
from django.db import close_old_connections

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")

app = Celery("guardian_core")
app.config_from_object("django.conf:settings", namespace="CELERY")
# Celery's Django fixup closes the worker's database connection around every task unless this
# is set, and reconnecting costs more than the queries of a whole turn. Connections are closed
# the way Django closes them around a web request instead: when broken, or older than
# CONN_MAX_AGE (the handlers below).
app.conf.update(CELERY_DB_REUSE_MAX=1_000_000)
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def close_broken_or_old_connections(**kwargs) -> None:
    close_old_connections()
