"""The scripted actor and guardian: the script position comes from the projection alone, answers
pass through untouched, and a bad scenario names every problem (pure, no database)."""

import copy
import time

import pytest

from guardian_core.adapters.scripted import (
    CALM_ANSWERS,
    SAFE_RISK,
    SCRIPT_ENDED,
    ScenarioError,
    ScriptedActor,
    ScriptedGuardian,
    scenario_problems,
    turn_number,
)
from guardian_core.engine.conditions import Condition, Malformed, parse_answer
from guardian_core.engine.loop import Feedback, ProposedCall, run_turn
from guardian_core.engine.policy import POST_EXECUTION_CONDITIONS, Outcome
from guardian_core.engine.state import LoopState, project
from guardian_core.engine.thresholds import default_policy
from tests.engine.fakes import FakeClock, Ledger, desk

DRIFT_OK = {"0": 0, "1": 0, "2": 0.1, "3": 0.3, "4": 0.6}
SCENARIO = {
    "name": "refund_waits_for_approval",
    "goal": "Refund order ord_4472: the parcel arrived broken.",
    "acceptance_criteria": ["The refund is issued"],
    "tools": ["read_order", "issue_refund"],
    "budgets": {"max_turns": 6},
    "actor": {
        "turns": [
            {
                "calls": [
                    {
                        "tool": "read_order",
                        "arguments": {"order_id": "ord_4472"},
                        "intent": "look up the order",
                        "call_id": "call_1",
                    }
                ],
                "message": "",
                "tokens": 120,
                "cost": 0.002,
            },
            {
                "calls": [
                    {
                        "tool": "issue_refund",
                        "arguments": {"order_id": "ord_4472", "amount": 49.9},
                        "intent": "refund the broken parcel",
                    }
                ],
                "tokens": 90,
            },
        ],
        "after_feedback": {"calls": [], "message": "I will not issue that refund."},
    },
    "guardian": {
        "model_version": "scripted-7",
        "risk": {
            "issue_refund": {
                "read_only": 0,
                "reversible_write": 0,
                "irreversible": 0.97,
                "regulated": 0.03,
            },
            "read_order": None,
        },
        "turns": [
            {
                "integrity": 0.01,
                "infeasible": 0.02,
                "goal_reached": 0.05,
                "drift": DRIFT_OK,
                "stagnation": 0.05,
            },
            {"goal_reached": 1.7, "integrity": None},
        ],
        "default": {"stagnation": 0.4},
    },
}


def projection(turns_done: int, *, dropped: int = 0, tool: str | None = None) -> dict:
    """A projection after `turns_done` turns, of which the oldest `dropped` were cut."""
    history = [{"turn": t, "summary": f"turn {t}: read_order done"} for t in range(turns_done)]
    data: dict = {"goal": SCENARIO["goal"], "history": history[dropped:], "last_results": []}
    if dropped:
        data["truncated"] = {"history_dropped": dropped, "results_dropped": 0, "chars_cut": 0}
    if tool is not None:
        data["pending_proposal"] = {"tool": tool, "description": "", "arguments": {}, "intent": ""}
    return data


def scenario(**changes) -> dict:
    data = copy.deepcopy(SCENARIO)
    for key, value in changes.items():
        data[key] = value
    return data


# ---- turn indexing -------------------------------------------------------------------------


def test_the_turn_number_counts_history_items_and_the_ones_the_projection_dropped():
    assert turn_number({"goal": "g"}) == 0
    assert turn_number(projection(3)) == 3
    assert turn_number(projection(11, dropped=4)) == 11


def test_the_actor_proposes_the_step_scripted_for_the_projections_turn():
    actor = ScriptedActor(SCENARIO)

    first = actor.propose(projection(0), ())
    second = actor.propose(projection(1), ())

    assert first.calls == (
        ProposedCall(
            tool="read_order",
            arguments={"order_id": "ord_4472"},
            intent="look up the order",
            call_id="call_1",
        ),
    )
    assert (first.message, first.tokens, first.cost) == ("", 120, 0.002)
    assert [c.tool for c in second.calls] == ["issue_refund"]
    assert second.calls[0].arguments == {"order_id": "ord_4472", "amount": 49.9}


def test_a_truncated_history_still_selects_the_right_turn():
    actor = ScriptedActor(SCENARIO)

    proposal = actor.propose(projection(1, dropped=1), ())

    assert [c.tool for c in proposal.calls] == ["issue_refund"]


def test_the_actor_keeps_no_state_so_a_retried_turn_proposes_the_same_step():
    proposals = [ScriptedActor(SCENARIO).propose(projection(1), ()) for _ in range(2)]
    actor = ScriptedActor(SCENARIO)
    proposals += [actor.propose(projection(1), ()), actor.propose(projection(1), ())]

    assert all(p == proposals[0] for p in proposals)


