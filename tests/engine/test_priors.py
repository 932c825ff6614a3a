"""Class priors: Bayes' shift between priors, the EM estimate of a live prior, Wilson's interval,
the weights that read figures at another prior, and maps that answer at the live prior."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from guardian_core.engine.calibration import apply_map, calibration_figures, fit_map, map_problems
from guardian_core.engine.priors import (
    em_prior,
    prior_table,
    prior_weights,
    sampled_prior,
    shift_probabilities,
    shift_probability,
    traffic_prior,
    traffic_share,
    wilson_interval,
)

priors = st.floats(min_value=0.001, max_value=0.999)
probabilities = st.floats(min_value=1e-6, max_value=1 - 1e-6)


def _population(prior: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores of a Gaussian pair (positives N(2, 1), negatives N(0, 1)) and the exact posterior
    at a 50 % prior: sigmoid(2x - 2), the log-likelihood ratio."""
    rng = np.random.default_rng(seed)
    y = rng.uniform(size=n) < prior
    x = np.where(y, rng.normal(2.0, 1.0, n), rng.normal(0.0, 1.0, n))
    return 1 / (1 + np.exp(-(2 * x - 2))), y


def test_shifting_to_a_lower_prior_scales_the_odds_by_the_ratio_of_prior_odds():
    # 0.5 at a 50 % prior is even odds; at 5 % the odds are 1:19.
    assert shift_probability(0.5, 0.5, 0.05) == pytest.approx(0.05)
    assert shift_probability(0.9, 0.5, 0.05) == pytest.approx(9 / (9 + 19))


@given(probabilities, priors, priors)
def test_a_shift_there_and_back_gives_the_probability_again(p, fitted, live):
    there = shift_probability(p, fitted, live)
    assert 0.0 <= there <= 1.0
    assert shift_probability(there, live, fitted) == pytest.approx(p, rel=1e-6, abs=1e-9)


@given(st.lists(probabilities, min_size=1, max_size=20), priors, priors)
def test_the_array_shift_is_the_scalar_shift(p, fitted, live):
    shifted = shift_probabilities(np.array(p), fitted, live)
    assert shifted == pytest.approx([shift_probability(v, fitted, live) for v in p])


def test_certain_probabilities_stay_certain():
    assert shift_probability(0.0, 0.5, 0.05) == 0.0
    assert shift_probability(1.0, 0.5, 0.05) == 1.0


@pytest.mark.parametrize("live", [0.02, 0.05, 0.2, 0.5])
def test_em_recovers_the_share_of_positives_from_calibrated_scores_alone(live):
    p, y = _population(live, 20_000, seed=3)
    estimate = em_prior(p, fitted=0.5)
    assert estimate == pytest.approx(y.mean(), abs=0.01)
    # The plain mean of the posteriors, read at the wrong prior, is far off at low priors.
    if live <= 0.05:
        assert abs(p.mean() - y.mean()) > 0.05


def test_the_traffic_prior_carries_an_interval_around_its_estimate():
    p, y = _population(0.05, 2_000, seed=4)
    estimate = traffic_prior(p, fitted=0.5, replicates=100)
    assert estimate.source == "traffic_em"
    assert estimate.n == 2_000
    assert estimate.low < estimate.value < estimate.high
    assert estimate.low <= y.mean() <= estimate.high


def test_wilson_interval_matches_the_textbook_value():
    # 5 of 100: Wilson 95 % interval (0.0215, 0.1118).
    low, high = wilson_interval(5, 100)
    assert (low, high) == (pytest.approx(0.02154, abs=1e-4), pytest.approx(0.11175, abs=1e-4))
    # No positive in 50: still an interval above zero, not [0, 0].
    assert wilson_interval(0, 50)[1] > 0.05


def test_an_audit_sample_with_no_positive_gives_a_usable_prior():
    estimate = sampled_prior(0, 60)
    assert 0 < estimate.value < 0.01
    assert estimate.source == "audit_sample"
    assert estimate.high > 0.05


