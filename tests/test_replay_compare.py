"""What decision replay compares: every logged reason field by field, the fired set and the
thresholds in force, whatever the JSON's spelling; a run read in chunks as in one."""

import dataclasses
import json

import pytest

from guardian_core.engine.policy import Usage, decide
from guardian_core.engine.thresholds import default_policy
from runs import replay
from runs.models import Decision
from runs.replay import DIFFERENT, IDENTICAL, TurnReplay, run_replay
from tests.factories import json_placeholder, tamper, tamper_rows
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db


def _first_decision(run) -> Decision:
    return Decision.objects.filter(turn__run=run).order_by("turn__index").first()


def _replayed(run) -> dict[int, TurnReplay]:
    return {result.turn_index: result for result in run_replay(run=run)}


def _spelled(value, path: tuple, spelling: str) -> str:
    """`value` as JSON text with the number at `path` written as `spelling`: the same number in
    other words, as a row written by other software could hold it."""
    marker = "a number spelled otherwise"
    copy = json.loads(json.dumps(value))
    node = copy
    for key in path[:-1]:
        node = node[key]
    assert float(spelling) == node[path[-1]]
    node[path[-1]] = marker
    return json.dumps(copy).replace(json.dumps(marker), spelling)


def test_a_changed_reason_detail_is_a_difference_in_the_reasons():
    run = drive(start("drifting_agent"))
    decision = _first_decision(run)
    reasons = decision.reasons
    reasons[0]["detail"] = "p=0.000 is below t*=0.100"
    tamper_rows(Decision.objects.filter(pk=decision.pk), reasons=reasons)
    result = _replayed(run)[decision.turn.index]
    assert (result.status, result.differences) == (DIFFERENT, ("reasons",))
    assert result.logged_reasons[0]["detail"] == "p=0.000 is below t*=0.100"
    assert result.replayed_reasons[0]["detail"] != result.logged_reasons[0]["detail"]


@pytest.mark.parametrize(
    "change",
    [
        lambda reasons: reasons[0].pop("delta"),  # a field missing
        lambda reasons: reasons[0].update(note="x"),  # a field more
        lambda reasons: reasons[0].update(value=None),  # a value gone
        lambda reasons: reasons.append(dict(reasons[0])),  # a reason more
        lambda reasons: reasons[0].update(detail=reasons[0]["detail"] + "\n"),
    ],
    ids=["missing-field", "extra-field", "null-value", "extra-reason", "escaped-detail"],
)
def test_any_other_change_to_a_logged_reason_is_a_difference(change):
    run = drive(start("goal_reached"))
    decision = _first_decision(run)
    reasons = decision.reasons
    change(reasons)
    tamper_rows(Decision.objects.filter(pk=decision.pk), reasons=reasons)
    result = _replayed(run)[decision.turn.index]
    assert result.differences == ("reasons",)


def test_reasons_spelled_otherwise_but_equal_are_identical():
    """The same JSON in other words (a float's trailing zero: jsonb and SQLite keep it) is the
    same."""
    run = drive(start("drifting_agent"))
    decision = _first_decision(run)
    t_star = json.dumps(decision.reasons[0]["t_star"])
    assert "." in t_star
    tamper(
        f"UPDATE runs_decision SET reasons = {json_placeholder()} WHERE id = %s",
        [_spelled(decision.reasons, (0, "t_star"), t_star + "0"), decision.pk],
    )
    result = _replayed(run)[decision.turn.index]
    assert result.status == IDENTICAL


def test_changed_thresholds_in_force_are_named_and_equal_ones_spelled_otherwise_are_not():
    run = drive(start("drifting_agent"))
    first, *rest = Decision.objects.filter(turn__run=run).order_by("turn__index")
    changed = first.thresholds
    changed["drift"]["t_star"] = 0.6
    tamper_rows(Decision.objects.filter(pk=first.pk), thresholds=changed)
    tamper(
        f"UPDATE runs_decision SET thresholds = {json_placeholder()} WHERE id = %s",
        [_spelled(rest[0].thresholds, ("drift", "t_star"), "0.50000"), rest[0].pk],
    )
    results = _replayed(run)
    assert results[first.turn.index].differences == (
        "thresholds in force differ from the pinned policy version's",
    )
    assert results[rest[0].turn.index].status == IDENTICAL


def test_a_changed_fired_set_is_named():
    run = drive(start("drifting_agent"))
    decision = _first_decision(run)
    tamper("UPDATE runs_decision SET fired = '[\"drift\"]' WHERE id = %s", [decision.pk])
    result = _replayed(run)[decision.turn.index]
    assert "fired: drift → —" in result.differences


def test_a_row_logged_in_other_words_replays_identical():
    """Reasons written as SQLite keeps them (Django's json.dumps: another key order, δ
    escaped), with a probability that prints with an exponent: still the same reasons."""
    policy = default_policy()
    answers = {
        "integrity": 1e-05,
        "infeasible": 0.85,
        "goal_reached": 0.1,
        "drift": {"4": 1.0},
        "stagnation": 0.2,
    }
    decision = decide(answers, policy, [], Usage(turns=1))
    row = (
        0,
        {"turns": 1},
        decision.outcome.value,
        answers,
        sorted(c.value for c in decision.fired),
        [],
        decision.stop_reason or "",
        json.loads(json.dumps([r.as_dict() for r in decision.reasons])),
        True,
    )
    result = replay.replay_turn_row(run_id=1, row=row, policy=policy, history=[], replans=0)
    assert (result.status, result.differences) == (IDENTICAL, ())
    assert result.logged_reasons == tuple(result.replayed_reasons)


def test_a_turn_replay_is_built_whole():
    policy = default_policy()
    answers = {"integrity": 0.5, "infeasible": 0.1, "goal_reached": 0.1, "stagnation": 0.1}
    row = (3, {"turns": 4}, "continue", answers, [], [], "", [], False)
    result = replay.replay_turn_row(run_id=9, row=row, policy=policy, history=[], replans=0)
    fields = {f.name: getattr(result, f.name) for f in dataclasses.fields(TurnReplay)}
    assert vars(result) == fields
    assert result == TurnReplay(**fields)
    assert result.differences == (
        "outcome: continue → escalate",
        "fired: — → integrity",
        "reasons",
        "thresholds in force differ from the pinned policy version's",
    )


def test_a_run_read_in_many_pages_replays_as_in_one(monkeypatch):
    run = drive(start("drifting_agent"))
    whole = [dataclasses.astuple(r) for r in run_replay(run=run)]
    monkeypatch.setattr(replay, "_CHUNK", 2)
    assert [dataclasses.astuple(r) for r in run_replay(run=run)] == whole
    assert [r.turn_index for r in run_replay(run=run, start_index=2, limit=2)] == [2, 3]
    assert [dataclasses.astuple(r) for r in run_replay(run=run, start_index=3)] == whole[3:]


def test_the_connection_is_free_while_a_result_is_held_and_after_stopping_early():
    run = drive(start("drifting_agent"))
    results = run_replay(run=run)
    first = next(results)
    assert Decision.objects.filter(turn__run=run).count() > 1  # a query between two results
    results.close()
    assert first.status == IDENTICAL
    assert len(list(run_replay(run=run, limit=1))) == 1
    assert Decision.objects.filter(turn__run=run).exists()


def test_a_run_with_no_decided_turn_replays_nothing():
    assert list(run_replay(run=start("drifting_agent"))) == []
