"""/healthz: 200 with the status of the database and broker, 503 when either is down; ok or
down only for anyone who asks, the detail in the log, and never a hang."""

import json
import logging
import socket
import threading
import time

import pytest
from django.db import connection

from tests.processes import run_manage

pytestmark = pytest.mark.django_db


def test_health_is_ok_when_the_configured_database_and_broker_answer(client, settings):
    response = client.get("/healthz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ok"
    assert body["database"] == {"ok": True, "vendor": connection.vendor}
    expected_transport = settings.CELERY_BROKER_URL.split(":", 1)[0]
    assert body["broker"] == {"ok": True, "transport": expected_transport}


def test_health_is_503_when_the_broker_is_down(client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"
    response = client.get("/healthz")
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "down"
    assert body["database"]["ok"] is True
    assert body["broker"] == {"ok": False, "transport": "redis"}


def test_health_is_503_when_the_database_is_down():
    # A real server that does not answer: a closed port, checked from a fresh process.
    result = run_manage(
        "shell",
        "-c",
        "from django.test import Client; r = Client().get('/healthz');"
        "print(r.status_code); print(r.content.decode())",
        DATABASE_URL="postgres://guardian:pw@127.0.0.1:9/guardian",
        ALLOWED_HOSTS="testserver",
    )
    assert result.returncode == 0, result.stderr
    status, body = result.stdout.strip().splitlines()[-2:]
    assert status == "503"
    assert json.loads(body)["database"] == {"ok": False, "vendor": "postgresql"}
    assert json.loads(body)["broker"]["ok"] is True
    assert "127.0.0.1" not in body  # the driver's text stayed in the log


def test_health_does_not_leak_credentials(client, settings):
    settings.CELERY_BROKER_URL = "redis://:hunter2@127.0.0.1:9/0"
    assert b"hunter2" not in client.get("/healthz").content


def test_health_shows_anonymous_callers_ok_or_down_but_logs_the_detail(client, settings, caplog):
    # The driver's text names hosts and ports (and can name users): operators' business only.
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:9/0"
    with caplog.at_level(logging.WARNING, logger="guardian_core.views"):
        response = client.get("/healthz")
    assert response.status_code == 503
    assert b"127.0.0.1" not in response.content
    assert b"error" not in response.content
    assert "cannot reach the broker" in caplog.text
    assert "127.0.0.1:9" in caplog.text


@pytest.fixture
def silent_server():
    """A real TCP server on 127.0.0.1 that accepts connections and never answers a byte."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_broker_that_accepts_and_never_answers_does_not_hang_health(
    client, settings, silent_server
):
    settings.CELERY_BROKER_URL = f"redis://127.0.0.1:{silent_server}/0"
    started = time.monotonic()
    response = client.get("/healthz")
    elapsed = time.monotonic() - started
    assert response.status_code == 503
    assert response.json()["broker"] == {"ok": False, "transport": "redis"}
    # A correctness bound, not a benchmark: without socket timeouts this hangs for good.
    assert elapsed < 15
