"""Typed answers, malformed answers, and thresholds derived from stated costs."""

import math

import pytest

from guardian_core.engine.conditions import (
    Condition,
    DriftDistribution,
    Malformed,
    RiskClass,
    RiskDistribution,
    YesNo,
    compared_probability,
    parse_answer,
)
from guardian_core.engine.thresholds import Band, Threshold, default_policy

RISK_OK = {"read_only": 0.7, "reversible_write": 0.2, "irreversible": 0.05, "regulated": 0.05}


@pytest.mark.parametrize(
    "raw",
    [None, math.nan, -0.01, 1.01, math.inf, "0.5", True, [0.5], {"p": 0.5}],
    ids=["missing", "nan", "negative", "above-one", "inf", "string", "bool", "list", "dict"],
)
def test_a_yes_no_answer_that_is_not_a_probability_is_malformed(raw):
    assert isinstance(parse_answer(Condition.INTEGRITY, raw), Malformed)


def test_a_yes_no_probability_is_kept_as_is():
    assert parse_answer(Condition.GOAL_REACHED, 0.42) == YesNo(0.42)
    assert parse_answer(Condition.GOAL_REACHED, 1) == YesNo(1.0)


def test_a_risk_distribution_that_does_not_sum_to_one_is_malformed():
    answer = parse_answer(Condition.RISK, {**RISK_OK, "read_only": 0.2})
    assert isinstance(answer, Malformed)
    assert "sums to" in answer.reason


def test_a_risk_distribution_with_an_unknown_class_is_malformed():
    assert isinstance(parse_answer(Condition.RISK, {**RISK_OK, "spicy": 0.0}), Malformed)


def test_a_risk_distribution_within_tolerance_is_accepted():
    answer = parse_answer(Condition.RISK, {**RISK_OK, "read_only": 0.7004})
    assert isinstance(answer, RiskDistribution)


def test_drift_scores_arrive_as_json_string_keys():
    answer = parse_answer(Condition.DRIFT, {"0": 0.1, "1": 0.1, "2": 0.2, "3": 0.3, "4": 0.3})
    assert isinstance(answer, DriftDistribution)
    assert compared_probability(Condition.DRIFT, answer) == pytest.approx(0.2)


def test_a_drift_score_outside_zero_to_four_is_malformed():
    assert isinstance(parse_answer(Condition.DRIFT, {"5": 1.0}), Malformed)


def test_risk_compares_the_probability_of_irreversible_or_regulated():
    answer = parse_answer(Condition.RISK, RISK_OK)
    assert compared_probability(Condition.RISK, answer) == pytest.approx(0.10)


def test_a_malformed_answer_has_no_probability_to_compare():
    assert compared_probability(Condition.INTEGRITY, Malformed("timeout")) is None


def test_t_star_comes_from_the_cost_of_a_false_stop_and_a_false_continue():
    assert Threshold(c_stop=1, c_cont=9, delta=0.05).t_star == pytest.approx(0.1)
    assert Threshold(c_stop=4, c_cont=1, delta=0.05).t_star == pytest.approx(0.8)


def test_the_uncertain_band_sits_around_t_star_not_around_one_half():
    threshold = Threshold(c_stop=1, c_cont=9, delta=0.05)  # t* = 0.1
    assert threshold.band(0.12) == Band.UNCERTAIN
    assert threshold.band(0.5) == Band.FIRED
    assert threshold.band(0.04) == Band.CLEAR
    assert threshold.band(None) == Band.UNCERTAIN


def test_the_band_edges_are_uncertain():
    threshold = Threshold(c_stop=1, c_cont=1, delta=0.125)  # t* = 0.5, exact in binary
    assert threshold.band(0.375) == Band.UNCERTAIN
    assert threshold.band(0.625) == Band.UNCERTAIN
    assert threshold.band(0.6251) == Band.FIRED


def test_a_threshold_with_impossible_costs_names_every_bad_field():
    with pytest.raises(ValueError, match="c_stop must be > 0") as error:
        Threshold(c_stop=0, c_cont=-1, delta=0.7)
    assert "c_cont must be > 0" in str(error.value)
    assert "delta must be in" in str(error.value)


def test_a_policy_without_a_threshold_for_every_condition_is_refused():
    policy = default_policy()
    partial = {c: t for c, t in policy.thresholds.items() if c != Condition.DRIFT}
    with pytest.raises(ValueError, match="no threshold for: drift"):
        default_policy(thresholds=partial)


def test_the_default_policy_biases_thresholds_as_the_design_says():
    t = {c: threshold.t_star for c, threshold in default_policy().thresholds.items()}
    assert t[Condition.INTEGRITY] < 0.5
    assert t[Condition.RISK] < 0.5
    assert t[Condition.INFEASIBLE] > 0.5
    assert t[Condition.GOAL_REACHED] > 0.5
    assert t[Condition.DRIFT] == t[Condition.STAGNATION] == 0.5


def test_risk_classes_are_ordered_by_severity():
    assert [c.severity for c in RiskClass] == [0, 1, 2, 3]
    assert {c for c in RiskClass if c.needs_approval} == {
        RiskClass.IRREVERSIBLE,
        RiskClass.REGULATED,
    }
