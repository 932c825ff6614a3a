"""A mutation check of the gate: with the gate disabled, the named invariants must fail — by
name, not through an unrelated error such as a scripted fake running out.

The article behind this: a mutation test went red with "script exhausted" while the assertion
that mattered ("an irreversible function ran without confirmation") was never reached.
"""

import pytest

from guardian_core.engine import loop
from guardian_core.engine.gate import GateDecision
from guardian_core.engine.state import LoopState
from guardian_core.engine.thresholds import default_policy
from tests.engine.fakes import (
    CALM,
    FakeClock,
    Ledger,
    ScriptedActor,
    ScriptedGuardian,
    call,
    desk,
    step,
)

IRREVERSIBLE_RAN = "irreversible call ran without approval"
STEP_RAN = "a call ran in a step that needed approval"
NOT_ESCALATED = "the held step did not escalate"


def gate_violations() -> list[str]:
    """Run the "return both orders" step (two refunds and a read) and name what went wrong."""
    ledger = Ledger()
    actor = ScriptedActor(
        [
            step(
                call("read_order", order_id="ord_4472"),
                call("issue_refund", order_id="ord_4472", amount=49.9),
                call("issue_refund", order_id="ord_9999", amount=12.0),
            ),
            step(message="done"),  # a terminating step: the script never runs out
        ]
    )
    guardian = ScriptedGuardian([CALM, CALM])  # enough answers whether or not the step is held
    record = loop.run_turn(
        LoopState(goal="Return both of these orders"),
        run_id="mutation",
        index=0,
        actor=actor,
        guardian=guardian,
        tools=desk(ledger),
        clock=FakeClock(),
        policy=default_policy(),
    )
    violations = []
    if ledger.ran("issue_refund"):
        violations.append(IRREVERSIBLE_RAN)
    if ledger.entries:
        violations.append(STEP_RAN)
    if record.decision.outcome != "escalate":
        violations.append(NOT_ESCALATED)
    return violations


def _disabled_gate(calls, risk_answers, threshold, *, approved=None):
    return GateDecision(held=False, calls=(), runnable=tuple(c.position for c in calls))


def test_the_gate_holds_a_step_with_irreversible_calls():
    assert gate_violations() == []


def test_disabling_the_gate_fails_the_named_assertions(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(loop, "gate_step", _disabled_gate)
    assert gate_violations() == [IRREVERSIBLE_RAN, STEP_RAN, NOT_ESCALATED]
