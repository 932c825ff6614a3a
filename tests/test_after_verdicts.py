"""What a run does after a person's verdict: the verdict enters the loop's state and history,
a rejected step never counts as done, and withheld outputs come back once a person clears them.
Every scenario that escalates is followed past its rejection."""

import pytest

from escalations.errors import EscalationError
from escalations.models import EscalationStatus, LabelledExample
from escalations.verdicts import escalation_resolve
from runs.mapping import turn_state
from runs.models import DemoSideEffect, RunStatus, ToolCall, ToolCallStatus
from runs.services import run_advance
from tests.runs_helpers import drive, start, watch_the_actor

pytestmark = pytest.mark.django_db


def _resolve(run, user, **kwargs):
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    return escalation_resolve(escalation_id=escalation.pk, reviewer=user, **kwargs)


def _state(turn) -> dict:
    """The state after `turn`, rebuilt from the recorded steps (and its hash checked)."""
    return turn_state(turn).to_dict()


def _summaries(turn) -> list[str]:
    return [item["summary"] for item in _state(turn)["history"]]


def test_a_rejected_refund_ends_failed_with_no_answer_and_no_refund(reviewer):
    run = drive(start("refund_waits_for_approval"))
    _resolve(run, reviewer, decision="reject", reason="Insured parcel")
    run = drive(run)
    assert (run.status, run.stop_reason, run.final_answer) == (
        RunStatus.FAILED,
        "infeasible",
        None,
    )
    assert DemoSideEffect.objects.count() == 0


def test_the_rejection_is_written_into_the_state_and_history_the_next_turn_sees(reviewer):
    run = drive(start("refund_waits_for_approval"))
    _resolve(run, reviewer, decision="reject", reason="Insured parcel")
    run_advance(run_id=run.pk)
    next_turn = run.turns.get(index=2)
    assert "turn 1: issue_refund rejected by reviewer: Insured parcel" in _summaries(next_turn)
    # The guardian saw it too: its projection is built from that state.
    assert "issue_refund rejected by reviewer" in str(next_turn.projection["history"])


def test_an_approval_is_written_into_the_history_before_the_step_runs(reviewer):
    run = drive(start("refund_waits_for_approval"))
    _resolve(run, reviewer, decision="approve")
    run = drive(run)
    summaries = _summaries(run.turns.get(index=2))
    approved = summaries.index("turn 1: issue_refund approved by reviewer")
    assert summaries[approved + 1] == "turn 2: issue_refund done"


def test_a_rejected_refund_never_succeeds_under_the_local_guardian(reviewer):
    """The outside check: the local guardian took the actor's "Refund of 49.90 issued" as
    evidence and ended the run "succeeded / goal_reached" with no refund."""
    run = drive(start("refund_waits_for_approval", guardian="local"))
    assert run.status == RunStatus.WAITING
    _resolve(run, reviewer, decision="reject", reason="Insured parcel")
    run = drive(run)
    while run.status == RunStatus.WAITING:  # an uncertain call is not a success either
        escalation = run.escalations.get(status=EscalationStatus.OPEN)
        assert escalation.kind != "gated_step"  # the actor never proposed the refund again
        _resolve(run, reviewer, decision="reject", reason="Still no refund")
        run = drive(run)
    assert run.status == RunStatus.FAILED
    assert run.stop_reason != "goal_reached"
    assert run.final_answer is None
    assert DemoSideEffect.objects.count() == 0


@pytest.mark.parametrize("name", ["guardian_timeout", "injected_instruction"])
def test_rejecting_an_uncertain_or_suspect_turn_stops_the_run_with_no_answer(
    name, reviewer, settings
):
    settings.GUARDIAN_DEADLINE_SECONDS = 0.3
    run = drive(start(name))
    turns = run.turns.count()
    _resolve(run, reviewer, decision="reject", reason="Not safe to go on")
    run.refresh_from_db()
    assert (run.status, run.stop_reason, run.final_answer) == (
        RunStatus.FAILED,
        "rejected_by_reviewer",
        None,
    )
    assert run_advance(run_id=run.pk) == "skipped"
    assert run.turns.count() == turns
    assert DemoSideEffect.objects.count() == 0


