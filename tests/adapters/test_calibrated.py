"""The calibrated guardian adapter and the calibration maps: answers mapped in the shape the
guardian gave them, Malformed passed through, everything else the inner guardian's."""

import math

import numpy as np
import pytest

from guardian_core.adapters.calibrated import CalibratedGuardian, calibrate_answer
from guardian_core.adapters.pricing import Spend
from guardian_core.engine.calibration import (
    FitRefused,
    apply_map,
    fit_map,
    map_problems,
    split_indices,
)
from guardian_core.engine.conditions import Condition, Malformed, compared_probability, parse_answer

approx = pytest.approx
# p ↦ p / 2 between 0 and 1 (an isotonic map halving every probability).
HALF = {"method": "isotonic", "x": [0.0, 1.0], "y": [0.0, 0.5]}


class Inner:
    """A guardian with fixed answers, a judge, a spend and a client to close."""

    model_version = "inner-7"
    question_set_version = "q-3"
    takes_question_text = True

    def __init__(self) -> None:
        self.spend = Spend(tokens=12, cost=0.5)
        self.closed = False

    def answer(self, projection, conditions):
        answers = {
            "integrity": 0.8,
            "stagnation": Malformed("guardian timed out after 2 s"),
            "risk": {
                "read_only": 0.2,
                "reversible_write": 0.2,
                "irreversible": 0.3,
                "regulated": 0.3,
            },
            "drift": {"0": 0.1, "1": 0.1, "2": 0.2, "3": 0.2, "4": 0.4},
            "goal_reached": 1.7,  # out of range: the engine reads it as Malformed
            "infeasible": 0.4,
        }
        return {str(c): answers[str(c)] for c in conditions}

    def assess_risk(self, projections):
        return [{"read_only": 0.5, "reversible_write": 0.1, "irreversible": 0.4, "regulated": 0.0}]

    def judge(self, projection, condition):
        return 0.99

    def close(self) -> None:
        self.closed = True


def _guardian(**maps) -> CalibratedGuardian:
    return CalibratedGuardian(Inner(), maps, "inner-7/cal-2")


def test_a_yes_no_probability_is_mapped_and_the_log_sees_the_versions_model_version():
    guardian = _guardian(integrity=HALF)
    answers = guardian.answer({"goal": "g"}, [Condition.INTEGRITY, Condition.INFEASIBLE])
    assert answers == {"integrity": approx(0.4), "infeasible": 0.4}  # no map: untouched
    assert guardian.model_version == "inner-7/cal-2"


def test_malformed_and_unreadable_answers_pass_through_untouched():
    guardian = _guardian(stagnation=HALF, goal_reached=HALF)
    answers = guardian.answer({"goal": "g"}, [Condition.STAGNATION, Condition.GOAL_REACHED])
    assert answers["stagnation"] == Malformed("guardian timed out after 2 s")
    assert answers["goal_reached"] == 1.7  # still malformed for the engine, not made usable
    assert isinstance(parse_answer(Condition.GOAL_REACHED, answers["goal_reached"]), Malformed)


def test_risk_maps_the_compared_probability_and_keeps_each_sides_ratios():
    guardian = _guardian(risk=HALF)
    mapped = guardian.answer({"goal": "g"}, [Condition.RISK])["risk"]
    # P(irreversible or regulated) 0.6 ↦ 0.3, shared 1:1 as before; the other 0.7 shared 1:1.
    assert mapped == {
        "read_only": approx(0.35),
        "reversible_write": approx(0.35),
        "irreversible": approx(0.15),
        "regulated": approx(0.15),
    }
    assert math.fsum(mapped.values()) == approx(1.0, abs=1e-9)
    assessed = guardian.assess_risk([{"goal": "g"}])[0]
    assert compared_probability(Condition.RISK, parse_answer(Condition.RISK, assessed)) == approx(
        0.2
    )
    assert assessed["regulated"] == 0.0
    assert assessed["irreversible"] == approx(0.2)


def test_drift_maps_the_probability_of_having_left_the_goal():
    guardian = _guardian(drift=HALF)
    mapped = guardian.answer({"goal": "g"}, [Condition.DRIFT])["drift"]
    answer = parse_answer(Condition.DRIFT, mapped)
    assert compared_probability(Condition.DRIFT, answer) == approx(0.1)  # P(score ≤ 1) 0.2 ↦ 0.1
    assert set(mapped) == {"0", "1", "2", "3", "4"}
    assert mapped["4"] == approx(0.4 / 0.8 * 0.9)


