"""A reviewer's verdict on a guardian failure: the guardian accepted no answer on that turn, so
the run never ends succeeded there. The reviewer continues the run (the guardian is asked
again on its next turn) or ends it, failed or cancelled, with a reason; and no verdict ends a
run succeeded with an empty answer."""

import pytest

from escalations.errors import EscalationError
from escalations.models import EscalationKind, EscalationStatus, Verdict
from escalations.verdicts import escalation_resolve
from runs.audit import run_chain_verify
from runs.models import RunStatus
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db

ALL_NO = {"integrity": False, "infeasible": False, "drift": 4, "stagnation": False}


@pytest.fixture
def failed_guardian(settings):
    settings.GUARDIAN_DEADLINE_SECONDS = 0.3
    run = drive(start("guardian_timeout"))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    assert escalation.kind == EscalationKind.GUARDIAN_FAILURE
    return run, escalation


def test_answering_goal_reached_on_a_guardian_failure_does_not_end_the_run_succeeded(
    failed_guardian, reviewer
):
    run, escalation = failed_guardian
    escalation_resolve(
        escalation_id=escalation.pk,
        reviewer=reviewer,
        decision="answer",
        answer={**ALL_NO, "goal_reached": True},
    )
    run.refresh_from_db()
    # The answers teach; the run goes on, and the guardian is asked again on its next turn.
    assert run.status == RunStatus.RUNNING
    assert run.final_answer is None
    assert Verdict.objects.get(escalation=escalation).resulting_outcome == "continue"


def test_a_reviewer_ends_a_guardian_failure_cancelled_with_a_reason(failed_guardian, reviewer):
    run, escalation = failed_guardian
    escalation_resolve(
        escalation_id=escalation.pk,
        reviewer=reviewer,
        decision="reject",
        reason="The guardian is down; we will start it again tomorrow.",
        end_as="cancelled",
    )
    run.refresh_from_db()
    assert (run.status, run.stop_reason, run.final_answer) == (
        RunStatus.CANCELLED,
        "cancelled_by_reviewer",
        None,
    )
    report = run_chain_verify(run)
    assert report.ok, report.describe()


def test_ending_a_run_names_how_and_needs_a_reason(failed_guardian, reviewer):
    run, escalation = failed_guardian
    with pytest.raises(EscalationError) as refused:
        escalation_resolve(
            escalation_id=escalation.pk, reviewer=reviewer, decision="reject", end_as="succeeded"
        )
    said = str(refused.value)
    assert "end_as: failed or cancelled" in said
    assert "reason:" in said
    escalation_resolve(
        escalation_id=escalation.pk, reviewer=reviewer, decision="reject", reason="Broken."
    )
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == (RunStatus.FAILED, "rejected_by_reviewer")


def test_an_uncertain_goal_with_an_empty_answer_never_ends_succeeded(reviewer):
    scenario = {
        "name": "empty_answer",
        "goal": "Say when order ord_1001 ships.",
        "tools": ["read_order"],
        "actor": {"turns": [{"calls": [], "message": ""}]},
        "guardian": {"turns": [{"goal_reached": 0.82}]},  # in the band
    }
    run = drive(start("goal_reached", scenario=scenario))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    asked = escalation.reason["triggered"][0]["source"]
    with pytest.raises(EscalationError) as refused:
        escalation_resolve(
            escalation_id=escalation.pk,
            reviewer=reviewer,
            decision="answer",
            answer={asked: True},
        )
    assert "the actor gave no answer" in str(refused.value)
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING


def test_the_pane_offers_continue_or_end_and_ends_the_run_as_chosen(
    failed_guardian, client, reviewer
):
    from tests.test_escalation_detail_page import HTMX, decide, opened

    run, escalation = failed_guardian
    page = opened(client, reviewer, escalation).content.decode()
    assert "the run cannot end succeeded here" in page
    assert "Answer and continue the run" in page
    assert 'name="end_as" value="cancelled"' in page
    fragment = client.post(
        decide(escalation), {"decision": "reject", "end_as": "cancelled"}, **HTMX
    ).content.decode()
    assert "a rejection needs a reason" in fragment
    assert 'value="cancelled" checked' in fragment  # the choice is kept
    client.post(
        decide(escalation),
        {"decision": "reject", "end_as": "cancelled", "reason": "The guardian is down."},
        **HTMX,
    )
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == (RunStatus.CANCELLED, "cancelled_by_reviewer")