def test_the_actor_answers_feedback_with_its_after_feedback_step():
    actor = ScriptedActor(SCENARIO)
    rejected = ProposedCall("issue_refund", {"order_id": "ord_4472", "amount": 49.9})

    proposal = actor.propose(projection(2), (Feedback(rejected, "not approved"),))

    assert proposal.calls == ()
    assert proposal.message == "I will not issue that refund."


def test_without_an_after_feedback_step_feedback_does_not_change_the_script():
    data = scenario()
    del data["actor"]["after_feedback"]
    rejected = ProposedCall("issue_refund", {})

    proposal = ScriptedActor(data).propose(projection(1), (Feedback(rejected, "no"),))

    assert [c.tool for c in proposal.calls] == ["issue_refund"]


def test_past_the_end_of_its_script_the_actor_proposes_nothing():
    proposal = ScriptedActor(SCENARIO).propose(projection(2), ())

    assert proposal.calls == ()
    assert proposal.message == SCRIPT_ENDED


def test_arguments_are_passed_on_as_scripted_even_when_they_are_not_an_object():
    data = scenario()
    data["actor"]["turns"][0]["calls"][0]["arguments"] = '{"order_id": 4472'

    proposal = ScriptedActor(data).propose(projection(0), ())

    assert proposal.calls[0].arguments == '{"order_id": 4472'


def test_a_proposal_is_a_copy_so_changing_it_never_changes_the_script():
    actor = ScriptedActor(SCENARIO)

    actor.propose(projection(0), ()).calls[0].arguments["order_id"] = "ord_0000"

    assert actor.propose(projection(0), ()).calls[0].arguments == {"order_id": "ord_4472"}


# ---- the guardian --------------------------------------------------------------------------


def test_the_guardian_answers_turn_n_from_the_entry_of_turn_n_minus_one():
    guardian = ScriptedGuardian(SCENARIO)

    answers = guardian.answer(projection(1), POST_EXECUTION_CONDITIONS)

    assert answers == SCENARIO["guardian"]["turns"][0]
    assert guardian.model_version == "scripted-7"


def test_answers_pass_through_untouched_even_when_malformed():
    answers = ScriptedGuardian(SCENARIO).answer(projection(2), POST_EXECUTION_CONDITIONS)

    assert answers["goal_reached"] == 1.7
    assert answers["integrity"] is None
    assert isinstance(parse_answer(Condition.GOAL_REACHED, answers["goal_reached"]), Malformed)
    assert isinstance(parse_answer(Condition.INTEGRITY, answers["integrity"]), Malformed)


def test_a_missing_answer_falls_back_to_the_default_then_to_calm():
    answers = ScriptedGuardian(SCENARIO).answer(projection(2), POST_EXECUTION_CONDITIONS)

    assert answers["stagnation"] == 0.4  # the scenario's default
    assert answers["drift"] == CALM_ANSWERS["drift"]  # no default either: calm
    assert answers["infeasible"] == CALM_ANSWERS["infeasible"]


def test_past_the_end_of_its_turns_the_guardian_answers_the_default_then_calm():
    answers = ScriptedGuardian(SCENARIO).answer(projection(9, dropped=3), [Condition.STAGNATION])

    assert answers == {"stagnation": 0.4}


def test_a_guardian_without_a_script_is_calm_and_calls_everything_read_only():
    data = scenario()
    del data["guardian"]
    guardian = ScriptedGuardian(data)

    answers = guardian.answer(projection(1), POST_EXECUTION_CONDITIONS)

    assert answers == CALM_ANSWERS
    assert guardian.model_version == "scripted-1"
    assert guardian.assess_risk([projection(0, tool="issue_refund")]) == [SAFE_RISK]
    for condition in POST_EXECUTION_CONDITIONS:
        assert not isinstance(parse_answer(condition, answers[condition.value]), Malformed)


def test_risk_answers_come_by_tool_with_a_safe_default():
    guardian = ScriptedGuardian(SCENARIO)
    projections = [projection(1, tool=t) for t in ("issue_refund", "lookup_policy", "read_order")]

    answers = guardian.assess_risk(projections)

    assert answers == [SCENARIO["guardian"]["risk"]["issue_refund"], SAFE_RISK, None]


def test_answers_are_copies_so_changing_them_never_changes_the_script():
    guardian = ScriptedGuardian(SCENARIO)

    guardian.answer(projection(1), [Condition.DRIFT])["drift"]["4"] = 0.0

    assert guardian.answer(projection(1), [Condition.DRIFT])["drift"] == DRIFT_OK