def test_a_withheld_output_is_released_once_a_person_says_it_holds_no_injection(
    reviewer, settings, monkeypatch
):
    """The outside check: after a guardian timeout the read_order output stayed withheld
    even after the reviewer answered "no injection"; the actor never saw it."""
    settings.GUARDIAN_DEADLINE_SECONDS = 0.3
    run = drive(start("guardian_timeout"))
    held = run.turns.get(index=0)
    assert _state(held)["last_results"] == ["[output of read_order withheld: integrity check]"]
    answer = {
        "integrity": False,
        "infeasible": False,
        "goal_reached": False,
        "drift": 4,
        "stagnation": False,
    }
    _resolve(run, reviewer, decision="answer", answer=answer)
    seen = _record_what_the_actor_sees(monkeypatch)
    run_advance(run_id=run.pk)
    verbatim = held.tool_calls.get().result
    assert "ord_1001" in verbatim
    assert seen[0]["last_results"] == [verbatim]
    assert seen[0]["history"][-1]["summary"].startswith(
        "turn 0: guardian's question (drift=4, goal_reached=no, infeasible=no, integrity=no"
    )


def _record_what_the_actor_sees(monkeypatch) -> list[dict]:
    """The projections the run's actor is given from now on."""
    return _Projections(watch_the_actor(monkeypatch))


class _Projections:
    def __init__(self, seen) -> None:
        self.seen = seen

    def __getitem__(self, index: int) -> dict:
        return self.seen[index][0]


def test_a_confirmed_injection_stays_withheld_after_the_verdict(reviewer, monkeypatch):
    run = drive(start("injected_instruction"))
    _resolve(run, reviewer, decision="answer", answer={"integrity": True})
    seen = _record_what_the_actor_sees(monkeypatch)
    run_advance(run_id=run.pk)
    assert "IGNORE ALL PREVIOUS INSTRUCTIONS" not in str(seen[0])
    assert "integrity=yes" in str(seen[0]["history"])


@pytest.mark.parametrize(
    ("name", "answer", "final_answer"),
    [
        (
            "injected_instruction",
            {"integrity": True},
            "Opened items can be returned within 30 days for store credit.",
        ),
        (
            "guardian_timeout",
            {
                "integrity": False,
                "infeasible": False,
                "goal_reached": False,
                "drift": 4,
                "stagnation": False,
            },
            "Order ord_1001 ships on Tuesday.",
        ),
    ],
)
def test_after_a_persons_answer_the_demo_run_goes_on_to_its_answer(
    reviewer, name, answer, final_answer
):
    """The demo's question escalations lead somewhere once answered: the run continues and the
    guardian finds the goal reached, instead of idling to its turn cap."""
    run = drive(start(name))
    _resolve(run, reviewer, decision="answer", answer=answer)
    run = drive(run)
    assert (run.status, run.stop_reason, run.final_answer) == (
        RunStatus.SUCCEEDED,
        "goal_reached",
        final_answer,
    )


# ---- an ambiguous call: started before a crash, never recorded as finished ---------------


def _ambiguous_refund_run(reviewer):
    from tests.test_runs import _approved_refund_run_that_crashed

    run = drive(_approved_refund_run_that_crashed(reviewer, "started"))
    assert run.escalations.get(status=EscalationStatus.OPEN).kind == "ambiguous_call"
    return run


def test_it_went_through_records_the_call_done_with_the_note_and_never_reruns_it(reviewer):
    run = _ambiguous_refund_run(reviewer)
    _resolve(run, reviewer, decision="approve", reason="Seen in the payment console")
    call = ToolCall.objects.get(turn__run=run, turn__index=2, position=0)
    assert call.status == ToolCallStatus.DONE
    assert call.result == "Confirmed done by reviewer: Seen in the payment console."
    run = drive(run)
    assert DemoSideEffect.objects.count() == 0
    assert "turn 2: issue_refund confirmed done by reviewer" in str(_state(run.turns.last()))


def test_it_did_not_go_through_stops_the_run_and_runs_nothing_unless_asked(reviewer):
    run = _ambiguous_refund_run(reviewer)
    _resolve(run, reviewer, decision="reject", reason="No trace of it")
    run = drive(run)
    assert (run.status, run.stop_reason) == (RunStatus.FAILED, "ambiguous_call_not_done")
    call = ToolCall.objects.get(turn__run=run, turn__index=2, position=0)
    assert call.status == ToolCallStatus.FAILED
    assert "Did not go through, said by reviewer: No trace of it" in call.error
    assert DemoSideEffect.objects.count() == 0


