"""The Celery app: configured from Django settings (CELERY_*), tasks found in each app."""

import logging
import logging.config
import os

from celery import Celery
from celery.signals import (
    before_task_publish,
    celeryd_init,
    setup_logging,
    task_postrun,
    task_prerun,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
    worker_ready,
    worker_shutdown,
)
from django.conf import settings
from django.db import close_old_connections

from guardian_core import logs

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
logger = logging.getLogger(__name__)

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


# ---- the guardian's model loaded before the first task (guardian_core/warming.py) ----------
# A prefork pool's child loads it when it starts (loading it in the parent before the fork
# would share onnxruntime's threads across it); a solo or threads pool runs its tasks in the
# worker's own process, which loads it before it consumes.


@worker_process_init.connect
def guardian_warm_in_child(**kwargs) -> None:
    from guardian_core.warming import serving_process_start

    serving_process_start("celery worker")


@worker_init.connect
def guardian_warm_in_worker(sender=None, **kwargs) -> None:
    pool = str(getattr(sender, "pool_cls", "") or app.conf.worker_pool or "prefork")
    if "prefork" in pool.lower() or "processes" in pool.lower():
        return  # each child loads it (above)
    from guardian_core.warming import serving_process_start

    serving_process_start("celery worker")


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


# ---- Metrics (issue 26, docs/OPERATIONS.md, Metrics) ----
# The worker serves its own figures (turns, guardian calls) on GUARDIAN_WORKER_METRICS_PORT,
# with prometheus_client's start_http_server, as its documentation describes for a process
# that is not a web server; with several pool processes (prefork) it serves them all through
# the library's multiprocess mode (PROMETHEUS_MULTIPROC_DIR set before the worker starts:
# every child writes there, the server in the main process sums them). Started on
# worker_ready, in the main process, once: a server per child would need a port per child.
# The heartbeat is written by the same process, so its age says the worker itself is alive.


_heartbeat = None


@worker_ready.connect
def metrics_and_heartbeat_start(sender=None, **kwargs) -> None:
    from django.conf import settings

    from guardian_core import metrics

    port = settings.GUARDIAN_WORKER_METRICS_PORT
    if port:
        from prometheus_client import start_http_server

        start_http_server(
            port,
            addr=settings.GUARDIAN_WORKER_METRICS_ADDRESS,
            registry=metrics.registry_for_scrape(),
        )
        logger.info("worker metrics on %s:%s", settings.GUARDIAN_WORKER_METRICS_ADDRESS, port)
    hostname = getattr(sender, "hostname", None) or metrics.worker_hostname()
    global _heartbeat
    _heartbeat = metrics.heartbeat_start(
        lambda: metrics.heartbeat_write(settings.VAR_DIR, settings.CELERY_BROKER_URL, hostname),
        settings.GUARDIAN_WORKER_HEARTBEAT_SECONDS,
        on_error=lambda exc: logger.warning("worker heartbeat not written: %s", exc),
    )


@worker_process_shutdown.connect
def metrics_process_dead(pid=None, **kwargs) -> None:
    """A prefork child that ends: multiprocess mode drops its live gauges (the library's rule)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())


@worker_shutdown.connect
def heartbeat_forget(sender=None, **kwargs) -> None:
    from django.conf import settings

    from guardian_core import metrics

    metrics.HEARTBEAT_STOP.set()
    if _heartbeat is not None:  # a write under way would land after the removal below
        _heartbeat.join(timeout=5)
    hostname = getattr(sender, "hostname", None) or metrics.worker_hostname()
    try:
        metrics.heartbeat_remove(settings.VAR_DIR, settings.CELERY_BROKER_URL, hostname)
    except Exception as exc:  # the broker may be what is going away
        logger.warning("worker heartbeat not removed: %s", exc)
