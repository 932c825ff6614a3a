"""The two calls an outside loop makes at every step take a lean path (a plain Django view, the
token and its permission in one statement) for their common request; every other request is
the DRF view's, answered as before."""

import json

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from demo.setup import demo_policy_version
from guardian_core.models import ApiToken
from guardian_core.services import api_token_create
from runs.external_api import RunStepResultsApi, RunStepsApi

pytestmark = pytest.mark.django_db

READ_ORDER = {
    "name": "lookup_order",
    "description": "Read an order by its id.",
    "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
    "risk_class": "read_only",
}
SCRIPTED = {"scenario": {"name": "x", "goal": "g", "actor": {"turns": []}, "guardian": {}}}


@pytest.fixture
def api(integrator, settings):
    settings.GUARDIAN_ALLOW_SCRIPTED_ADAPTERS = True
    demo_policy_version()
    _, secret = api_token_create(user=integrator, name="loop")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def _run(api) -> int:
    body = {
        "goal": "Look up order A1.",
        "tools": [READ_ORDER],
        "actor": "external",
        "guardian": "scripted",
        "config": SCRIPTED,
    }
    response = api.post(reverse("api:run-start"), body, format="json")
    assert response.status_code == 201, response.content
    return response.json()["id"]


def _post(api, url: str, body) -> object:
    return api.post(url, json.dumps(body), content_type="application/json")


def test_a_common_step_is_answered_without_the_drf_views(api, monkeypatch):
    run = _run(api)

    def never(*args, **kwargs):
        raise AssertionError("the common request is the lean path's")

    monkeypatch.setattr(RunStepsApi, "post", never)
    monkeypatch.setattr(RunStepResultsApi, "post", never)
    body = {"step": 0, "calls": [{"tool": "lookup_order", "arguments": {"order_id": "A1"}}]}
    gate = _post(api, reverse("api:run-steps", args=[run]), body)
    assert gate.status_code == 201, gate.content
    assert gate["Content-Type"] == "application/json"
    assert gate.json()["status"] == "run"
    assert _post(api, reverse("api:run-steps", args=[run]), body).status_code == 200  # a retry
    results = {"results": [{"position": 0, "result": "A1: paid"}]}
    decided = _post(api, gate.json()["results_url"], results)
    assert decided.status_code == 200, decided.content
    assert decided.json()["decision"]["may_continue"] is True
    # A conflict the service finds is answered in the API's one error shape.
    other = {"step": 0, "calls": [{"tool": "lookup_order", "arguments": {"order_id": "B2"}}]}
    conflict = _post(api, reverse("api:run-steps", args=[run]), other)
    assert conflict.status_code == 409
    assert list(conflict.json()) == ["detail"]


def test_what_the_lean_path_does_not_take_the_drf_view_answers_naming_each_field(api):
    run = _run(api)
    bad = {"step": "zero", "calls": [{"tool": "", "arguments": {}}], "user_messages": [{}]}
    refused = _post(api, reverse("api:run-steps", args=[run]), bad)
    assert refused.status_code == 400
    assert {"step", "calls", "user_messages"} <= set(refused.json())
    missing = _post(api, reverse("api:run-step-results", args=[run, 0]), {"results": [{}]})
    assert missing.status_code == 400
    assert "results" in missing.json()


def test_a_revoked_token_or_none_is_refused_as_before(api, integrator):
    run = _run(api)
    ApiToken.objects.filter(user=integrator).update(revoked_at="2026-01-01T00:00:00Z")
    body = {"step": 0, "calls": []}
    assert _post(api, reverse("api:run-steps", args=[run]), body).status_code == 403
    api.credentials()
    assert _post(api, reverse("api:run-steps", args=[run]), body).status_code == 403


def test_a_user_without_the_permission_is_refused(db, django_user_model, settings):
    settings.GUARDIAN_ALLOW_SCRIPTED_ADAPTERS = True
    demo_policy_version()
    user = django_user_model.objects.create_user("someone")
    _, secret = api_token_create(user=user, name="no rights")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    response = _post(client, reverse("api:run-steps", args=[1]), {"step": 0})
    assert response.status_code == 403
    assert list(response.json()) == ["detail"]
