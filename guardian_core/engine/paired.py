"""Two guardians compared on the same labelled examples, paired: a bootstrap over the examples
gives each figure's difference (candidate − current) a 95 % interval, read at a stated class
prior, and says how many examples a tolerance would need.

Why paired: both versions answer the same examples, so most of the noise of "which examples
happened to be labelled" is shared; resampling the example indices once per replicate and
computing the figure for both versions on that same resample keeps the sharing, and the
interval of the difference is far narrower than two separate intervals would suggest.

Why at a prior: the examples people label are not the traffic (they over-sample escalations,
where the hard cases are). A figure that mixes the classes (expected cost, ECE, the escalation
rate) is read at a stated prior π by weighting: positives by π/share, negatives by
(1 − π)/(1 − share), the share recomputed in every replicate. Rates within one class (false
alarms among negatives, misses among positives) and AUROC do not depend on the prior; they
carry it all the same, so every figure says where it was read.

Conventions (as evaluation.py's, to compare with its report): bands at Threshold.band (fired
above t* + δ, uncertain within δ of t*, clear below); a review costs `review` per example in
the band; expected cost per example = C_stop per fired negative, C_cont per clear positive and
`review` per uncertain one; ECE over `bins` equal-width bins, the last one holding p = 1.

Numpy only; no Django.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from guardian_core.engine.thresholds import Threshold

# numpy loads with the first comparison, not with the module: the gate's module is imported by
# the admins' views, and no web or worker process pays for numpy at start (test_fast_start).
if TYPE_CHECKING:
    import numpy as np

DEFAULT_REPLICATES = 1000
DEFAULT_SEED = 0
DEFAULT_BINS = 15
CONFIDENCE = 0.95
# Replicates are computed this many example-counts at a time: a replicate × examples matrix of
# 5000 × 1000 would take a few hundred megabytes per temporary.
_CHUNK_CELLS = 2_000_000

# Lower is better for every figure but AUROC.
FIGURES = ("expected_cost", "ece", "auroc", "benign_flagged", "missed", "escalation_rate")
HIGHER_IS_BETTER = frozenset({"auroc"})
FIGURE_WORDS = {
    "expected_cost": "expected cost per example",
    "ece": "ECE",
    "auroc": "AUROC",
    "benign_flagged": "negatives flagged (fired)",
    "missed": "positives missed (clear)",
    "escalation_rate": "escalation rate",
}


@dataclass(frozen=True)
class PairedFigure:
    """One figure of both versions on the same examples, at `prior`: the values, their
    difference (candidate − current) and its bootstrap interval; `significant` when the
    interval excludes 0. Values are None where the figure is not defined (one class only)."""

    figure: str
    current: float | None
    candidate: float | None
    difference: float | None
    low: float | None
    high: float | None
    significant: bool
    prior: float
    n: int

    @property
    def half_width(self) -> float | None:
        if self.low is None or self.high is None:
            return None
        return (self.high - self.low) / 2

    def as_dict(self) -> dict:
        return {
            "figure": self.figure,
            "current": self.current,
            "candidate": self.candidate,
            "difference": self.difference,
            "low": self.low,
            "high": self.high,
            "significant": self.significant,
            "prior": self.prior,
            "n": self.n,
        }


@dataclass(frozen=True)
class PairedComparison:
    n: int
    positives: int
    prior: float
    replicates: int
    seed: int
    figures: dict[str, PairedFigure]


def paired_bootstrap(
    y: Sequence[bool] | np.ndarray,
    current: Sequence[float] | np.ndarray,
    candidate: Sequence[float] | np.ndarray,
    threshold: Threshold,
    *,
    prior: float | None = None,
    escalates_when_fired: bool = True,
    review: float = 0.0,
    bins: int = DEFAULT_BINS,
    replicates: int = DEFAULT_REPLICATES,
    seed: int = DEFAULT_SEED,
) -> PairedComparison:
    """Every figure of FIGURES for `current` and `candidate` (probabilities of the positive
    class on the same examples, labels `y`) at `prior` (the examples' own share of positives
    when None), with the paired bootstrap interval of each difference over `replicates`
    resamples from a generator seeded with `seed`. Priced at `threshold`'s costs and `review`
    per example in the band; `escalates_when_fired` says whether firing sends the turn to a
    person (integrity, risk) besides the band."""
    import numpy as np

    y = np.asarray(y, dtype=bool)
    p = {
        "current": np.asarray(current, dtype=float),
        "candidate": np.asarray(candidate, dtype=float),
    }
    n = len(y)
    if any(len(values) != n for values in p.values()):
        raise ValueError("labels and both versions' probabilities must be as long")
    if n == 0:
        raise ValueError("no examples to compare")
    if not isinstance(replicates, int) or replicates < 1:
        raise ValueError(f"replicates must be an integer ≥ 1, got {replicates!r}")
    positives = int(y.sum())
    share = positives / n
    prior = share if prior is None else float(prior)
    if not 0.0 <= prior <= 1.0:
        raise ValueError(f"prior must lie in [0, 1], got {prior}")
    per_example = {
        side: _per_example(y, values, threshold, escalates_when_fired, review, bins)
        for side, values in p.items()
    }
    rng = np.random.default_rng(seed)
    values = {side: {f: [] for f in FIGURES} for side in p}
    # Row 0 of the first chunk is the sample itself (every example once): the point estimates.
    chunk = max(1, _CHUNK_CELLS // n)
    done = -1
    while done < replicates:
        size = min(chunk, replicates - done)
        counts = _counts(rng, n, size - 1 if done < 0 else size, with_sample=done < 0)
        for side in p:
            for figure, value in _figures(counts, y, prior, per_example[side]).items():
                values[side][figure].append(value)
        done += size
    out = {}
    for figure in FIGURES:
        current_all = np.concatenate(values["current"][figure])
        candidate_all = np.concatenate(values["candidate"][figure])
        out[figure] = _paired(figure, current_all, candidate_all, prior, n)
    return PairedComparison(n, positives, prior, replicates, seed, out)


def _counts(rng: np.random.Generator, n: int, draws: int, *, with_sample: bool) -> np.ndarray:
    """How often each example is drawn in each of `draws` resamples of n (rows), after a row
    of ones (the sample itself) when `with_sample`."""
    import numpy as np

    rows = []
    if with_sample:
        rows.append(np.ones((1, n), dtype=np.int32))
    if draws:
        index = rng.integers(0, n, size=(draws, n))
        index += np.arange(draws)[:, None] * n
        rows.append(np.bincount(index.ravel(), minlength=draws * n).reshape(draws, n))
    return np.vstack(rows).astype(np.float64)


@dataclass(frozen=True)
class _PerExample:
    """What each example contributes for one version, computed once."""

    fired: np.ndarray
    clear: np.ndarray
    cost: np.ndarray
    escalated: np.ndarray
    calibration_gap: np.ndarray  # p − y
    bin_of: np.ndarray  # (n, bins) one-hot
    order: np.ndarray  # example indices by increasing p
    tie_starts: np.ndarray  # where each group of equal p starts in `order`


def _per_example(
    y: np.ndarray,
    p: np.ndarray,
    threshold: Threshold,
    escalates_when_fired: bool,
    review: float,
    bins: int,
) -> _PerExample:
    import numpy as np

    t = threshold.t_star
    # Threshold.band, over an array: the same comparisons on the same doubles.
    uncertain = np.abs(p - t) <= threshold.delta
    fired = ~uncertain & (p > t)
    clear = ~uncertain & ~fired
    cost = np.where(y, threshold.c_cont * clear, threshold.c_stop * fired) + review * uncertain
    escalated = uncertain | (fired if escalates_when_fired else np.zeros_like(fired))
    index = np.minimum(np.floor(p * bins).astype(int), bins - 1)
    bin_of = np.zeros((len(p), bins))
    bin_of[np.arange(len(p)), index] = 1.0
    order = np.argsort(p, kind="stable")
    ordered = p[order]
    tie_starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    return _PerExample(
        fired=fired.astype(float),
        clear=clear.astype(float),
        cost=cost.astype(float),
        escalated=escalated.astype(float),
        calibration_gap=p - y,
        bin_of=bin_of,
        order=order,
        tie_starts=tie_starts,
    )


def _figures(counts: np.ndarray, y: np.ndarray, prior: float, e: _PerExample) -> dict:
    """Every figure in each resample (rows of `counts`), as arrays; NaN where undefined."""
    import numpy as np

    yf = y.astype(float)
    pos_counts = counts * yf
    neg_counts = counts * (1.0 - yf)
    n_pos = pos_counts.sum(axis=1)
    n_neg = neg_counts.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        per_pos = np.where(n_pos > 0, 1.0 / n_pos, np.nan)
        per_neg = np.where(n_neg > 0, 1.0 / n_neg, np.nan)

        def mixed(values: np.ndarray) -> np.ndarray:
            # π · (mean over positives) + (1 − π) · (mean over negatives); a class absent from
            # the resample contributes nothing when its weight is 0, else leaves it undefined.
            pos = (pos_counts @ values) * per_pos
            neg = (neg_counts @ values) * per_neg
            pos = np.where(prior == 0.0, 0.0, pos)
            neg = np.where(prior == 1.0, 0.0, neg)
            return prior * pos + (1.0 - prior) * neg

        gaps_pos = (pos_counts * e.calibration_gap) @ e.bin_of
        gaps_neg = (neg_counts * e.calibration_gap) @ e.bin_of
        weighted = (
            prior * gaps_pos * np.nan_to_num(per_pos)[:, None]
            + (1.0 - prior) * gaps_neg * np.nan_to_num(per_neg)[:, None]
        )
        ece = np.abs(weighted).sum(axis=1)
        ece = np.where((prior > 0) & (n_pos == 0) | (prior < 1) & (n_neg == 0), np.nan, ece)
        return {
            "expected_cost": mixed(e.cost),
            "ece": ece,
            "auroc": _auroc(counts, yf, n_pos, n_neg, e),
            "benign_flagged": (neg_counts @ e.fired) * per_neg,
            "missed": (pos_counts @ e.clear) * per_pos,
            "escalation_rate": mixed(e.escalated),
        }


def _auroc(
    counts: np.ndarray, yf: np.ndarray, n_pos: np.ndarray, n_neg: np.ndarray, e: _PerExample
) -> np.ndarray:
    """The AUROC in each resample: the share of (positive, negative) pairs, counted with their
    multiplicities, where the positive scores higher, a tie counting one half (as sklearn's
    roc_auc_score). The prior does not enter: each class is weighted as a whole."""
    import numpy as np

    ordered = counts[:, e.order]
    pos = ordered * yf[e.order]
    neg = ordered - pos
    if len(e.tie_starts) < len(e.order):  # equal scores form one group each
        pos = np.add.reduceat(pos, e.tie_starts, axis=1)
        neg = np.add.reduceat(neg, e.tie_starts, axis=1)
    below = np.cumsum(neg, axis=1) - neg
    wins = np.einsum("ij,ij->i", pos, below + 0.5 * neg)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where((n_pos > 0) & (n_neg > 0), wins / (n_pos * n_neg), np.nan)


def _paired(
    figure: str, current: np.ndarray, candidate: np.ndarray, prior: float, n: int
) -> PairedFigure:
    """The point estimates (element 0) and the interval (recentred_interval) of the
    differences over the replicates (the rest) where both are defined."""
    import numpy as np

    point_current, point_candidate = _finite(current[0]), _finite(candidate[0])
    differences = (candidate - current)[1:]
    differences = differences[np.isfinite(differences)]
    if point_current is None or point_candidate is None or not len(differences):
        return PairedFigure(
            figure, point_current, point_candidate, None, None, None, False, prior, n
        )
    difference = point_candidate - point_current
    low, high = recentred_interval(difference, differences)
    return PairedFigure(
        figure=figure,
        current=point_current,
        candidate=point_candidate,
        difference=difference,
        low=low,
        high=high,
        significant=low > 0 or high < 0,
        prior=prior,
        n=n,
    )


def recentred_interval(
    point: float,
    replicates: Sequence[float] | np.ndarray,
    *,
    confidence: float = CONFIDENCE,
    bounds: tuple[float, float] | None = None,
) -> tuple[float, float]:
    """The bootstrap's `confidence` interval of a figure whose value on the sample is `point`,
    from its values over the `replicates`: the hull of the percentile interval and the same
    interval moved by the bootstrap's bias (the replicates' median − `point`), clipped to
    `bounds` (a figure's possible range) when given.

    Why not the plain percentile interval: a figure such as ECE (a sum of absolute gaps) is
    biased upward under resampling, so on few rows every replicate can lie above the sample's
    value and the interval misses the figure it is the interval of ("ECE 0.010, 95 %:
    0.013–0.150"). Efron's bias-corrected percentile interval corrects by the share of
    replicates below the point, z0 = Φ⁻¹(share); that share is 0 in exactly that case and
    the correction cannot reach below the lowest replicate. Moving the interval by the
    median's offset is the same correction for a shifted bootstrap distribution and always
    holds the point (the median lies between the two percentiles). Why the hull and not the
    moved interval alone: a difference carried by one or two examples has a lumpy bootstrap
    whose median can sit off its point, and the moved interval would then leave 0 out where
    no replicate goes below it; the hull is never narrower than the percentile interval, so
    it never reads a difference as beyond the noise that the percentile interval did not,
    and it equals it when the bootstrap is unbiased. Vectorised: one sort of the replicates."""
    import numpy as np

    values = np.asarray(replicates, dtype=float)
    tail = (1 - confidence) / 2 * 100
    low, median, high = (float(v) for v in np.percentile(values, [tail, 50, 100 - tail]))
    shift = median - float(point)
    low, high = min(low, low - shift), max(high, high - shift)
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return low, high


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


# ---- reading an interval against a tolerance ----------------------------------------------

BETTER = "better"  # the interval lies wholly on the better side of 0
WITHIN = "within"  # whatever the sign, the worst the interval allows is within tolerance
WORSE = "worse"  # significantly worse, and by more than the tolerance
TOO_FEW = "too_few"  # the interval reaches beyond the tolerance but does not show a worsening


def verdict(figure: PairedFigure, tolerance: float) -> str | None:
    """How the candidate's `figure` compares with the current's at an absolute `tolerance`
    (None when the figure is not defined): BETTER, WITHIN, WORSE or TOO_FEW. A difference whose
    interval holds 0 is never WORSE: inside the noise a gate cannot tell a regression."""
    if figure.difference is None:
        return None
    sign = -1.0 if figure.figure in HIGHER_IS_BETTER else 1.0
    # As a worsening: positive is worse.
    low, high = sorted((sign * figure.low, sign * figure.high))
    worsening = sign * figure.difference
    if high < 0:
        return BETTER
    if low > 0 and worsening > tolerance:
        return WORSE
    if high <= tolerance:
        return WITHIN
    return TOO_FEW


def needed_examples(n: int, low: float, high: float, tolerance: float) -> int | None:
    """About how many examples would make the interval [low, high] of a difference, measured on
    `n` examples, as narrow as ±`tolerance`: a bootstrap interval narrows as 1/√n, so n grows
    by (half-width / tolerance)². None when the tolerance is not positive."""
    if tolerance <= 0 or n <= 0:
        return None
    half = max(0.0, (high - low) / 2)
    return max(1, math.ceil(n * (half / tolerance) ** 2))


def needed_to_decide(figure: PairedFigure, tolerance: float) -> int | None:
    """About how many examples would let `figure`'s interval reach a verdict at `tolerance`
    (None when it has one, or is not defined): each side of the interval narrows as 1/√n
    about the point, so the side that must move says how far. While the worsening w (the
    difference, positive when worse) is below the tolerance, the worse end must come to the
    tolerance (WITHIN): its distance from the point over the room, tolerance − w; else the
    better end must pass 0 (WORSE): its distance from the point over w. Read on the sides of
    the interval as measured, not on its half-width: an interval lopsided about its point
    would otherwise be said to need fewer examples than it has. Never n or fewer: n examples
    did not decide."""
    if figure.difference is None or figure.low is None or tolerance <= 0:
        return None
    if verdict(figure, tolerance) != TOO_FEW:
        return None
    sign = -1.0 if figure.figure in HIGHER_IS_BETTER else 1.0
    better_end, worse_end = sorted((sign * figure.low, sign * figure.high))
    w = sign * figure.difference
    if w < tolerance:
        distance, room = worse_end - w, tolerance - w
    else:
        distance, room = w - better_end, w
    n = figure.n
    if room <= 0 or distance <= 0:
        return n + 1
    return max(n + 1, math.ceil(n * (distance / room) ** 2))


def worsening(figure: PairedFigure) -> float | None:
    """The difference with its sign turned so that positive is worse (AUROC drops)."""
    if figure.difference is None:
        return None
    return -figure.difference if figure.figure in HIGHER_IS_BETTER else figure.difference