def test_a_timeout_answer_becomes_malformed_by_the_deadline():
    data = scenario()
    data["guardian"]["turns"][0]["integrity"] = "timeout"
    guardian = ScriptedGuardian(data, deadline_seconds=0.2)

    start = time.monotonic()
    answers = guardian.answer(projection(1), POST_EXECUTION_CONDITIONS)

    assert time.monotonic() - start < 0.2 + 1.5  # the scripted answer would take 2.2 s
    assert isinstance(answers["integrity"], Malformed)
    assert "timed out" in answers["integrity"].reason
    assert answers["stagnation"] == 0.05


def test_a_delay_past_the_deadline_times_out_every_answer():
    data = scenario()
    data["guardian"]["delay_seconds"] = 0.6
    guardian = ScriptedGuardian(data, deadline_seconds=0.1)

    answers = guardian.answer(projection(1), POST_EXECUTION_CONDITIONS)
    risks = guardian.assess_risk([projection(1, tool="issue_refund")])

    assert all(isinstance(a, Malformed) for a in [*answers.values(), *risks])


def test_a_delay_within_the_deadline_answers_as_scripted():
    data = scenario()
    data["guardian"]["delay_seconds"] = 0.05

    answers = ScriptedGuardian(data, deadline_seconds=2).answer(projection(1), [Condition.DRIFT])

    assert answers == {"drift": DRIFT_OK}


# ---- end to end through the engine ---------------------------------------------------------


def test_a_scripted_run_reads_the_order_then_holds_the_refund_for_a_reviewer():
    ledger = Ledger()
    data = scenario()
    del data["guardian"]["risk"]["read_order"]  # the calm default, not a malformed answer
    actor, guardian = ScriptedActor(data), ScriptedGuardian(data)
    state = LoopState(goal=SCENARIO["goal"], acceptance_criteria=("The refund is issued",))
    records = []
    for index in range(2):
        record = run_turn(
            state,
            run_id="run-1",
            index=index,
            actor=actor,
            guardian=guardian,
            tools=desk(ledger),
            clock=FakeClock(),
            policy=default_policy(),
        )
        records.append(record)
        state = record.state_after

    assert [r.decision.outcome for r in records] == [Outcome.CONTINUE, Outcome.ESCALATE]
    assert [c.status for c in records[1].calls] == ["held"]
    assert ledger.ran("read_order") == [{"order_id": "ord_4472"}]
    assert ledger.ran("issue_refund") == []
    assert records[0].guardian_model_version == "scripted-7"
    assert turn_number(project(state).data) == 2


# ---- validation ----------------------------------------------------------------------------


def test_a_valid_scenario_has_no_problems():
    assert scenario_problems(SCENARIO) == []


def test_scenario_problems_names_every_bad_field_at_once():
    data = scenario(name="Bad Name", goal="", budgets={"max_turns": 0}, surprise=True)
    data["actor"]["turns"][1]["calls"][0]["tool"] = 7
    data["actor"]["turns"][0]["tokens"] = -1
    data["actor"]["turns"][0]["calls"][0]["intnet"] = "typo"
    data["guardian"]["turns"][1]["goal_reachd"] = 0.9
    data["guardian"]["delay_seconds"] = "slow"

    problems = scenario_problems(data)

    assert len(problems) == 9, problems
    expected = [
        "scenario: Additional properties are not allowed ('surprise' was unexpected)",
        "scenario.actor.turns[0].calls[0]: Additional properties are not allowed ('intnet'",
        "scenario.actor.turns[0].tokens: -1 is less than the minimum of 0",
        "scenario.actor.turns[1].calls[0].tool: 7 is not of type 'string'",
        "scenario.budgets.max_turns: 0 is less than the minimum of 1",
        "scenario.goal: '' should be non-empty",
        "scenario.guardian.delay_seconds: 'slow' is not of type 'number'",
        "scenario.guardian.turns[1]: 'goal_reachd' is not one of",
        "scenario.name: 'Bad Name' does not match",
    ]
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(start), (problem, start)


def test_a_scenario_that_is_not_an_object_is_one_problem():
    assert scenario_problems(["not", "a", "scenario"]) == [
        "scenario: ['not', 'a', 'scenario'] is not of type 'object'"
    ]


def test_a_scenario_without_its_required_keys_names_each_of_them():
    problems = scenario_problems({"name": "x"})

    assert problems == [
        "scenario: 'actor' is a required property",
        "scenario: 'goal' is a required property",
    ]


def test_the_adapters_refuse_a_bad_scenario_with_every_problem_in_the_message():
    data = scenario(goal="")
    data["guardian"]["delay_seconds"] = -1

    for adapter in (ScriptedActor, ScriptedGuardian):
        with pytest.raises(ScenarioError) as raised:
            adapter(data)
        message = str(raised.value)
        assert "refund_waits_for_approval" in message
        assert "scenario.goal" in message
        assert "scenario.guardian.delay_seconds" in message
