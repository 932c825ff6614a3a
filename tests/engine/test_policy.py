"""The threshold policy: one outcome per turn, precedence, hysteresis, caps and fail-closed."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardian_core.engine.conditions import Condition, Malformed
from guardian_core.engine.policy import (
    POST_EXECUTION_CONDITIONS,
    PRECEDENCE,
    Outcome,
    PastTurn,
    Usage,
    decide,
    history_needed,
)
from guardian_core.engine.thresholds import Budgets, Hysteresis, default_policy
from tests.engine.strategies import answers

POLICY = default_policy()
DRIFT_OK = {"0": 0.0, "1": 0.0, "2": 0.1, "3": 0.4, "4": 0.5}
DRIFT_LOST = {"0": 0.6, "1": 0.3, "2": 0.1, "3": 0.0, "4": 0.0}
CALM = {
    "integrity": 0.01,
    "infeasible": 0.05,
    "goal_reached": 0.1,
    "drift": DRIFT_OK,
    "stagnation": 0.1,
}


def calm(**changes):
    return {**CALM, **changes}


def test_a_calm_turn_continues():
    decision = decide(calm(), POLICY)
    assert decision.outcome == Outcome.CONTINUE
    assert {r.source for r in decision.reasons} == {c.value for c in POST_EXECUTION_CONDITIONS}


def test_an_injected_instruction_escalates():
    decision = decide(calm(integrity=0.9), POLICY)
    assert decision.outcome == Outcome.ESCALATE
    assert [r.source for r in decision.triggered] == ["integrity"]


def test_a_reached_goal_stops_with_success():
    decision = decide(calm(goal_reached=0.97), POLICY)
    assert (decision.outcome, decision.stop_reason) == (Outcome.STOP_SUCCESS, "goal_reached")


def test_an_infeasible_goal_stops_with_failure():
    decision = decide(calm(infeasible=0.95), POLICY)
    assert (decision.outcome, decision.stop_reason) == (Outcome.STOP_FAILURE, "infeasible")


def test_goal_reached_and_integrity_together_escalate():
    # The article's conservative reading: a success claimed over an injection is not trusted.
    assert decide(calm(goal_reached=0.99, integrity=0.9), POLICY).outcome == Outcome.ESCALATE


def test_goal_reached_and_infeasible_together_stop_with_failure_not_success():
    decision = decide(calm(goal_reached=0.99, infeasible=0.99), POLICY)
    assert decision.outcome == Outcome.STOP_FAILURE


def test_a_probability_in_the_uncertain_band_escalates():
    decision = decide(calm(goal_reached=0.82), POLICY)  # t* = 0.8, δ = 0.05
    assert decision.outcome == Outcome.ESCALATE
    reason = next(r for r in decision.reasons if r.source == "goal_reached")
    assert (reason.band, reason.t_star, reason.delta) == ("uncertain", 0.8, 0.05)
    assert reason.value == pytest.approx(0.82)


@pytest.mark.parametrize("condition", [c.value for c in POST_EXECUTION_CONDITIONS])
def test_a_missing_answer_escalates_instead_of_continuing(condition):
    answers = {k: v for k, v in CALM.items() if k != condition}
    decision = decide(answers, POLICY)
    assert decision.outcome == Outcome.ESCALATE
    assert next(r for r in decision.reasons if r.source == condition).band == "malformed"


def test_a_guardian_timeout_escalates():
    timeout = Malformed("guardian timed out after 2.0 s")
    decision = decide(calm(stagnation=timeout), POLICY)
    assert decision.outcome == Outcome.ESCALATE
    assert "timed out" in next(r for r in decision.reasons if r.source == "stagnation").detail


def test_drift_once_does_not_replan():
    decision = decide(calm(drift=DRIFT_LOST), POLICY)
    assert decision.outcome == Outcome.CONTINUE
    assert Condition.DRIFT in decision.fired


def test_drift_on_two_of_the_last_three_turns_replans():
    history = [PastTurn(Outcome.CONTINUE, frozenset({Condition.DRIFT})), PastTurn(Outcome.CONTINUE)]
    assert decide(calm(drift=DRIFT_LOST), POLICY, history).outcome == Outcome.REPLAN


def test_drift_that_fired_three_turns_ago_is_outside_the_window():
    history = [PastTurn(Outcome.CONTINUE, frozenset({Condition.DRIFT}))] + [
        PastTurn(Outcome.CONTINUE)
    ] * 2
    assert decide(calm(drift=DRIFT_LOST), POLICY, history).outcome == Outcome.CONTINUE


def test_each_replanning_condition_keeps_its_own_window_and_count():
    # Drift replans at its first fire; stagnation keeps the policy's 2 of 3.
    policy = default_policy(hysteresis={Condition.DRIFT: Hysteresis(window=1, required=1)})
    drift = decide(calm(drift=DRIFT_LOST), policy)
    stagnation = decide(calm(stagnation=0.9), policy)
    assert drift.outcome == Outcome.REPLAN
    assert "fired on 1 of the last 1 turns" in drift.triggered[0].detail
    assert stagnation.outcome == Outcome.CONTINUE
    assert policy.hysteresis_for(Condition.STAGNATION) == Hysteresis(3, 2)


def test_a_longer_window_of_one_condition_is_read_back_far_enough():
    policy = default_policy(hysteresis={Condition.STAGNATION: Hysteresis(window=6, required=3)})
    assert history_needed(policy) == 5
    stagnated = PastTurn(Outcome.CONTINUE, frozenset({Condition.STAGNATION}))
    # Fired 5 and 4 turns ago: inside stagnation's 6, outside the policy's 3.
    history = [stagnated, stagnated] + [PastTurn(Outcome.CONTINUE)] * 3
    assert decide(calm(stagnation=0.9), policy, history).outcome == Outcome.REPLAN
    assert decide(calm(stagnation=0.9), POLICY, history).outcome == Outcome.CONTINUE


def test_a_condition_cannot_need_more_fires_than_its_window():
    with pytest.raises(ValueError, match="required must be between 1 and the window"):
        Hysteresis(window=2, required=3)


def test_stagnation_replans_then_stops_with_failure_after_k_replans():
    stagnated = frozenset({Condition.STAGNATION})
    first = decide(calm(stagnation=0.9), POLICY, [PastTurn(Outcome.CONTINUE, stagnated)])
    assert first.outcome == Outcome.REPLAN
    stuck = PastTurn(Outcome.REPLAN, stagnated)
    after_k = [stuck] * POLICY.max_replans
    final = decide(calm(stagnation=0.9), POLICY, after_k)
    assert (final.outcome, final.stop_reason) == (Outcome.STOP_FAILURE, "stagnation")


def test_the_same_call_three_times_in_a_row_is_caught_as_an_exact_repeat():
    signature = ('search:{"q":"refund policy"}',)
    history = [PastTurn(Outcome.CONTINUE, calls=signature)] * 2
    decision = decide(calm(), POLICY, history, calls=signature)
    assert decision.outcome == Outcome.REPLAN
    assert [r.source for r in decision.triggered] == ["exact_repeat"]


def test_a_different_argument_is_not_a_repeat():
    history = [PastTurn(Outcome.CONTINUE, calls=('search:{"q":"a"}',))] * 2
    assert decide(calm(), POLICY, history, calls=('search:{"q":"b"}',)).outcome == "continue"


def test_the_turn_cap_stops_the_run_with_failure():
    policy = default_policy(budgets=Budgets(max_turns=3))
    decision = decide(calm(), policy, usage=Usage(turns=3))
    assert (decision.outcome, decision.stop_reason) == (Outcome.STOP_FAILURE, "turn_cap")


def test_the_turn_cap_overrides_an_escalation():
    policy = default_policy(budgets=Budgets(max_turns=3))
    decision = decide(calm(integrity=0.9), policy, usage=Usage(turns=3))
    assert (decision.outcome, decision.stop_reason) == (Outcome.STOP_FAILURE, "turn_cap")


@pytest.mark.parametrize(
    ("budgets", "usage", "reason"),
    [
        (Budgets(max_tokens=1000), Usage(turns=1, tokens=1001), "token_budget"),
        (Budgets(max_cost=0.5), Usage(turns=1, cost=0.51), "cost_budget"),
        (Budgets(max_wall_seconds=60), Usage(turns=1, wall_seconds=61), "wall_time_budget"),
    ],
)
def test_a_spent_budget_stops_the_run(budgets, usage, reason):
    decision = decide(calm(), default_policy(budgets=budgets), usage=usage)
    assert (decision.outcome, decision.stop_reason) == (Outcome.STOP_FAILURE, reason)


def test_unknown_answer_keys_are_ignored():
    assert decide(calm(sentiment=0.99), POLICY).outcome == Outcome.CONTINUE


def test_every_reason_is_machine_readable():
    for reason in decide(calm(goal_reached=0.82), POLICY).reasons:
        assert set(reason.as_dict()) == {
            "source",
            "band",
            "outcome",
            "detail",
            "value",
            "t_star",
            "delta",
        }


# ---- properties --------------------------------------------------------------------------

past_turns = st.lists(
    st.builds(
        PastTurn,
        st.sampled_from(list(Outcome)),
        st.frozensets(st.sampled_from(list(Condition))),
        st.sampled_from([(), ("a:{}",), ("b:{}",)]),
    ),
    max_size=5,
)
usages = st.builds(
    Usage,
    turns=st.integers(min_value=1, max_value=40),
    tokens=st.integers(min_value=0, max_value=10_000),
    cost=st.floats(min_value=0, max_value=10, allow_nan=False),
)


@settings(max_examples=300)
@given(answers(), past_turns, usages, st.sampled_from([(), ("a:{}",)]))
def test_decide_is_total_and_deterministic(raw, history, usage, calls):
    first = decide(raw, POLICY, history, usage, calls=calls)
    again = decide(raw, POLICY, history, usage, calls=calls)
    assert first == again
    assert first.outcome in set(Outcome)


@settings(max_examples=300)
@given(answers(), past_turns)
def test_no_malformed_or_missing_answer_ever_continues(raw, history):
    decision = decide(raw, POLICY, history)
    broken = [r for r in decision.reasons if r.band in ("malformed", "uncertain")]
    if broken:
        assert decision.outcome in (Outcome.ESCALATE, Outcome.STOP_FAILURE)


@settings(max_examples=300)
@given(answers(allow_malformed=False), past_turns)
def test_the_outcome_is_the_highest_ranked_outcome_any_reason_asked_for(raw, history):
    decision = decide(raw, POLICY, history)
    asked = {r.outcome for r in decision.reasons} | {Outcome.CONTINUE}
    assert decision.outcome == min(asked, key=PRECEDENCE.index)


@settings(max_examples=200)
@given(answers(), past_turns, st.integers(min_value=1, max_value=10))
def test_the_turn_cap_always_ends_the_run_without_continuing(raw, history, cap):
    policy = default_policy(budgets=Budgets(max_turns=cap))
    decision = decide(raw, policy, history, Usage(turns=cap))
    assert decision.outcome in (Outcome.STOP_FAILURE, Outcome.STOP_SUCCESS)
    if decision.outcome == Outcome.STOP_FAILURE:
        assert decision.stop_reason == "turn_cap"
    else:
        assert Condition.GOAL_REACHED in decision.fired
