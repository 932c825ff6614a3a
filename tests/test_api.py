"""The REST API: JSON for the right role, and an OpenAPI schema that lists every endpoint."""

import pytest
import yaml

from tests.factories import make_escalation, make_run

pytestmark = pytest.mark.django_db


def test_auditors_read_runs_as_json(client, auditor):
    run = make_run(goal="Refund order ord_9")
    client.force_login(auditor)
    body = client.get("/api/runs/").json()
    assert body["count"] == 1
    assert body["results"][0]["goal"] == "Refund order ord_9"
    assert body["results"][0]["policy_version"] == run.policy_version.number
    assert client.get(f"/api/runs/{run.pk}/").json()["id"] == run.pk


def test_a_missing_run_is_404(client, auditor):
    client.force_login(auditor)
    assert client.get("/api/runs/999999/").status_code == 404


def test_reviewers_read_open_escalations_as_json(client, reviewer):
    escalation = make_escalation()
    client.force_login(reviewer)
    body = client.get("/api/escalations/").json()
    assert [item["id"] for item in body["results"]] == [escalation.pk]
    assert body["results"][0]["turn_index"] == escalation.turn.index


def test_the_openapi_schema_lists_every_api_endpoint(client, auditor):
    client.force_login(auditor)
    schema = yaml.safe_load(client.get("/api/schema/").content)
    assert schema["openapi"].startswith("3.")
    assert set(schema["paths"]) == {
        "/api/runs/",
        "/api/runs/{id}/",
        "/api/escalations/",
        "/api/policy-versions/",
    }


def test_unsafe_api_methods_are_not_allowed_on_read_endpoints(client, auditor):
    client.force_login(auditor)
    assert client.post("/api/runs/", {}, content_type="application/json").status_code in {403, 405}
