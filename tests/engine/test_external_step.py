"""A step run by the caller's own loop (prepare_step, the caller runs the calls, finish_step)
is the turn the guarded loop would have run itself: same gate, same decision, same state and
hashes, same record — so an external run's log replays like any other."""

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from guardian_core.engine.loop import finish_step, prepare_step, run_turn
from guardian_core.engine.policy import POST_EXECUTION_CONDITIONS
from guardian_core.engine.state import LoopState
from guardian_core.engine.thresholds import default_policy
from tests.engine.fakes import (
    SAFE,
    FakeClock,
    Ledger,
    ScriptedActor,
    ScriptedGuardian,
    call,
    desk,
    step,
)
from tests.engine.strategies import answers, risk_distributions

GOAL = LoopState(goal="Refund order ord_4472", acceptance_criteria=("Refund issued",))
POLICY = default_policy()
CALLS = {
    "read": call("read_order", order_id="ord_4472"),
    "refund": call("issue_refund", order_id="ord_4472", amount=49.9),
    "invalid": call("issue_refund", order_id="ord_4472"),  # no amount
    "unknown": call("wire_money", to="x"),
}


class StillClock(FakeClock):
    """Time stands still, so both ways of running a step read the same clock (the caller's
    own loop takes the time it takes; it is timed, not part of what is compared)."""

    def monotonic(self) -> float:
        return 0.0


def _run_by_the_caller(state, proposal, guardian, tools, approved=None):
    """What an external loop does: ask before, run what Guardian allows, report after."""
    clock = StillClock()
    prepared = prepare_step(
        state,
        run_id="run-1",
        index=0,
        guardian=guardian,
        tools=tools,
        clock=clock,
        policy=POLICY,
        proposal=proposal,
        approved=approved,
    )
    statuses = dict(prepared.statuses)
    results = {}
    for position in prepared.runnable:
        check = prepared.checked[position]
        tool = tools[proposal.calls[position].tool]
        results[position] = (
            tool.func(check.arguments, idempotency_key=prepared.keys[position]),
            None,
        )
        statuses[position] = "done"
    return finish_step(
        prepared,
        results=results,
        statuses=statuses,
        errors=[],
        guardian=guardian,
        tools=tools,
        clock=clock,
        policy=POLICY,
    )


@settings(max_examples=150, deadline=None)
@given(
    names=st.lists(st.sampled_from(sorted(CALLS)), min_size=0, max_size=3),
    raw=answers(conditions=POST_EXECUTION_CONDITIONS),
    refund_risk=st.one_of(st.just(SAFE), risk_distributions),
    approve=st.booleans(),
)
def test_a_step_run_by_the_caller_is_the_turn_the_loop_would_have_run(
    names, raw, refund_risk, approve
):
    proposal = step(*(CALLS[name] for name in names), message="Looking at it.")
    approved = frozenset(range(len(names))) if approve else None
    ours, theirs = Ledger(), Ledger()

    in_loop = run_turn(
        GOAL,
        run_id="run-1",
        index=0,
        actor=ScriptedActor([]),
        guardian=ScriptedGuardian([dict(raw)], risk={"issue_refund": refund_risk}),
        tools=desk(ours),
        clock=StillClock(),
        policy=POLICY,
        proposal=proposal,
        approved=approved,
    )
    by_caller = _run_by_the_caller(
        GOAL,
        proposal,
        ScriptedGuardian([dict(raw)], risk={"issue_refund": refund_risk}),
        desk(theirs),
        approved=approved,
    )

    assert theirs.entries == ours.entries  # the same calls ran, under the same keys
    assert replace(by_caller, timings={}) == replace(in_loop, timings={})
    assert by_caller.state_hash_after == in_loop.state_hash_after
