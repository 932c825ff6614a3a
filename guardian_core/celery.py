"""The Celery app: configured from Django settings (CELERY_*), tasks found in each app."""

import logging.config
import os

from celery import Celery
from celery.signals import (
    before_task_publish,
    celeryd_init,
    setup_logging,
    task_postrun,
    task_prerun,
)
from django.conf import settings
from django.db import close_old_connections

from guardian_core import logs

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


# ---- structured logs (issue 26, guardian_core/logs.py) ---------------------------------------


@before_task_publish.connect
def carry_request_id(headers=None, **kwargs) -> None:
    logs.task_publish_headers(headers)


@task_prerun.connect
def bind_task_context(task=None, args=None, kwargs=None, **extra) -> None:
    logs.task_context_bind(task, args, kwargs)


@task_postrun.connect
def clear_task_context(**kwargs) -> None:
    logs.task_context_clear()


if settings.GUARDIAN_LOG_FORMAT == "json":
    # Celery then leaves logging to Django's LOGGING (one JSON line per record, worker and
    # beat alike) instead of installing its own format on the root logger.
    @setup_logging.connect
    def use_django_logging(**kwargs) -> None:
        logging.config.dictConfig(settings.LOGGING)
        logging.captureWarnings(True)

    @celeryd_init.connect
    def no_banner(instance=None, **kwargs) -> None:
        # The worker's start-up banner is printed, not logged: it would be the one line of
        # the stream that is not JSON. (Beat's: start it with `celery -q beat`.) Its start-up
        # checks warn before Celery sets up logging: they are logged as JSON lines too.
        use_django_logging()
        if instance is not None:
            instance.quiet = True
        # Its shutdown notices too, printed from a signal handler (celery.apps.worker's
        # safe_say, looked up when the handler runs).
        from celery.apps import worker as celery_worker

        if hasattr(celery_worker, "safe_say"):
            celery_worker.safe_say = logs.say_as_json
