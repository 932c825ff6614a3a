"""`manage.py preflight`: check that DATABASE_URL and CELERY_BROKER_URL answer (and, with
--port, that the demo's web port is free), one line each."""

import errno
import socket
import sys

from django.core.management.base import BaseCommand, CommandParser
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

from guardian_core.env import redact_url
from guardian_core.health import (
    broker_status,
    database_status,
    describe_broker_failure,
    describe_database_failure,
)

# The address Procfile.demo's web server binds.
DEMO_HOST = "127.0.0.1"


def port_is_free(port: int, host: str = DEMO_HOST) -> bool:
    """Whether a server could listen on host:port now, tried the way runserver binds it."""
    return _bind_error(port, host) is None


def _bind_error(port: int, host: str) -> OSError | None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        # runserver sets SO_REUSEADDR too: a port left in TIME_WAIT by a stopped server is free
        # to it, while one another process listens on is not.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            return exc
    return None


def port_problem(port: int, host: str = DEMO_HOST) -> str | None:
    """Why the web server could not listen on host:port, with the command that picks another
    port; None when it could."""
    if not 0 < port < 65536:
        return _("--port %(port)s is not a TCP port (1-65535)") % {"port": port}
    error = _bind_error(port, host)
    if error is None:
        return None
    free = next((p for p in range(port + 1, min(port + 50, 65536)) if port_is_free(p, host)), None)
    choose = f"make demo PORT={free or port + 1}"
    if error.errno == errno.EADDRINUSE:
        return _(
            "port %(port)s on %(host)s is already in use (another server, or a demo still "
            "running?). Stop it, or choose another port: %(command)s"
        ) % {"port": port, "host": host, "command": choose}
    return _(
        "cannot listen on port %(port)s on %(host)s (%(error)s). Choose another: %(command)s"
    ) % {"port": port, "host": host, "error": error.strerror, "command": choose}


class Command(BaseCommand):
    help = gettext_lazy(
        "Check that the database and the broker are reachable, and with --port that the web "
        "port is free; exit 2 if any is not."
    )

    requires_system_checks: list = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--port",
            type=int,
            help=_("also check that this port is free on %(host)s (make demo passes PORT)")
            % {"host": DEMO_HOST},
        )

    def handle(self, *args, port: int | None = None, **options) -> None:
        from django.conf import settings

        ok = True
        # First: make demo runs this before it migrates and resets the demo passwords, so a busy
        # port stops it before it changes anything.
        if port is not None:
            problem = port_problem(port)
            if problem:
                self.stderr.write(f"guardian: {problem}")
                ok = False
            else:
                self.stdout.write(f"port: ok ({DEMO_HOST}:{port} is free)")
        database = database_status()
        broker = broker_status()
        if database["ok"]:
            self.stdout.write(f"database: ok ({database['vendor']})")
        else:
            self.stderr.write(f"guardian: {describe_database_failure(database)}")
        if broker["ok"]:
            url = redact_url(settings.CELERY_BROKER_URL)
            self.stdout.write(f"broker: ok ({broker['transport']}, {url})")
        else:
            self.stderr.write(f"guardian: {describe_broker_failure(broker)}")
        if not (ok and database["ok"] and broker["ok"]):
            sys.exit(2)
