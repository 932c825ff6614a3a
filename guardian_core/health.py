"""Reachability checks of the database and the broker, for /healthz and `manage.py preflight`.

Each check is bounded in time: a server that accepts a connection and then never answers
must not hold /healthz (or a load balancer's probe) for minutes. The "error" a check returns
is for operators (preflight, the log); /healthz shows anonymous callers ok or down only.
"""

from django.conf import settings
from django.db import connection, transaction
from kombu import Connection

from guardian_core.env import redact_url

# Seconds one check may take: connecting, and then one round trip.
CHECK_TIMEOUT_SECONDS = 2.0


def database_status() -> dict:
    """{"ok", "vendor"} and, when down, "error": the first line of what the driver said.

    Connecting is bounded by the connection's connect_timeout (guardian_core/env.py); the
    query by a statement timeout on PostgreSQL and SQLite's own busy timeout.
    """
    try:
        connection.ensure_connection()
        owns_transaction = not connection.in_atomic_block
        with transaction.atomic(), connection.cursor() as cursor:
            if connection.vendor == "postgresql" and owns_transaction:
                # SET LOCAL ends with this transaction: the app's own queries are untouched.
                milliseconds = int(CHECK_TIMEOUT_SECONDS * 1000)
                cursor.execute(f"SET LOCAL statement_timeout = {milliseconds}")
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any failure of the driver means "down"; the line says which
        return {"ok": False, "vendor": connection.vendor, "error": _first_line(exc)}
    return {"ok": True, "vendor": connection.vendor}


def broker_status() -> dict:
    """{"ok", "transport"} and, when down, "error"; gives up after CHECK_TIMEOUT_SECONDS for
    the connection and as long again for the answer."""
    options = dict(settings.CELERY_BROKER_TRANSPORT_OPTIONS)
    # Redis: without a socket timeout a server that accepts and never answers hangs PING.
    options.update(
        socket_timeout=CHECK_TIMEOUT_SECONDS, socket_connect_timeout=CHECK_TIMEOUT_SECONDS
    )
    broker = Connection(
        settings.CELERY_BROKER_URL,
        transport_options=options,
        connect_timeout=CHECK_TIMEOUT_SECONDS,
    )
    transport = broker.transport_cls
    try:
        with broker:
            broker.ensure_connection(max_retries=0, timeout=CHECK_TIMEOUT_SECONDS)
            # A connected Redis client can still be unusable (e.g. wrong db index): one
            # round trip proves it answers.
            broker.default_channel.client.ping() if transport == "redis" else None
    except Exception as exc:  # any failure of the transport means "down"
        return {"ok": False, "transport": transport, "error": _first_line(exc)}
    return {"ok": True, "transport": transport}


def public_status(status: dict) -> dict:
    """A check's status without its error text: what anyone on the network may see."""
    return {key: value for key, value in status.items() if key != "error"}


def describe_database_failure(status: dict) -> str:
    return (
        f"cannot use the database at DATABASE_URL={redact_url(settings.DATABASE_URL)}"
        f" ({status['error']})"
    )


def describe_broker_failure(status: dict) -> str:
    url = redact_url(settings.CELERY_BROKER_URL)
    return f"cannot reach the broker at CELERY_BROKER_URL={url} ({status['error']})"


def _first_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
