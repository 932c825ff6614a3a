"""/healthz: 200 with the status of the database and broker, 503 when either is down."""

import json

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
    assert body["broker"]["ok"] is False
    assert body["broker"]["error"]


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
    assert json.loads(body)["database"]["ok"] is False
    assert json.loads(body)["broker"]["ok"] is True


def test_health_does_not_leak_credentials(client, settings):
    settings.CELERY_BROKER_URL = "redis://:hunter2@127.0.0.1:9/0"
    assert b"hunter2" not in client.get("/healthz").content
