"""Reachability checks of the database and the broker, for /healthz and `manage.py preflight`."""

from django.conf import settings
from django.db import connection
from kombu import Connection

from guardian_core.env import redact_url

BROKER_TIMEOUT_SECONDS = 3.0


def database_status() -> dict:
    """{"ok", "vendor"} and, when down, "error": the first line of what the driver said."""
    try:
        connection.ensure_connection()
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as exc:  # any failure of the driver means "down"; the line says which
        return {"ok": False, "vendor": connection.vendor, "error": _first_line(exc)}
    return {"ok": True, "vendor": connection.vendor}


def broker_status() -> dict:
    """{"ok", "transport"} and, when down, "error"; gives up after a few seconds."""
    broker = Connection(
        settings.CELERY_BROKER_URL,
        transport_options=settings.CELERY_BROKER_TRANSPORT_OPTIONS,
        connect_timeout=BROKER_TIMEOUT_SECONDS,
    )
    transport = broker.transport_cls
    try:
        with broker:
            broker.ensure_connection(max_retries=0, timeout=BROKER_TIMEOUT_SECONDS)
            # A connected Redis client can still be unusable (e.g. wrong db index): one
            # round trip proves it answers.
            broker.default_channel.client.ping() if transport == "redis" else None
    except Exception as exc:  # any failure of the transport means "down"
        return {"ok": False, "transport": transport, "error": _first_line(exc)}
    return {"ok": True, "transport": transport}


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
