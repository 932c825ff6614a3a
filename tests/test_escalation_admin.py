"""Resolving escalations in the Django admin goes through the same service as everything else."""

import pytest

from demo.setup import demo_policy_version
from escalations.models import Escalation, EscalationStatus
from policies.services import policy_version_create
from runs.models import DemoSideEffect, RunStatus
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", password="pw")


def test_approving_in_the_admin_resumes_the_run(client, superuser):
    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get()
    client.force_login(superuser)
    response = client.post(
        "/admin/escalations/escalation/",
        {"action": "approve", "_selected_action": [escalation.pk]},
        follow=True,
    )
    assert response.status_code == 200
    escalation.refresh_from_db()
    assert escalation.status == EscalationStatus.APPROVED
    run = drive(run)
    assert run.status == RunStatus.SUCCEEDED
    assert DemoSideEffect.objects.count() == 1


def test_rejecting_in_the_admin_asks_for_a_reason_first(client, superuser):
    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get()
    client.force_login(superuser)
    url = "/admin/escalations/escalation/"
    ask = client.post(url, {"action": "reject", "_selected_action": [escalation.pk]})
    assert ask.status_code == 200
    assert b"The actor is told this reason" in ask.content
    assert Escalation.objects.get(pk=escalation.pk).status == EscalationStatus.OPEN
    client.post(
        url,
        {"action": "reject", "_selected_action": [escalation.pk], "reason": "Insured parcel."},
    )
    escalation.refresh_from_db()
    assert escalation.status == EscalationStatus.REJECTED
    assert escalation.verdict.reason == "Insured parcel."


def test_a_run_and_its_decisions_are_visible_in_the_admin(client, superuser):
    run = drive(start("drifting_agent"))
    client.force_login(superuser)
    assert client.get(f"/admin/runs/run/{run.pk}/change/").status_code == 200
    listing = client.get("/admin/runs/decision/").content.decode()
    assert "replan" in listing


def test_approving_in_the_admin_under_a_quorum_says_it_waits_for_a_second_approver(
    client, superuser
):
    base = demo_policy_version()
    policy_version_create(
        thresholds=base.thresholds,
        question_set=base.question_set,
        question_set_version=base.question_set_version,
        quorum={"tools": ["issue_refund"]},
        activate=True,
    )
    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get()
    client.force_login(superuser)
    response = client.post(
        "/admin/escalations/escalation/",
        {"action": "approve", "_selected_action": [escalation.pk]},
        follow=True,
    )
    assert "approval recorded; it needs a second, different approver" in response.content.decode()
    escalation.refresh_from_db()
    assert escalation.status == EscalationStatus.OPEN
    assert DemoSideEffect.objects.count() == 0
