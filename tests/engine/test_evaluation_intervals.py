"""Every figure of the harness carries its 95 % bootstrap interval, and a caution where the rows
are too few to read it as settled."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.metrics import roc_auc_score

from guardian_core.engine.evaluation import (
    bootstrap_intervals,
    expected_calibration_error,
    reliability_curve,
    weighted_auroc,
)


def _rows(n: int, seed: int, decimals: int = 6) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = rng.uniform(size=n) < 0.3
    p = np.where(y, rng.beta(4, 2, n), rng.beta(2, 4, n)).round(decimals)
    return p, y


@pytest.mark.parametrize("decimals", [2, 6])  # many ties, and almost none
def test_the_intervals_hold_the_figures_read_on_all_rows(decimals):
    p, y = _rows(3000, seed=1, decimals=decimals)
    intervals = bootstrap_intervals(p, y, bins=15)
    ece = expected_calibration_error(reliability_curve(p, y, bins=15), len(p))
    assert intervals["ece"][0] <= ece <= intervals["ece"][1]
    assert intervals["auroc"][0] <= roc_auc_score(y, p) <= intervals["auroc"][1]
    brier = float(np.mean((p - y) ** 2))
    assert intervals["brier"][0] <= brier <= intervals["brier"][1]
    assert intervals["caution"] == []


def test_sixty_rows_carry_a_caution_and_wider_intervals():
    few, many = _rows(60, seed=2), _rows(5000, seed=2)
    narrow, wide = bootstrap_intervals(*many, bins=15), bootstrap_intervals(*few, bins=15)
    for name in ("ece", "brier", "auroc"):
        assert wide[name][1] - wide[name][0] > 3 * (narrow[name][1] - narrow[name][0])
    assert {"ece", "auroc"} <= set(wide["caution"])
    assert narrow["caution"] == []


def test_one_class_has_no_auroc_interval_and_the_same_seed_gives_the_same_intervals():
    p = np.linspace(0.1, 0.9, 50)
    intervals = bootstrap_intervals(p, np.zeros(50, dtype=bool), bins=15)
    assert intervals["auroc"] is None
    again = bootstrap_intervals(*_rows(200, seed=3), bins=15)
    assert again == bootstrap_intervals(*_rows(200, seed=3), bins=15)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=4, max_value=60), st.integers(min_value=0, max_value=10_000))
def test_the_weighted_auroc_of_a_draw_is_sklearns_with_those_weights(n, seed):
    rng = np.random.default_rng(seed)
    y = rng.uniform(size=n) < 0.5
    y[0], y[-1] = True, False
    p = rng.integers(0, 5, n) / 4  # plenty of ties
    weights = rng.integers(0, 4, (3, n))
    weights[:, 0] = weights[:, -1] = 1  # both classes in every draw
    expected = [roc_auc_score(y, p, sample_weight=w) for w in weights]
    assert weighted_auroc(p, y, weights) == pytest.approx(expected)
    assert np.isnan(weighted_auroc(p, y, np.where(y, 0, 1)[None, :])[0])  # negatives only
