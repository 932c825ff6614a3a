"""The record cannot be rewritten in the Django admin: runs, turns, decisions, tool calls,
escalations, verdicts and labelled examples can be looked at, never added, changed or deleted,
by the admin role or even a superuser. State changes go through the services only."""

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from escalations.models import LabelledExample, Verdict, VerdictDecision
from runs.models import Run, RunStatus
from tests.factories import (
    make_decision,
    make_escalation,
    make_run,
    make_tool_call,
    make_turn,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", password="pw")


def finished_run() -> Run:
    return make_run(
        status=RunStatus.SUCCEEDED,
        stop_reason="goal_reached",
        final_answer="Refund of 49.90 issued for ord_4472.",
        finished_at=timezone.now(),
    )


def forged(run: Run) -> dict:
    """The change form of `run` with its answer, stop reason, lease and config rewritten."""
    return {
        "goal": run.goal,
        "acceptance_criteria": "[]",
        "tools": "[]",
        "actor": run.actor,
        "guardian": run.guardian,
        "budgets": "{}",
        "config": '{"forged": true}',
        "policy_version": run.policy_version_id,
        "status": run.status,
        "stop_reason": "forged",
        "final_answer": "Refund of 999.00 issued for ord_4472.",
        "lease_token": "forged-lease",
        "failures": "0",
        "turns-TOTAL_FORMS": "0",
        "turns-INITIAL_FORMS": "0",
    }


def row(run: Run) -> tuple:
    run.refresh_from_db()
    return (run.status, run.stop_reason, run.final_answer, run.config, run.lease_token)


def test_the_admin_role_cannot_rewrite_a_finished_runs_answer_lease_or_config_in_the_admin(
    client, admin
):
    run = finished_run()
    before = row(run)
    client.force_login(admin)
    response = client.post(f"/admin/runs/run/{run.pk}/change/", forged(run))
    assert response.status_code == 403
    assert row(run) == before


def test_the_admin_role_cannot_add_a_run_by_hand_in_the_admin(client, admin):
    run = finished_run()
    client.force_login(admin)
    assert client.get("/admin/runs/run/add/").status_code == 403
    assert client.post("/admin/runs/run/add/", forged(run)).status_code == 403
    assert Run.objects.count() == 1


def test_the_admin_role_still_sees_a_run_read_only_in_the_admin(client, admin):
    run = finished_run()
    client.force_login(admin)
    response = client.get(f"/admin/runs/run/{run.pk}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "Refund of 49.90 issued for ord_4472." in page
    assert 'name="status"' not in page
    assert 'name="_save"' not in page


def the_record() -> dict[str, object]:
    """One row of every model of the record, keyed by its admin URL path."""
    turn = make_turn(run=finished_run())
    escalation = make_escalation(turn=turn)
    person = get_user_model().objects.create_user("a_reviewer")
    verdict = Verdict.objects.create(
        escalation=escalation, decision=VerdictDecision.APPROVE, reviewer=person
    )
    example = LabelledExample.objects.create(
        condition="integrity",
        projection={"goal": "Refund ord_1"},
        probability=0.2,
        label=False,
        source=LabelledExample.Source.HUMAN,
        question_set_version="q1",
        model_version="local-1",
        verdict=verdict,
        labelled_by=person,
    )
    return {
        "runs/run": turn.run,
        "runs/turn": turn,
        "runs/decision": make_decision(turn=turn),
        "runs/toolcall": make_tool_call(turn=turn),
        "escalations/escalation": escalation,
        "escalations/verdict": verdict,
        "escalations/labelledexample": example,
    }


MODELS = [
    "runs/run",
    "runs/turn",
    "runs/decision",
    "runs/toolcall",
    "escalations/escalation",
    "escalations/verdict",
    "escalations/labelledexample",
]


@pytest.mark.parametrize("model", MODELS)
def test_not_even_a_superuser_can_add_change_or_delete_the_record_in_the_admin(
    client, superuser, model
):
    obj = the_record()[model]
    client.force_login(superuser)
    base = f"/admin/{model}/"
    assert client.get(f"{base}{obj.pk}/change/").status_code == 200  # looking is allowed
    assert client.post(f"{base}{obj.pk}/change/", {}).status_code == 403
    assert client.get(f"{base}add/").status_code == 403
    assert client.post(f"{base}{obj.pk}/delete/", {"post": "yes"}).status_code == 403
    assert type(obj).objects.filter(pk=obj.pk).exists()


def test_a_verdict_and_a_labelled_example_cannot_be_changed_by_the_admin_role(client, admin):
    record = the_record()
    client.force_login(admin)
    for model in ("escalations/verdict", "escalations/labelledexample"):
        obj = record[model]
        assert client.post(f"/admin/{model}/{obj.pk}/change/", {}).status_code == 403
        assert client.post(f"/admin/{model}/add/", {}).status_code == 403
    record["escalations/verdict"].refresh_from_db()
    assert record["escalations/verdict"].decision == VerdictDecision.APPROVE


def test_the_admin_role_cannot_change_a_finished_runs_status_in_the_admin(client, admin):
    run = finished_run()
    before = row(run)
    client.force_login(admin)
    data = {**forged(run), "status": RunStatus.CANCELLED, "final_answer": ""}
    response = client.post(f"/admin/runs/run/{run.pk}/change/", data)
    assert response.status_code == 403
    assert row(run) == before
