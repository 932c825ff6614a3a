"""A process that serves steps loads the guardian's model when it starts (a gunicorn worker in
post_worker_init, a Celery worker when its pool starts), so that its first step is not the one
that waits a second or two for it."""

import json

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from demo.setup import demo_policy_version
from guardian_core import gunicorn_conf
from guardian_core.adapters import local
from guardian_core.celery import guardian_warm_in_child, guardian_warm_in_worker
from guardian_core.engine.conditions import Condition
from guardian_core.services import api_token_create

pytestmark = pytest.mark.django_db

READ_ORDER = {
    "name": "lookup_order",
    "description": "Read an order by its id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
    "risk_class": "read_only",
}


@pytest.fixture
def fresh_process(monkeypatch):
    """This process as one that never asked the local guardian; load_bundled counted."""
    monkeypatch.setattr(local, "_MODELS", {})
    loads = []
    load_bundled = local.load_bundled

    def counted(directory):
        loads.append(directory)
        return load_bundled(directory)

    monkeypatch.setattr(local, "load_bundled", counted)
    return loads


@pytest.mark.django_db(transaction=True)  # the hook closes the connection, as a worker's does
def test_a_gunicorn_worker_loads_the_model_before_its_first_step(fresh_process, integrator):
    gunicorn_conf.post_worker_init(worker=None)
    assert fresh_process == [local.MODEL_DIR]
    assert set(local._MODELS) == set(Condition)

    demo_policy_version()
    _, secret = api_token_create(user=integrator, name="loop")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    run = client.post(
        reverse("api:run-start"),
        {
            "goal": "Look up order A1.",
            "tools": [READ_ORDER],
            "actor": "external",
            "guardian": "local",
        },
        format="json",
    ).json()
    body = {"step": 0, "calls": [{"tool": "lookup_order", "arguments": {"order_id": "A1"}}]}
    gate = client.post(
        reverse("api:run-steps", args=[run["id"]]),
        json.dumps(body),
        content_type="application/json",
    )
    assert gate.status_code == 201, gate.content
    decided = client.post(
        gate.json()["results_url"],
        {"results": [{"position": 0, "result": "A1: paid 49.90 EUR, shipped"}]},
        format="json",
    )
    assert decided.status_code == 200, decided.content
    assert decided.json()["decision"]["outcome"]
    assert fresh_process == [local.MODEL_DIR]  # the steps loaded nothing


def test_a_celery_pool_child_loads_the_model_when_it_starts(fresh_process):
    guardian_warm_in_child()
    assert fresh_process == [local.MODEL_DIR]


class _Worker:
    def __init__(self, pool: str) -> None:
        self.pool_cls = pool


def test_a_solo_or_threads_worker_loads_it_itself_a_prefork_parent_leaves_it_to_its_children(
    fresh_process,
):
    guardian_warm_in_worker(sender=_Worker("prefork"))
    assert fresh_process == []
    guardian_warm_in_worker(sender=_Worker("threads"))
    assert fresh_process == [local.MODEL_DIR]
