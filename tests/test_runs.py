"""Driving runs turn by turn through the services (in this process; tests/test_worker_runs.py
does it with real worker processes)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from escalations.errors import EscalationError
from escalations.models import EscalationKind, EscalationStatus, LabelledExample
from escalations.verdicts import escalation_resolve
from guardian_core.engine.conditions import RiskClass
from guardian_core.engine.tools import Tool, idempotency_key
from runs.models import DemoSideEffect, Run, RunStatus, ToolCall, ToolCallStatus, Turn
from runs.reporting import expectation_problems
from runs.services import RunError, run_advance, run_cancel, run_start
from runs.sweeps import run_sweep_stalled
from tests.runs_helpers import drive, scripted_names, scripted_scenario, start, watch_the_actor

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("name", scripted_names())
def test_each_scripted_scenario_ends_where_it_should(name, settings):
    settings.GUARDIAN_DEADLINE_SECONDS = 0.3  # the timeout scenario waits out one deadline
    run = drive(start(name))
    assert expectation_problems(run, scripted_scenario(name)["expect"]) == []


def test_every_turn_index_appears_once_and_in_order():
    run = drive(start("drifting_agent"))
    assert list(run.turns.values_list("index", flat=True)) == [0, 1, 2, 3, 4]


def test_a_duplicate_message_for_a_claimed_run_is_dropped():
    run = start("goal_reached")
    Run.objects.filter(pk=run.pk).update(
        lease_token="other", lease_expires_at=timezone.now() + timedelta(minutes=5)
    )
    assert run_advance(run_id=run.pk) == "skipped"
    assert not Turn.objects.filter(run=run).exists()


def test_a_message_for_a_finished_run_is_dropped():
    run = drive(start("goal_reached"))
    turns = run.turns.count()
    assert run_advance(run_id=run.pk) == "skipped"
    assert run.turns.count() == turns


def test_a_run_cannot_start_with_unknown_tools_or_no_goal():
    start("goal_reached")  # makes a policy version active
    with pytest.raises(RunError) as error:
        run_start(
            goal=" ", tools=["read_order", "launch_rocket"], actor="scripted", guardian="scripted"
        )
    assert "goal: must not be empty" in str(error.value)
    assert "unknown tools: launch_rocket" in str(error.value)


def test_the_run_pins_the_active_policy_version():
    run = start("goal_reached")
    assert run.policy_version.is_active


def _approve(run, user, **kwargs):
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    return escalation_resolve(escalation_id=escalation.pk, reviewer=user, **kwargs)


def test_approving_a_held_refund_runs_it_once_and_the_run_finishes(reviewer):
    run = drive(start("refund_waits_for_approval"))
    assert DemoSideEffect.objects.count() == 0  # held: nothing ran before the verdict
    _approve(run, reviewer, decision="approve")
    run = drive(run)
    assert run.status == RunStatus.SUCCEEDED
    assert list(DemoSideEffect.objects.values_list("tool", flat=True)) == ["issue_refund"]
    assert run.final_answer == "Refund of 49.90 issued for ord_4472."


def test_rejecting_a_held_refund_tells_the_actor_why_and_nothing_runs(reviewer, monkeypatch):
    run = drive(start("refund_waits_for_approval"))
    _approve(run, reviewer, decision="reject", reason="The parcel was insured; no refund.")
    seen = watch_the_actor(monkeypatch)
    run_advance(run_id=run.pk)
    _, feedback = seen[0]
    assert [(item.call.tool, item.message) for item in feedback] == [
        ("issue_refund", "Rejected by a reviewer: The parcel was insured; no refund.")
    ]
    next_turn = run.turns.order_by("-index").first()
    assert next_turn.proposal["message"] == "Understood: I will not issue that refund."
    assert DemoSideEffect.objects.count() == 0
    held_turn = run.turns.get(index=1)
    assert held_turn.tool_calls.get().status == ToolCallStatus.HELD


def test_a_rejection_without_a_reason_is_refused_and_nothing_changes(reviewer):
    run = drive(start("refund_waits_for_approval"))
    with pytest.raises(EscalationError, match="reason: a rejection needs a reason"):
        _approve(run, reviewer, decision="reject")
    assert run.escalations.get().status == EscalationStatus.OPEN


def test_someone_without_the_reviewer_role_cannot_resolve(auditor):
    run = drive(start("refund_waits_for_approval"))
    with pytest.raises(EscalationError, match="may not review"):
        _approve(run, auditor, decision="approve")


def test_a_verdict_becomes_a_labelled_example_with_the_versions_in_force(reviewer):
    run = drive(start("refund_waits_for_approval"))
    verdict = _approve(run, reviewer, decision="approve")
    example = LabelledExample.objects.get()
    assert example.verdict == verdict
    assert (example.condition, example.label, example.source) == ("risk", "irreversible", "human")
    assert example.probability == pytest.approx(0.98)
    assert example.labelled_by == reviewer
    assert example.model_version == "scripted-1"
    # The questions the guardian actually asked: the scripted one has its own fixed set.
    assert example.question_set_version == "scripted-1"
    assert example.question_set_version == run.turns.get(index=1).decision.question_set_version
    assert example.projection["pending_proposal"]["tool"] == "issue_refund"


def test_a_person_answering_an_uncertain_turn_lets_the_policy_decide(reviewer, settings):
    settings.GUARDIAN_DEADLINE_SECONDS = 0.3
    run = drive(start("guardian_timeout"))
    answer = {
        "integrity": False,
        "infeasible": False,
        "goal_reached": False,
        "drift": 4,
        "stagnation": False,
    }
    verdict = _approve(run, reviewer, decision="answer", answer=answer)
    assert verdict.resulting_outcome == "continue"
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    assert LabelledExample.objects.filter(verdict=verdict).count() == 5


def test_a_confirmed_injection_keeps_the_output_withheld_and_the_run_goes_on(reviewer):
    run = drive(start("injected_instruction"))
    _approve(run, reviewer, decision="answer", answer={"integrity": True})
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    run_advance(run_id=run.pk)
    last = run.turns.order_by("-index").first()
    assert "IGNORE ALL PREVIOUS INSTRUCTIONS" not in str(last.projection)


def test_cancelling_stops_the_run_before_its_next_turn_and_closes_its_escalation(reviewer):
    run = drive(start("refund_waits_for_approval"))
    assert run_cancel(run_id=run.pk)
    run.refresh_from_db()
    assert run.status == RunStatus.CANCELLED
    assert run.escalations.get().status == EscalationStatus.CANCELLED
    assert run_advance(run_id=run.pk) == "skipped"


def _refund_key(run, index, position=0):
    return idempotency_key(
        run_id=str(run.pk),
        turn_index=index,
        position=position,
        tool="issue_refund",
        arguments={"order_id": "ord_4472", "amount": 49.9},
    )


def _approved_refund_run_that_crashed(reviewer, call_status, result=None):
    """The refund run, approved, with turn 2 on record as a worker left it: the turn began
    and the refund call is recorded with `call_status`, and nothing after that."""
    run = drive(start("refund_waits_for_approval"))
    _approve(run, reviewer, decision="approve")
    turn = Turn.objects.create(
        run=run,
        index=2,
        state_hash="",
        started_at=timezone.now(),
        proposal=run.turns.get(index=1).proposal,
    )
    ToolCall.objects.create(
        turn=turn,
        position=0,
        tool="issue_refund",
        arguments={"order_id": "ord_4472", "amount": 49.9},
        risk_class="irreversible",
        status=call_status,
        result=result,
        idempotency_key=_refund_key(run, 2),
        started_at=timezone.now(),
    )
    return run


def test_an_irreversible_call_found_started_after_a_crash_is_never_retried(reviewer):
    run = drive(_approved_refund_run_that_crashed(reviewer, ToolCallStatus.STARTED))
    assert DemoSideEffect.objects.count() == 0
    assert run.status == RunStatus.WAITING
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    assert escalation.kind == EscalationKind.AMBIGUOUS_CALL
    assert "did it go through" in escalation.summary + str(escalation.reason)
    # The call stays on record as ambiguous: that is what the reviewer is asked about.
    assert ToolCall.objects.get(idempotency_key=_refund_key(run, 2)).status == "ambiguous"
    assert escalation.reason["ambiguous_calls"] == [0]


def test_a_call_already_done_returns_its_stored_result_instead_of_running_again(reviewer):
    stored = "Refund of 49.90 issued for ord_4472."
    run = drive(_approved_refund_run_that_crashed(reviewer, ToolCallStatus.DONE, stored))
    assert run.status == RunStatus.SUCCEEDED
    assert DemoSideEffect.objects.count() == 0  # the stored result stood in for the call


def test_a_read_only_call_found_started_after_a_crash_runs_again_with_the_same_key():
    run = start("goal_reached")
    proposal = {
        "calls": [
            {
                "tool": "read_order",
                "arguments": {"order_id": "ord_1001"},
                "intent": "",
                "call_id": "",
            }
        ],
        "message": "",
        "tokens": 120,
        "cost": 0,
    }
    turn = Turn.objects.create(
        run=run, index=0, state_hash="", started_at=timezone.now(), proposal=proposal
    )
    key = idempotency_key(
        run_id=str(run.pk),
        turn_index=0,
        position=0,
        tool="read_order",
        arguments={"order_id": "ord_1001"},
    )
    ToolCall.objects.create(
        turn=turn,
        position=0,
        tool="read_order",
        arguments={"order_id": "ord_1001"},
        risk_class="read_only",
        status=ToolCallStatus.STARTED,
        idempotency_key=key,
        started_at=timezone.now(),
    )
    run = drive(run)
    assert run.status == RunStatus.SUCCEEDED
    call = ToolCall.objects.get(idempotency_key=key)
    assert call.status == ToolCallStatus.DONE
    assert "ord_1001" in call.result


def test_a_run_that_keeps_failing_to_advance_stops_with_its_error_kept(settings):
    settings.GUARDIAN_MAX_ADVANCE_FAILURES = 2
    run = start("goal_reached")
    Run.objects.filter(pk=run.pk).update(guardian="no-such-guardian")
    assert run_advance(run_id=run.pk) == "failed"
    run.refresh_from_db()
    assert (run.status, run.failures) == (RunStatus.RUNNING, 1)
    assert "no-such-guardian" in run.last_error
    assert run_advance(run_id=run.pk) == "failed"
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == (RunStatus.FAILED, "advance_failed")
    assert not run.turns.exists()


def test_the_sweeper_enqueues_runs_whose_worker_died():
    run = start("goal_reached")
    Run.objects.filter(pk=run.pk).update(
        lease_token="dead", lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert run_sweep_stalled() == [run.pk]
    assert run_advance(run_id=run.pk) == "continued"  # the expired lease is claimable


def test_an_expired_escalation_resolves_to_the_safe_side():
    run = drive(start("refund_waits_for_approval"))
    run.escalations.update(deadline=timezone.now() - timedelta(minutes=1))
    run_sweep_stalled()
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == (RunStatus.FAILED, "escalation_expired")
    assert run.escalations.get().status == EscalationStatus.EXPIRED
    assert DemoSideEffect.objects.count() == 0


def test_a_reviewer_can_accept_the_coders_last_code_at_the_round_cap(reviewer):
    run = drive(start("coder_reviewer_round_cap"))
    escalation = run.escalations.get()
    assert escalation.reason["last_reasons"] == [
        "Runs of dashes are not collapsed.",
        "Leading and trailing dashes remain.",
    ]
    _approve(run, reviewer, decision="approve")
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == (RunStatus.SUCCEEDED, "approved_by_reviewer")
    assert run.final_answer.startswith("import re")


def test_rejecting_the_coder_reviewer_loop_stops_the_run(reviewer):
    run = drive(start("coder_reviewer_round_cap"))
    _approve(run, reviewer, decision="reject", reason="Neither version handles unicode.")
    run.refresh_from_db()
    assert (run.status, run.stop_reason, run.final_answer) == (
        RunStatus.FAILED,
        "rejected_by_reviewer",
        None,
    )


def _out_of_stock(arguments: dict, *, idempotency_key: str) -> str:
    raise RuntimeError("the warehouse system is down")


OUT_OF_STOCK = Tool(
    name="check_stock",
    description="Check the stock of a part.",
    schema={"type": "object", "properties": {"part": {"type": "string"}}, "required": ["part"]},
    risk_class=RiskClass.READ_ONLY,
    func=_out_of_stock,
)


def test_a_tool_that_raises_is_recorded_failed_with_its_error_and_the_turn_escalates(settings):
    settings.GUARDIAN_TOOLS = [*settings.GUARDIAN_TOOLS, "tests.test_runs.OUT_OF_STOCK"]
    scenario = {
        "name": "stock",
        "goal": "Check the stock of part 7731.",
        "tools": ["check_stock"],
        "actor": {"turns": [{"calls": [{"tool": "check_stock", "arguments": {"part": "7731"}}]}]},
    }
    run = drive(start("goal_reached", scenario=scenario))
    call = ToolCall.objects.get(turn__run=run)
    assert call.status == ToolCallStatus.FAILED
    assert call.error == "RuntimeError: the warehouse system is down"
    assert run.status == RunStatus.WAITING
    assert [r["source"] for r in run.turns.get().decision.reasons if r["band"] == "fired"] == [
        "tool_error"
    ]