def test_everything_but_the_answers_is_the_inner_guardians():
    inner = Inner()
    guardian = CalibratedGuardian(inner, {"integrity": HALF}, "inner-7/cal-2")
    assert guardian.question_set_version == "q-3"
    assert guardian.takes_question_text is True
    assert guardian.spend == Spend(tokens=12, cost=0.5)
    assert guardian.judge({"goal": "g"}, "integrity") == 0.99  # the judge is not recalibrated
    with guardian:
        pass
    assert inner.closed


def test_no_judge_when_the_inner_guardian_has_none():
    class NoJudge:
        model_version = "m"
        question_set_version = "q"

    assert not hasattr(CalibratedGuardian(NoJudge(), {}, "m/cal-1"), "judge")


def test_a_version_fitted_on_another_base_model_answers_malformed_for_every_condition():
    guardian = CalibratedGuardian(
        Inner(), {"integrity": HALF}, "inner-6/cal-2", base_model_version="inner-6"
    )
    answers = guardian.answer({"goal": "g"}, [Condition.INTEGRITY, Condition.RISK])
    assert all(isinstance(a, Malformed) for a in answers.values())
    assert "learnt on inner-6; the guardian now is inner-7" in answers["integrity"].reason
    assert isinstance(guardian.assess_risk([{"goal": "g"}])[0], Malformed)


def test_a_bad_map_is_refused_naming_the_condition_and_the_problem():
    with pytest.raises(ValueError, match="integrity: x: must be non-decreasing") as refused:
        CalibratedGuardian(
            Inner(),
            {
                "integrity": {"method": "isotonic", "x": [0.5, 0.1], "y": [0.1, 0.2]},
                "risk": {"method": "platt", "a": "x", "b": 0.0},
                "nonsense": HALF,
            },
            "v",
        )
    assert "risk: a: must be a finite number" in str(refused.value)
    assert "nonsense: not a condition" in str(refused.value)


def test_platt_and_isotonic_maps_are_applied_with_numpy_alone():
    platt = {"method": "platt", "a": 0.5, "b": 0.0}
    assert apply_map(platt, 0.5) == approx(0.5)
    # logit(0.9) = 2.197; halved, 1.0986 = logit(0.75).
    assert apply_map(platt, 0.9) == approx(0.75, abs=1e-6)
    iso = {"method": "isotonic", "x": [0.2, 0.6], "y": [0.1, 0.3]}
    assert [apply_map(iso, p) for p in (0.0, 0.4, 1.0)] == [0.1, approx(0.2), 0.3]
    assert map_problems(platt) == map_problems(iso) == []
    assert calibrate_answer(Condition.INTEGRITY, 0.9, platt) == approx(0.75, abs=1e-6)


def test_fitting_chooses_a_map_on_held_out_examples_and_improves_an_overconfident_guardian():
    rng = np.random.default_rng(1)
    truth = rng.uniform(0.2, 0.8, 600)
    y = rng.uniform(size=600) < truth
    z = 3 * np.log(truth / (1 - truth))  # three times too sure of itself
    p = 1 / (1 + np.exp(-z))
    fit = fit_map(p, y)
    assert fit.method in ("isotonic", "platt")
    assert set(fit.fit_indices).isdisjoint(fit.held_out_indices)
    assert len(fit.held_out_indices) == approx(180, abs=2)
    assert fit.after["ece"] < fit.before["ece"] - 0.05
    assert fit.after["log_loss"] < fit.before["log_loss"]
    # The same data and seed give the same split and the same map.
    assert fit_map(p, y).mapping == fit.mapping


def test_a_fit_is_refused_on_too_few_examples_or_one_class():
    with pytest.raises(FitRefused, match="12 labelled examples with a probability, at least 20"):
        fit_map([0.5] * 12, [True, False] * 6)
    with pytest.raises(FitRefused, match="one class only"):
        fit_map([0.5] * 30, [False] * 30)
    with pytest.raises(FitRefused, match="2 positive and 28 negative examples"):
        fit_map([0.5] * 30, [True] * 2 + [False] * 28)


def test_the_split_is_stratified_and_seeded():
    y = np.array([True] * 10 + [False] * 30)
    fit, held = split_indices(y, seed=3)
    assert y[held].sum() == 3
    assert (~y[held]).sum() == 9
    assert list(held) == list(split_indices(y, seed=3)[1])
    assert sorted([*fit, *held]) == list(range(40))
