"""gunicorn's settings (`gunicorn -c python:guardian_core.gunicorn_conf ...`): with
GUARDIAN_LOG_FORMAT=json, gunicorn's own lines (start-up, its workers, an access log if one is
asked for) are JSON lines like the app's, so the web's whole stream parses. With the plain
format it changes nothing."""

import os
from pathlib import Path

from guardian_core.env import env_str, load_project_dotenv

# The same .env as the settings read (gunicorn reads this module before the app loads).
load_project_dotenv(Path(__file__).resolve().parent.parent)

if env_str("GUARDIAN_LOG_FORMAT", "plain").lower() == "json":
    _console = {
        "class": "logging.StreamHandler",
        "formatter": "json",
        "stream": "ext://sys.stderr",
    }
    # Merged over gunicorn's defaults key by key: every handler here names this formatter.
    logconfig_dict = {
        "formatters": {"json": {"()": "guardian_core.logs.json_formatter"}},
        "handlers": {"console": _console, "error_console": _console},
        "root": {"level": "INFO", "handlers": ["console"]},
        "loggers": {
            "gunicorn.error": {"level": "INFO", "handlers": [], "propagate": True},
            "gunicorn.access": {"level": "INFO", "handlers": [], "propagate": True},
        },
    }


def post_worker_init(worker) -> None:
    """A worker whose app has loaded, before it takes a request: the guardian's model loads now
    (guardian_core/warming.py), so that its first step does not wait a second or two for it."""
    from django.db import connections

    from guardian_core.warming import serving_process_start

    serving_process_start("gunicorn worker")
    # The requests run on the worker's threads, each with its own connection: this thread's
    # (the active model version was read) would only sit idle.
    connections.close_all()


def child_exit(server, worker) -> None:
    """A gunicorn worker that ends: in prometheus_client's multiprocess mode (several workers
    behind one /metrics) its live gauges go with it, as the library's documentation asks."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
