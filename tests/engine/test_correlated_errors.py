"""Correlated errors' arithmetic: which turns the actor had wrong or right, the 2 × 2 table per
condition, Wilson intervals, phi, and a cluster bootstrap that reads a difference as beyond
noise only when it is."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardian_core.engine.conditions import Condition
from guardian_core.engine.correlated_errors import (
    MEASURED,
    ActorOutcome,
    Reading,
    Table,
    actor_ending,
    correlated_errors,
    flagged,
    merge,
    phi,
    turn_outcomes,
    wilson_interval,
)
from guardian_core.engine.thresholds import Threshold

WRONG, RIGHT = ActorOutcome.WRONG, ActorOutcome.RIGHT


def test_a_run_ending_judges_the_actor_only_when_it_is_not_the_guardians_stop_or_nobodys():
    assert actor_ending("succeeded", "goal_reached") == RIGHT
    assert actor_ending("failed", "rejected_by_reviewer") == WRONG
    assert actor_ending("cancelled", "cancelled") == WRONG
    assert actor_ending("failed", "turn_cap") == WRONG
    assert actor_ending("failed", "infeasible") is None  # the guardian's own stop
    assert actor_ending("failed", "escalation_expired") is None  # nobody judged
    assert actor_ending("running", "") is None


def test_a_rejection_makes_its_turn_and_every_earlier_one_wrong_and_later_ones_take_the_ending():
    outcomes = turn_outcomes(range(5), rejected=[2], approved=[4], ending=None)
    assert outcomes == {0: WRONG, 1: WRONG, 2: WRONG, 3: None, 4: RIGHT}

    corrected = turn_outcomes(range(4), rejected=[1], ending=RIGHT)
    assert corrected == {0: WRONG, 1: WRONG, 2: RIGHT, 3: RIGHT}

    failed = turn_outcomes(range(3), approved=[0, 1], ending=WRONG)
    assert failed == {0: WRONG, 1: WRONG, 2: WRONG}


def test_the_guardian_flags_a_turn_in_the_band_or_above_and_misses_below_it():
    threshold = Threshold(c_stop=1, c_cont=9, delta=0.05)  # t* 0.1, band 0.05–0.15
    assert not flagged(0.04, threshold)
    assert flagged(0.05, threshold)
    assert flagged(0.12, threshold)
    assert flagged(0.9, threshold)


def test_goal_reached_is_not_measured_its_firing_is_the_runs_success():
    assert Condition.GOAL_REACHED not in MEASURED
    assert len(MEASURED) == len(Condition) - 1


def test_wilson_interval_on_hand_computed_cases():
    lo, hi = wilson_interval(8, 10)
    assert (round(lo, 4), round(hi, 4)) == (0.4902, 0.9433)
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0
    assert round(hi, 4) == 0.1611
    assert wilson_interval(0, 0) is None


def test_figures_of_one_table_by_hand():
    # 10 actor-wrong turns, 8 missed; 40 actor-right turns, 4 flagged.
    report = correlated_errors(
        {Table(wrong_flagged=2, wrong_missed=8, right_flagged=4, right_missed=36): 1}
    )

    assert (report.wrong, report.misses_on_wrong, report.right, report.fired_on_right) == (
        10,
        8,
        40,
        4,
    )
    assert report.miss_rate_on_wrong == pytest.approx(0.8)
    assert report.fire_rate_on_right == pytest.approx(0.1)
    assert report.miss_rate_on_right == pytest.approx(0.9)
    assert report.difference == pytest.approx(-0.1)
    assert report.ratio == pytest.approx(0.8 / 0.9)
    # (8·4 − 2·36) / √(10·40·44·6)
    assert report.phi == pytest.approx(-40 / (10 * 40 * 44 * 6) ** 0.5)
    assert report.reading == Reading.TOO_FEW
    assert "Too few turns" in report.caution


def test_a_guardian_that_misses_exactly_where_reviewers_rejected_is_read_as_dependent():
    # Every run: 3 wrong turns all missed, 3 right turns all flagged.
    report = correlated_errors({Table(wrong_missed=3, right_flagged=3): 20})

    assert report.phi == pytest.approx(1.0)
    assert report.difference == pytest.approx(1.0)
    assert report.reading == Reading.DEPENDENT
    assert report.difference_interval[0] > 0
    assert "independence does not hold" in report.sentence
    assert report.caution == ""


def test_a_guardian_whose_misses_do_not_depend_on_the_actor_shows_no_difference():
    # Half the turns missed, whether the actor was wrong or right, in every run.
    report = correlated_errors({Table(2, 2, 2, 2): 20})

    assert report.phi == pytest.approx(0.0)
    assert report.difference == pytest.approx(0.0)
    assert report.reading == Reading.NO_DIFFERENCE
    lo, hi = report.difference_interval
    assert lo <= 0 <= hi
    assert report.sentence.startswith("No difference beyond noise on 160 turns")


def test_a_guardian_that_flags_the_actors_wrong_turns_catches_rather_than_shares_errors():
    report = correlated_errors({Table(wrong_flagged=3, right_missed=3): 10, Table(1, 1, 1, 1): 10})
    assert report.reading == Reading.CATCHES
    assert report.phi < 0


def test_the_bootstrap_resamples_runs_so_one_long_run_is_not_many_witnesses():
    # The same turns, as 40 short runs or as 2 long ones: the long runs' interval is wider.
    many = correlated_errors({Table(3, 1, 1, 3): 20, Table(1, 3, 3, 1): 20})
    few = correlated_errors({Table(60, 20, 20, 60): 1, Table(20, 60, 60, 20): 1})
    assert (many.wrong, many.right) == (few.wrong, few.right)

    def width(report):
        return report.difference_interval[1] - report.difference_interval[0]

    assert width(few) > width(many)
    assert few.reading == Reading.TOO_FEW  # wrong turns from 2 runs only


def test_the_same_counts_give_the_same_intervals():
    clusters = {Table(1, 2, 3, 4): 7, Table(0, 1, 5, 0): 9}
    assert correlated_errors(clusters) == correlated_errors(clusters)


def test_a_table_round_trips_through_its_key_and_merges_add_runs():
    table = Table(1, 2, 3, 4)
    assert Table.from_key(table.key()) == table
    assert merge([{table: 2}, {table: 1, Table(): 4}]) == {table: 3, Table(): 4}
    assert Table.of_turn(WRONG, False) + Table.of_turn(RIGHT, True) == Table(0, 1, 1, 0)


def test_no_turns_no_figures():
    report = correlated_errors({})
    assert report.turns == 0
    assert report.difference is None
    assert report.phi is None
    assert report.reading == Reading.TOO_FEW
    assert (report.sentence, report.caution) == ("No turn to measure yet.", "")
    assert report.as_dict()["reading"] == "too_few"


small = st.integers(min_value=0, max_value=6)
tables = st.builds(Table, small, small, small, small)


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(tables, st.integers(min_value=1, max_value=5), max_size=6))
def test_phi_is_the_correlation_of_the_turns_and_shares_the_differences_sign(clusters):
    report = correlated_errors(clusters, rng=np.random.default_rng(0), resamples=200)
    total = sum((Table(*(c * n for c in t.cells)) for t, n in clusters.items()), Table())
    missed = [0] * total.wrong_flagged + [1] * total.wrong_missed
    missed += [0] * total.right_flagged + [1] * total.right_missed
    wrong = [1] * total.wrong + [0] * total.right

    assert (report.wrong, report.right) == (total.wrong, total.right)
    if report.phi is None:
        assert len(set(missed)) < 2 or len(set(wrong)) < 2
    else:
        assert report.phi == pytest.approx(np.corrcoef(missed, wrong)[0, 1], abs=1e-9)
        assert -1 - 1e-9 <= report.phi <= 1 + 1e-9
        assert np.sign(round(report.phi, 12)) == np.sign(round(report.difference, 12))
    for rate, interval in (
        (report.miss_rate_on_wrong, report.miss_interval_on_wrong),
        (report.fire_rate_on_right, report.fire_interval_on_right),
    ):
        if rate is not None:
            assert interval[0] - 1e-12 <= rate <= interval[1] + 1e-12
    if report.reading == Reading.DEPENDENT:
        assert report.difference > 0
    if report.reading == Reading.CATCHES:
        assert report.difference < 0
    assert phi(total) == report.phi
