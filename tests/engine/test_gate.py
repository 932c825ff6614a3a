"""The whole-step gate: nothing in a step runs while any call in it needs a person."""

import pytest

from guardian_core.engine.conditions import Malformed, RiskClass
from guardian_core.engine.gate import StepCall, gate_step
from guardian_core.engine.thresholds import default_policy

RISK = default_policy().thresholds["risk"]  # t* = 0.1, δ = 0.05
SAFE = {"read_only": 0.97, "reversible_write": 0.03, "irreversible": 0.0, "regulated": 0.0}
SURELY_IRREVERSIBLE = {
    "read_only": 0.0,
    "reversible_write": 0.02,
    "irreversible": 0.98,
    "regulated": 0.0,
}
BORDERLINE = {"read_only": 0.8, "reversible_write": 0.09, "irreversible": 0.11, "regulated": 0.0}


def read(position=0, tool="read_order"):
    return StepCall(position, tool, RiskClass.READ_ONLY)


def refund(position=0, tool="issue_refund"):
    return StepCall(position, tool, RiskClass.IRREVERSIBLE)


def test_a_safe_step_runs_every_call():
    decision = gate_step([read(0), read(1, "lookup_policy")], [SAFE, SAFE], RISK)
    assert not decision.held
    assert decision.runnable == (0, 1)


def test_two_irreversible_calls_in_one_step_are_held_together_and_both_listed():
    # The article's bug: a per-call gate showed ord_4472 and silently queued ord_9999.
    decision = gate_step([refund(0), refund(1)], [SAFE, SAFE], RISK)
    assert decision.held
    assert decision.runnable == ()
    assert [c.position for c in decision.calls if c.needs_approval] == [0, 1]
    assert len(decision.reasons()) == 2


def test_one_irreversible_call_holds_the_safe_calls_of_the_same_step_too():
    decision = gate_step([read(0), refund(1)], [SAFE, SAFE], RISK)
    assert decision.held
    assert decision.runnable == ()


def test_the_declared_class_is_a_floor_the_guardian_cannot_lower():
    call = gate_step([refund(0)], [SAFE], RISK).calls[0]
    assert call.assessed == RiskClass.READ_ONLY
    assert call.effective == RiskClass.IRREVERSIBLE
    assert call.needs_approval


def test_the_guardian_can_raise_a_declared_read_only_call():
    call = gate_step([read(0, "send_email")], [SURELY_IRREVERSIBLE], RISK).calls[0]
    assert call.effective == RiskClass.IRREVERSIBLE
    assert call.needs_approval


def test_a_probability_above_t_star_holds_even_when_read_only_is_most_likely():
    high = {"read_only": 0.75, "reversible_write": 0.0, "irreversible": 0.25, "regulated": 0.0}
    call = gate_step([read(0)], [high], RISK).calls[0]
    assert call.assessed == RiskClass.READ_ONLY
    assert call.needs_approval


def test_a_risk_answer_in_the_uncertain_band_holds_the_step():
    decision = gate_step([read(0)], [BORDERLINE], RISK)
    assert decision.held
    assert decision.calls[0].band == "uncertain"


@pytest.mark.parametrize("answer", [None, Malformed("timeout"), {"read_only": 0.5}, 0.3])
def test_a_malformed_or_missing_risk_answer_holds_the_step(answer):
    assert gate_step([read(0)], [answer], RISK).held


def test_a_missing_risk_answer_for_one_call_holds_the_step():
    assert gate_step([read(0), read(1)], [SAFE], RISK).held


def test_after_a_verdict_exactly_the_approved_calls_run():
    decision = gate_step([refund(0), refund(1), read(2)], [SAFE] * 3, RISK, approved={0})
    assert not decision.held
    assert decision.runnable == (0,)


def test_an_approval_of_a_position_outside_the_step_runs_nothing_extra():
    decision = gate_step([refund(0)], [SAFE], RISK, approved=frozenset({0, 5}))
    assert decision.runnable == (0,)


def test_a_held_calls_reason_carries_the_risk_threshold_so_its_bar_can_mark_t_star():
    # Issue 22: the queue's "p 0.98" bar of a held call drew no t* (the reason carried none).
    decision = gate_step([refund(0)], [SURELY_IRREVERSIBLE], RISK)
    (reason,) = decision.reasons()
    assert reason.value == pytest.approx(0.98)
    assert reason.t_star == pytest.approx(RISK.t_star)
    assert reason.delta == pytest.approx(RISK.delta)
