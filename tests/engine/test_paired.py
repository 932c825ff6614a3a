"""The paired bootstrap's arithmetic: figures read at a class prior by weighting, agreeing with
the harness at the examples' own share; intervals of the difference that exclude 0 only when
the versions differ; how an interval reads against a tolerance; how many examples it needs."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from guardian_core.engine.conditions import Condition
from guardian_core.engine.evaluation import (
    expected_calibration_error,
    policy_figures,
    reliability_curve,
)
from guardian_core.engine.paired import (
    BETTER,
    TOO_FEW,
    WITHIN,
    WORSE,
    PairedFigure,
    needed_examples,
    needed_to_decide,
    paired_bootstrap,
    verdict,
)
from guardian_core.engine.thresholds import Threshold

# t* = 0.1, the band 0.05 to 0.15 (integrity's default costs).
INTEGRITY = Threshold(c_stop=1.0, c_cont=9.0, delta=0.05)
Y = [True, True, False, False]
# Positive 2 missed and negative 1 fired now; the candidate sends positive 2 to a person and
# clears negative 1.
CURRENT = [0.9, 0.02, 0.5, 0.01]
CANDIDATE = [0.9, 0.1, 0.03, 0.01]


def _values(comparison, side):
    return {name: getattr(f, side) for name, f in comparison.figures.items()}


def test_the_figures_of_four_examples_at_a_prior_of_one_fifth_by_hand():
    c = paired_bootstrap(Y, CURRENT, CANDIDATE, INTEGRITY, prior=0.2, review=0.1, replicates=50)
    now, then = _values(c, "current"), _values(c, "candidate")
    # Positives weigh 0.2 / 2 each, negatives 0.8 / 2: a miss costs 9, a false stop 1, a
    # review 0.1.
    assert now["expected_cost"] == pytest.approx(0.2 * 9 / 2 + 0.8 * 1 / 2)  # 1.3
    assert then["expected_cost"] == pytest.approx(0.2 * 0.1 / 2)  # 0.01
    # Bin 0 holds 0.02 (a positive) and 0.01 (a negative), bin 7 holds 0.5, bin 13 holds 0.9.
    assert now["ece"] == pytest.approx(abs(0.1 * -0.98 + 0.4 * 0.01) + 0.4 * 0.5 + 0.1 * 0.1)
    assert now["auroc"] == pytest.approx(0.75)
    assert then["auroc"] == pytest.approx(1.0)
    assert (now["benign_flagged"], then["benign_flagged"]) == (0.5, 0.0)
    assert (now["missed"], then["missed"]) == (0.5, 0.0)
    # Integrity escalates when it fires: positive 1 and negative 1 now; both positives then.
    assert now["escalation_rate"] == pytest.approx(0.2 * 0.5 + 0.8 * 0.5)
    assert then["escalation_rate"] == pytest.approx(0.2 * 1.0)
    assert c.figures["expected_cost"].difference == pytest.approx(0.01 - 1.3)
    assert {f.prior for f in c.figures.values()} == {0.2}


def test_a_condition_that_does_not_escalate_when_it_fires_counts_the_band_only():
    c = paired_bootstrap(
        Y, CURRENT, CANDIDATE, INTEGRITY, prior=0.2, escalates_when_fired=False, replicates=10
    )
    assert c.figures["escalation_rate"].current == 0.0
    assert c.figures["escalation_rate"].candidate == pytest.approx(0.2 * 0.5)


def test_the_prior_changes_what_mixes_the_classes_and_not_the_rates_within_one():
    at_share = paired_bootstrap(Y, CURRENT, CANDIDATE, INTEGRITY, review=0.1, replicates=10)
    at_fifth = paired_bootstrap(
        Y, CURRENT, CANDIDATE, INTEGRITY, prior=0.2, review=0.1, replicates=10
    )
    assert at_share.prior == 0.5
    assert at_share.figures["expected_cost"].current == pytest.approx(0.5 * 4.5 + 0.5 * 0.5)
    assert at_fifth.figures["expected_cost"].current != at_share.figures["expected_cost"].current
    for name in ("auroc", "benign_flagged", "missed"):
        assert at_fifth.figures[name].current == at_share.figures[name].current


def test_at_the_examples_own_share_the_figures_are_the_harnesss():
    rng = np.random.default_rng(3)
    y = rng.random(300) < 0.3
    # Rounded: ties, which AUROC counts one half.
    p = np.round(np.clip(0.4 * y + 0.6 * rng.random(300), 0, 1), 2)
    c = paired_bootstrap(y, p, p, INTEGRITY, review=0.1, replicates=20)
    harness = policy_figures(Condition.INTEGRITY, p, y, INTEGRITY, review_share=0.1)
    assert c.figures["expected_cost"].current == pytest.approx(harness["expected_cost"])
    assert c.figures["benign_flagged"].current == pytest.approx(harness["false_stop_rate"])
    assert c.figures["missed"].current == pytest.approx(harness["false_continue_rate"])
    curve = reliability_curve(p, y, bins=15)
    assert c.figures["ece"].current == pytest.approx(expected_calibration_error(curve, 300))
    assert c.figures["auroc"].current == pytest.approx(roc_auc_score(y, p))


def test_a_clear_difference_is_significant_and_a_coin_flip_is_not():
    rng = np.random.default_rng(5)
    y = rng.random(400) < 0.5
    good = np.where(y, 0.9, 0.02)
    alarmed = np.full(400, 0.6)  # every negative fires
    c = paired_bootstrap(y, good, alarmed, INTEGRITY, review=0.1)
    cost = c.figures["expected_cost"]
    assert cost.significant
    assert cost.low > 0
    assert c.figures["benign_flagged"].significant

    # Two versions that each get a different random half of 60 examples wrong: nothing to tell.
    y = np.arange(60) % 2 == 0
    first = np.where(rng.random(60) < 0.2, np.where(y, 0.01, 0.9), np.where(y, 0.9, 0.01))
    second = np.where(rng.random(60) < 0.2, np.where(y, 0.01, 0.9), np.where(y, 0.9, 0.01))
    c = paired_bootstrap(y, first, second, INTEGRITY)
    cost = c.figures["expected_cost"]
    assert cost.low < 0 < cost.high
    assert not cost.significant


def test_the_same_seed_gives_the_same_interval():
    rng = np.random.default_rng(8)
    y, a, b = rng.random(80) < 0.4, rng.random(80), rng.random(80)
    first = paired_bootstrap(y, a, b, INTEGRITY, replicates=200, seed=4)
    again = paired_bootstrap(y, a, b, INTEGRITY, replicates=200, seed=4)
    other = paired_bootstrap(y, a, b, INTEGRITY, replicates=200, seed=5)
    assert first.figures == again.figures
    assert first.figures["ece"].low != other.figures["ece"].low
    assert first.figures["ece"].current == other.figures["ece"].current


@settings(max_examples=40, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.booleans(), st.floats(min_value=0.0, max_value=1.0)), min_size=1, max_size=40
    ),
    prior=st.none() | st.floats(min_value=0.0, max_value=1.0),
    seed=st.integers(min_value=0, max_value=2**16),
)
def test_identical_versions_differ_by_nothing_and_never_significantly(rows, prior, seed):
    y = [label for label, _ in rows]
    p = [value for _, value in rows]
    c = paired_bootstrap(y, p, list(p), INTEGRITY, prior=prior, replicates=50, seed=seed)
    for figure in c.figures.values():
        assert not figure.significant
        if figure.difference is not None:
            assert figure.difference == 0.0
            assert figure.low == figure.high == 0.0
            assert verdict(figure, 0.0) == WITHIN


def test_a_class_absent_leaves_what_needs_it_undefined():
    c = paired_bootstrap([True, True], [0.9, 0.2], [0.8, 0.3], INTEGRITY, prior=0.05)
    assert c.figures["auroc"].current is None
    assert c.figures["benign_flagged"].current is None
    assert c.figures["expected_cost"].current is None  # the negatives' 95 % is unknown
    assert c.figures["missed"].current == 0.0


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="as long"):
        paired_bootstrap([True], [0.1, 0.2], [0.1], INTEGRITY)
    with pytest.raises(ValueError, match="no examples"):
        paired_bootstrap([], [], [], INTEGRITY)
    with pytest.raises(ValueError, match="prior"):
        paired_bootstrap([True], [0.1], [0.1], INTEGRITY, prior=1.5)


def _figure(name, low, high, difference=None):
    difference = (low + high) / 2 if difference is None else difference
    return PairedFigure(
        name, 0.2, 0.2 + difference, difference, low, high, low > 0 or high < 0, 0.05, 60
    )


@pytest.mark.parametrize(
    ("figure", "expected"),
    [
        (_figure("expected_cost", -0.3, -0.1), BETTER),
        (_figure("expected_cost", 0.02, 0.2), WORSE),
        (_figure("expected_cost", 0.001, 0.04, 0.03), WITHIN),  # worse, but not beyond 0.05
        (_figure("expected_cost", -0.04, 0.04), WITHIN),
        # Beyond tolerance at the point, but inside the noise: never "worse".
        (_figure("expected_cost", -0.05, 0.3, 0.12), TOO_FEW),
        (_figure("expected_cost", 0.01, 0.2, 0.04), TOO_FEW),
        # AUROC: higher is better, so a drop is the worsening.
        (_figure("auroc", -0.2, -0.06), WORSE),
        (_figure("auroc", 0.05, 0.1), BETTER),
        (_figure("auroc", -0.01, 0.03), WITHIN),
    ],
)
def test_an_interval_read_against_a_tolerance(figure, expected):
    assert verdict(figure, 0.05) == expected


def test_needed_examples_grow_with_the_square_of_the_width():
    assert needed_examples(60, -0.1, 0.1, 0.05) == 240
    assert needed_examples(60, -0.1, 0.1, 0.1) == 60
    assert needed_examples(400, -0.01, 0.01, 0.05) == 16  # already enough
    assert needed_examples(60, -0.1, 0.1, 0.0) is None


def test_needed_to_decide_counts_the_side_of_the_interval_that_must_move():
    # Worse by 0.03 against a tolerance of 0.05: the worse end (0.13, 0.10 from the point) must
    # come within the 0.02 of room left.
    assert needed_to_decide(_figure("expected_cost", -0.07, 0.13, 0.03), 0.05) == 60 * 25
    # Worse by 0.08, beyond the tolerance: the better end (0.10 below the point) must pass 0.
    assert needed_to_decide(_figure("expected_cost", -0.02, 0.18, 0.08), 0.05) == math.ceil(
        60 * (0.1 / 0.08) ** 2
    )
    # Decided: nothing needed.
    assert needed_to_decide(_figure("expected_cost", -0.3, -0.1), 0.05) is None


def test_needed_to_decide_is_never_below_the_examples_that_did_not_decide():
    # The demo's block: n=18, an interval lopsided about a worsening far beyond the tolerance.
    # Its half-width (0.25) is below the worsening (0.3), so a symmetric reading said "about
    # 13 needed" of 18 that had just failed to decide; the better end is 0.301 from the point.
    lopsided = PairedFigure("expected_cost", 0.2, 0.5, 0.3, -0.001, 0.5, False, 0.05, 18)
    assert verdict(lopsided, 0.0139) == TOO_FEW
    needed = needed_to_decide(lopsided, 0.0139)
    assert needed > 18
    # Any undecided interval about its point, however shaped.
    for low, high, point in ((-0.01, 0.02, 0.001), (-0.2, 0.01, -0.001), (-0.001, 0.9, 0.5)):
        figure = PairedFigure("ece", 0.1, 0.1 + point, point, low, high, False, 0.05, 40)
        if verdict(figure, 0.01) == TOO_FEW:
            assert needed_to_decide(figure, 0.01) > 40
