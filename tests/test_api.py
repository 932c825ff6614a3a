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
        "/api/runs/start/",
        "/api/runs/{id}/cancel/",
        "/api/escalations/",
        "/api/policy-versions/",
    }


def test_unsafe_api_methods_are_not_allowed_on_read_endpoints(client, auditor):
    client.force_login(auditor)
    assert client.post("/api/runs/", {}, content_type="application/json").status_code in {403, 405}


def test_an_admin_starts_a_run_that_pins_the_active_policy(client, admin):
    from guardian_core.demo import demo_policy_version

    version = demo_policy_version()
    client.force_login(admin)
    response = client.post(
        "/api/runs/start/",
        {
            "goal": "Tell the customer when ord_1001 ships",
            "tools": ["read_order"],
            "actor": "scripted",
            "guardian": "local",
            "budgets": {"max_turns": 5},
            "config": {"scenario": {"name": "api", "goal": "g", "actor": {"turns": []}}},
        },
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["status"], body["policy_version"]) == ("running", version.number)


def test_starting_a_run_with_bad_input_names_every_bad_field(client, admin):
    from guardian_core.demo import demo_policy_version

    demo_policy_version()
    client.force_login(admin)
    response = client.post(
        "/api/runs/start/",
        {"tools": "read_order", "actor": "hal9000", "guardian": "scripted"},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert set(response.json()) == {"goal", "tools", "actor"}


def test_starting_a_run_with_an_unknown_tool_is_refused_with_the_tool_named(client, admin):
    from guardian_core.demo import demo_policy_version

    demo_policy_version()
    client.force_login(admin)
    response = client.post(
        "/api/runs/start/",
        {"goal": "g", "tools": ["launch_rocket"], "actor": "scripted", "guardian": "scripted"},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "launch_rocket" in response.json()["detail"]


def test_cancelling_a_finished_run_is_refused(client, admin):
    run = make_run(status="succeeded", final_answer="done")
    client.force_login(admin)
    response = client.post(f"/api/runs/{run.pk}/cancel/")
    assert response.status_code == 400