@given(st.lists(st.booleans(), min_size=2).filter(lambda y: 0 < sum(y) < len(y)), priors)
def test_weights_make_the_positives_the_target_share(y, target):
    weights = prior_weights(y, target)
    y = np.array(y)
    assert weights[y].sum() / weights.sum() == pytest.approx(target)
    assert weights.sum() == pytest.approx(len(y))


def test_weights_need_both_classes():
    with pytest.raises(ValueError, match="both classes"):
        prior_weights([True, True], 0.1)


def test_weighted_figures_read_at_the_traffic_prior_what_traffic_would_show():
    # A map fitted at 50 % and moved to 5 %: on examples labelled at 50 % and weighted to 5 %,
    # its ECE is what a sample of the traffic itself shows.
    p_lab, y_lab = _population(0.5, 4_000, seed=5)
    p_live, y_live = _population(0.05, 40_000, seed=6)
    shifted_lab = shift_probabilities(p_lab, 0.5, 0.05)
    shifted_live = shift_probabilities(p_live, 0.5, 0.05)
    weighted = calibration_figures(shifted_lab, y_lab, 15, prior_weights(y_lab, 0.05))
    direct = calibration_figures(shifted_live, y_live, 15)
    assert weighted["ece"] == pytest.approx(direct["ece"], abs=0.01)
    assert weighted["brier"] == pytest.approx(direct["brier"], abs=0.005)
    # Unweighted, the same labelled examples say something else: their share is 50 %.
    unweighted = calibration_figures(shifted_lab, y_lab, 15)
    assert unweighted["ece"] > weighted["ece"] + 0.1


def test_a_fitted_map_records_its_prior_and_answers_at_the_live_one_once_told():
    p, y = _population(0.5, 600, seed=7)
    fit = fit_map(list(p), list(y))
    assert fit.mapping["prior"]["fitted"] == pytest.approx(y[list(fit.fit_indices)].mean())
    at_fitted = apply_map(fit.mapping, 0.5)
    live = {**fit.mapping, "prior": {**fit.mapping["prior"], "live": 0.05}}
    assert map_problems(live) == []
    assert apply_map(live, 0.5) == pytest.approx(
        shift_probability(at_fitted, fit.mapping["prior"]["fitted"], 0.05), abs=1e-6
    )


@pytest.mark.parametrize(
    ("prior", "problem"),
    [
        ({"live": 0.1}, "prior: must be an object with fitted"),
        ({"fitted": 0.5, "live": 0}, "prior.live: must lie between"),
        ({"fitted": "half"}, "prior.fitted: must be a number"),
        ({"fitted": math.nan}, "prior.fitted: must be a number"),
    ],
)
def test_a_bad_prior_in_a_map_is_named(prior, problem):
    problems = map_problems({"method": "platt", "a": 1.0, "b": 0.0, "prior": prior})
    assert any(p.startswith(problem) for p in problems), problems


def test_a_stated_prior_table_names_every_bad_entry():
    with pytest.raises(ValueError, match="not a condition") as caught:
        prior_table({"integrity": 1.5, "weather": 0.1, "risk": "low"})
    message = str(caught.value)
    assert "integrity: must lie between" in message
    assert "weather: not a condition" in message
    assert "risk: must be a number" in message
    assert prior_table({"integrity": 0.05}) == {"integrity": 0.05}


def test_the_traffic_prior_joins_the_escalated_part_to_the_audit_sample():
    # 1 000 turns: 200 escalated, 100 of them injected; 800 went on, 16 injected (2 %).
    estimate = traffic_share(8, 400, escalated_share=0.2, escalated_positives=100, escalated_n=200)
    assert estimate.value == pytest.approx((100 + 16) / 1000)
    assert estimate.low < estimate.value < estimate.high
    # The audit sample alone reads only what went on, and would say 2 %.
    assert sampled_prior(8, 400).value == pytest.approx(0.02)
    # Nothing escalated, or no verdicts to read the escalated part: the audit sample alone.
    assert traffic_share(
        8, 400, escalated_share=0.0, escalated_positives=0, escalated_n=0
    ) == sampled_prior(8, 400)
