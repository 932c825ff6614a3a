"""Class priors: a calibrated probability moved from the prior it was fitted at to another, the
live prior estimated from unlabelled scores or from a random sample people labelled, and the
weights that read labelled examples' figures at a stated prior.

Why: the examples people label are not the traffic. Escalations are where the hard cases are,
so a map fitted on them learns their share of positives (often near one half); at a traffic
prior of a few percent the same map lifts every score, and the queue floods. Bayes' rule with
the two priors moves a posterior from one to the other exactly, when the class-conditional
score distributions are the same in both (label shift; Saerens, Latinne & Decaestecker, 2002,
"Adjusting the outputs of a classifier to new a priori probabilities").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

# A prior is kept strictly inside (0, 1): at 0 or 1 Bayes' rule would erase every score.
PRIOR_MIN = 1e-4
PRIOR_MAX = 1 - PRIOR_MIN
Z_95 = 1.959964


def prior_problems(value: object) -> list[str]:
    """What is wrong with a stated prior; [] when it can be used."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return ["must be a number"]
    if not PRIOR_MIN <= value <= PRIOR_MAX:
        return [f"must lie between {PRIOR_MIN} and {PRIOR_MAX}, got {value}"]
    return []


def shift_probability(p: float, fitted: float, live: float) -> float:
    """P(positive | score) at the `live` prior, from `p` calibrated at the `fitted` prior: the
    odds scale by live/(1-live) ÷ fitted/(1-fitted). p of exactly 0 or 1 stays put."""
    if p <= 0.0 or p >= 1.0 or fitted == live:
        return p
    positive = p * live / fitted
    negative = (1.0 - p) * (1.0 - live) / (1.0 - fitted)
    return positive / (positive + negative)


def shift_probabilities(p: np.ndarray, fitted: float, live: float) -> np.ndarray:
    """shift_probability over an array."""
    import numpy as np

    p = np.asarray(p, dtype=float)
    positive = p * live / fitted
    negative = (1.0 - p) * (1.0 - live) / (1.0 - fitted)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = positive / (positive + negative)
    return np.where((p <= 0.0) | (p >= 1.0), p, out)


@dataclass(frozen=True)
class PriorEstimate:
    """A prior and its 95 % interval, how it was estimated, and on how many examples."""

    value: float
    low: float
    high: float
    source: str  # "audit_sample" | "traffic_em" | "stated" | "labelled"
    n: int

    def as_dict(self) -> dict:
        return {
            "value": round(self.value, 6),
            "low": round(self.low, 6),
            "high": round(self.high, 6),
            "source": self.source,
            "n": self.n,
        }


def wilson_interval(positives: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson score interval of a proportion: honest at a few percent and few examples,
    where the normal approximation would go below zero."""
    if n <= 0:
        return 0.0, 1.0
    share = positives / n
    denominator = 1 + z * z / n
    centre = (share + z * z / (2 * n)) / denominator
    half = z * math.sqrt(share * (1 - share) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


def sampled_prior(positives: int, n: int) -> PriorEstimate:
    """The prior read from a random sample of traffic people labelled (the audit sample):
    unbiased, with its Wilson interval; kept inside (0, 1) so it can move a posterior."""
    low, high = wilson_interval(positives, n)
    value = min(PRIOR_MAX, max(PRIOR_MIN, positives / n if n else 0.5))
    return PriorEstimate(value=value, low=low, high=high, source="audit_sample", n=n)


def em_prior(
    p: Sequence[float] | np.ndarray,
    fitted: float,
    *,
    tolerance: float = 1e-7,
    max_iterations: int = 1000,
) -> float:
    """The live prior of unlabelled examples whose probabilities `p` are calibrated at the
    `fitted` prior, by expectation-maximisation (Saerens et al., 2002): shift every posterior
    to the current estimate, take their mean as the next one, until it settles. Its fixed point
    is the prior at which the shifted posteriors average to the prior itself."""
    import numpy as np

    p = np.clip(np.asarray(p, dtype=float), 1e-9, 1 - 1e-9)
    if not len(p):
        raise ValueError("no probabilities to estimate a prior from")
    estimate = float(fitted)
    for _ in range(max_iterations):
        following = float(shift_probabilities(p, fitted, estimate).mean())
        following = min(PRIOR_MAX, max(PRIOR_MIN, following))
        if abs(following - estimate) < tolerance:
            return following
        estimate = following
    return estimate


def traffic_prior(
    p: Sequence[float] | np.ndarray,
    fitted: float,
    *,
    replicates: int = 200,
    seed: int = 0,
) -> PriorEstimate:
    """em_prior with a bootstrap interval over the traffic's examples."""
    import numpy as np

    p = np.asarray(p, dtype=float)
    value = em_prior(p, fitted)
    rng = np.random.default_rng(seed)
    draws = [em_prior(p[rng.integers(0, len(p), len(p))], fitted) for _ in range(replicates)]
    low, high = np.quantile(draws, [0.025, 0.975])
    return PriorEstimate(
        value=value, low=float(low), high=float(high), source="traffic_em", n=len(p)
    )


def prior_weights(y: Sequence[bool] | np.ndarray, target: float) -> np.ndarray:
    """Per-example weights that make labelled examples count as if positives were `target`
    of them: positives weigh target/share, negatives (1-target)/(1-share), so any weighted
    figure (ECE, a flagged rate, expected cost) is read at the target prior. Needs both
    classes present."""
    import numpy as np

    y = np.asarray(y, dtype=bool)
    share = float(y.mean()) if len(y) else 0.0
    if share in (0.0, 1.0):
        raise ValueError("both classes are needed to reweight to another prior")
    return np.where(y, target / share, (1.0 - target) / (1.0 - share))


def prior_table(value: object) -> dict[str, float]:
    """{condition: prior} as an admin states it (GUARDIAN_LIVE_PRIORS); ValueError naming every
    bad entry."""
    from guardian_core.engine.conditions import Condition

    if not isinstance(value, dict):
        raise ValueError("must be a JSON object mapping conditions to priors")
    problems = []
    for name, prior in value.items():
        if name not in Condition.__members__.values():
            problems.append(f"{name}: not a condition")
        problems += [f"{name}: {problem}" for problem in prior_problems(prior)]
    if problems:
        raise ValueError("; ".join(problems))
    return {str(name): float(prior) for name, prior in value.items()}


def traffic_share(
    audit_positives: int,
    audit_n: int,
    *,
    escalated_share: float,
    escalated_positives: int,
    escalated_n: int,
) -> PriorEstimate:
    """The traffic's prior from its two parts: the turns escalated with a question about the
    condition (`escalated_share` of the traffic; people labelled `escalated_n` of them,
    `escalated_positives` positive) and the rest, which the audit sample draws from. The audit
    sample alone reads the second part only, and the positives the guardian caught sit in the
    first: alone it would read low by about the escalated share. The interval moves each part's
    Wilson bounds together (conservative)."""
    e = min(1.0, max(0.0, escalated_share))
    audit = sampled_prior(audit_positives, audit_n)
    if e == 0.0 or escalated_n == 0:
        return audit
    rate = escalated_positives / escalated_n
    low_e, high_e = wilson_interval(escalated_positives, escalated_n)
    value = e * rate + (1 - e) * (audit_positives / audit_n if audit_n else 0.0)
    return PriorEstimate(
        value=min(PRIOR_MAX, max(PRIOR_MIN, value)),
        low=e * low_e + (1 - e) * audit.low,
        high=e * high_e + (1 - e) * audit.high,
        source="audit_sample",
        n=audit_n,
    )