def test_a_rerun_asked_for_explicitly_runs_the_call_once_with_its_first_key(reviewer):
    run = _ambiguous_refund_run(reviewer)
    first_key = ToolCall.objects.get(turn__run=run, turn__index=2).idempotency_key
    _resolve(run, reviewer, decision="reject", reason="No trace of it", rerun=True)
    run = drive(run)
    effects = list(DemoSideEffect.objects.values_list("tool", "idempotency_key"))
    assert effects == [("issue_refund", first_key)]
    assert ToolCall.objects.get(idempotency_key=first_key).status == ToolCallStatus.DONE
    assert run.status == RunStatus.SUCCEEDED


def test_a_rerun_is_refused_for_anything_but_an_ambiguous_call(reviewer):
    run = drive(start("refund_waits_for_approval"))
    with pytest.raises(EscalationError, match="rerun: only an ambiguous call"):
        _resolve(run, reviewer, decision="reject", reason="no", rerun=True)


# ---- labelled examples hold exactly what the guardian judged ------------------------------


def test_an_integrity_example_holds_the_output_the_guardian_judged_not_the_withheld_mark(
    reviewer,
):
    run = drive(start("injected_instruction"))
    verbatim = ToolCall.objects.get(turn__run=run).result
    _resolve(run, reviewer, decision="answer", answer={"integrity": True})
    example = LabelledExample.objects.get(condition="integrity")
    assert example.label is True
    assert example.projection["last_results"] == [verbatim]
    assert "withheld" not in str(example.projection)


def test_a_risk_example_holds_the_projection_the_risk_check_saw(reviewer):
    run = drive(start("refund_waits_for_approval"))
    _resolve(run, reviewer, decision="approve")
    example = LabelledExample.objects.get(condition="risk")
    held = run.turns.get(index=1)
    assert example.projection == held.risk_projections[0]
    assert example.projection["pending_proposal"]["tool"] == "issue_refund"
    # Asked before the step: the turn's own "held" item was not there yet.
    assert "held" not in str(example.projection["history"])


# ---- malformed actor output is an invalid proposal, never a crash -------------------------


class _ActorSendingNonText:
    """An LLM actor whose output holds a NUL and an unpaired surrogate (models do emit them)."""

    def propose(self, projection, feedback):
        from guardian_core.engine.loop import Proposal, ProposedCall

        return Proposal(
            calls=(
                ProposedCall("read_order", {"order_id": "ord_\x001001"}, "look\x00"),
                ProposedCall("read_order", {"order_id": "ord_1001\ud800"}, "look"),
            ),
            message="Checking\ud800 now",
        )


def test_a_nul_or_a_lone_surrogate_from_the_actor_is_an_invalid_call_not_a_crash(monkeypatch):
    import runs.turns

    run = start("goal_reached")
    monkeypatch.setattr(runs.turns, "build_actor", lambda *a, **k: _ActorSendingNonText())
    assert run_advance(run_id=run.pk) == "continued"
    run.refresh_from_db()
    assert (run.status, run.failures) == (RunStatus.RUNNING, 0)
    turn = run.turns.get(index=0)
    nul, surrogate = turn.tool_calls.order_by("position")
    assert (nul.status, surrogate.status) == (ToolCallStatus.INVALID, ToolCallStatus.INVALID)
    assert "holds a NUL character" in nul.error
    assert "lone surrogate" in surrogate.error
    assert DemoSideEffect.objects.count() == 0
    assert turn.proposal["message"] == "Checking\ufffd now"
    # The actor hears about it like any other invalid call.
    assert "order_id" in turn.feedback[0]["message"]
    assert "NUL character" in turn.feedback[0]["message"]
    # A retried turn decodes the stored arguments back to the same (invalid) value.
    from guardian_core.engine.tools import validate_call
    from runs import mapping
    from runs.tools import tools_for_run

    stored = mapping.proposal_from_json(turn.proposal).calls[0]
    assert not validate_call(tools_for_run(["read_order"]), "read_order", stored.arguments).ok
