"""Integrity's calibration is fitted at a stated share of injected outputs (fit.TRAINING_PRIOR),
not at whatever share the training sources hold (pure, no database)."""

import numpy as np

from guardian_core.engine.conditions import Condition
from training import fit


def test_the_injected_examples_weigh_the_stated_share_of_the_whole():
    labels = np.array([True] * 30 + [False] * 70)

    weights = fit.prior_weights(Condition.INTEGRITY, labels)

    share = weights[labels].sum() / weights.sum()
    assert abs(share - fit.TRAINING_PRIOR[Condition.INTEGRITY]) < 1e-12
    assert fit.prior_weights(Condition.RISK, labels.astype(str)) is None


def test_more_injected_examples_do_not_raise_what_benign_outputs_are_given():
    examples = sorted(
        fit.load_examples(Condition.INTEGRITY), key=lambda e: e["projection"]["last_results"][0]
    )
    injected = [e for e in examples if e["label"]][:150]
    benign = [e for e in examples if not e["label"]][:450]
    held_out = [e["projection"] for e in examples if not e["label"]][450:650]

    once = fit.train(Condition.INTEGRITY, injected + benign)
    # Each injected example twice: the share of injected outputs goes from 25 % to 40 %.
    twice = fit.train(Condition.INTEGRITY, injected + injected + benign)

    p_once = np.array(once.answers(held_out), dtype=float)
    p_twice = np.array(twice.answers(held_out), dtype=float)
    # At the examples' own share the benign outputs' mean probability would follow the rise.
    assert abs(p_twice.mean() - p_once.mean()) < 0.25 * p_once.mean()
