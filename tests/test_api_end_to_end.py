"""A machine drives a run from its start through an escalation to its verdict and its end using
only HTTP and API tokens: a real Celery worker advances the run, nothing is written through the
ORM once the users, their tokens and the active policy version exist."""

import time

import pytest
from django.test import Client

from demo.setup import demo_policy_version
from guardian_core.services import api_token_create
from tests.processes import start_worker, stop_worker
from tests.runs_helpers import scripted_scenario
from tests.test_worker_runs import worker_env

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]


def _poll(client: Client, url: str, headers: dict, done, *, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    body: dict = {}
    while time.monotonic() < deadline:
        response = client.get(url, headers=headers)
        assert response.status_code == 200, response.content
        body = response.json()
        if done(body):
            return body
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting on {url}: last answer {body}")


def test_a_token_holder_starts_a_run_and_a_reviewer_token_approves_its_refund(
    admin, reviewer, auditor
):
    demo_policy_version()
    _, admin_secret = api_token_create(user=admin, name="operator")
    _, reviewer_secret = api_token_create(user=reviewer, name="review bot")
    _, auditor_secret = api_token_create(user=auditor, name="audit bot")
    as_admin = {"Authorization": f"Bearer {admin_secret}"}
    as_reviewer = {"Authorization": f"Bearer {reviewer_secret}"}
    as_auditor = {"Authorization": f"Bearer {auditor_secret}"}
    # enforce_csrf_checks: a token request needs no CSRF token, a session's would.
    client = Client(enforce_csrf_checks=True)
    scenario = scripted_scenario("refund_waits_for_approval")
    scripted = {key: value for key, value in scenario.items() if key != "expect"}

    worker = start_worker(**worker_env(GUARDIAN_DEADLINE_SECONDS="600"))
    try:
        started = client.post(
            "/api/runs/start/",
            {
                "goal": scenario["goal"],
                "acceptance_criteria": scenario["acceptance_criteria"],
                "tools": scenario["tools"],
                "actor": "scripted",
                "guardian": "scripted",
                "budgets": scenario["budgets"],
                "config": {"scenario": scripted},
            },
            content_type="application/json",
            headers=as_admin,
        )
        assert started.status_code == 201, started.content
        run_url = f"/api/runs/{started.json()['id']}/"

        _poll(client, run_url, as_auditor, lambda run: run["status"] == "waiting")

        listed = client.get("/api/escalations/", headers=as_reviewer).json()
        [escalation] = [e for e in listed["results"] if e["run"] == started.json()["id"]]
        base = f"/api/escalations/{escalation['id']}/"
        claimed = client.post(f"{base}claim/", headers=as_reviewer)
        assert claimed.status_code == 200, claimed.content
        assert claimed.json()["claimed_by"] == "reviewer"
        [held] = claimed.json()["held_calls"]
        assert held["tool"] == "issue_refund"

        resolved = client.post(
            f"{base}resolve/",
            {
                "decision": "approve",
                "seen_hashes": {str(held["position"]): held["action_hash"]},
            },
            content_type="application/json",
            headers=as_reviewer,
        )
        assert resolved.status_code == 200, resolved.content
        assert resolved.json()["verdict"]["decision"] == "approve"
        assert resolved.json()["status"] == "approved"

        run = _poll(client, run_url, as_auditor, lambda run: run["status"] != "running")
        assert (run["status"], run["stop_reason"]) == ("succeeded", "goal_reached")
        assert run["final_answer"] == "Refund of 49.90 issued for ord_4472."

        # The decision log says the same, through the API: the refund ran once, approved.
        turns = client.get(f"{run_url}turns/", headers=as_auditor).json()
        assert turns["count"] == run["turn_count"]
        refund_turn = next(
            t
            for t in (
                client.get(f"{run_url}turns/{turn['index']}/", headers=as_auditor).json()
                for turn in turns["results"]
            )
            if any(c["tool"] == "issue_refund" and c["status"] == "done" for c in t["tool_calls"])
        )
        assert refund_turn["decision"] is not None
        # A second verdict is refused: the first one stands.
        again = client.post(
            f"{base}resolve/",
            {"decision": "reject", "reason": "changed my mind"},
            content_type="application/json",
            headers=as_reviewer,
        )
        assert again.status_code == 409
        assert "already decided" in " ".join(again.json()["detail"])
    finally:
        stop_worker(worker)
