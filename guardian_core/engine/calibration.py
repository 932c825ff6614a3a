"""Calibration maps over a guardian's compared probability: applying one (numpy only, what a
run does) and fitting one on labelled probabilities (isotonic or Platt, chosen on a held-out
split with a fixed seed, what `manage.py recalibrate` does).

A map is plain JSON, so a model version stores it and any process applies it the same way:
    {"method": "isotonic", "x": [thresholds, increasing], "y": [calibrated values]}
        p ↦ np.interp(p, x, y) (flat beyond the ends, as sklearn's out_of_bounds="clip")
    {"method": "platt", "a": float, "b": float}
        p ↦ sigmoid(a · logit(p) + b), p clipped to [EPS, 1 − EPS] first
No fitted scikit-learn object is kept: a pickle breaks with the library's version.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

# numpy and scikit-learn load with the first function that needs them, not with the module:
# no web or worker process pays for them at start (`python -X importtime manage.py check`).
if TYPE_CHECKING:
    import numpy as np


METHODS = ("isotonic", "platt")
EPS = 1e-6
# Calibrated values are rounded as the local guardian rounds its own: a replay compares equal
# even if a later numpy sums in another order.
DECIMALS = 6
DEFAULT_SEED = 0
HELD_OUT_SHARE = 0.3
# Fewer examples than this, or fewer of either class, and a map would be fitted on noise: the
# fit is refused rather than made.
MIN_EXAMPLES = 20
MIN_PER_CLASS = 5


class FitRefused(ValueError):
    """Too few examples, or one class only: the message says which and how many."""


def map_problems(mapping: object) -> list[str]:
    """What is wrong with a stored map; [] when `apply_map` can use it."""
    if not isinstance(mapping, Mapping):
        return ["must be an object"]
    return _method_problems(mapping) + _prior_problems(mapping)


def _method_problems(mapping: Mapping) -> list[str]:
    method = mapping.get("method")
    if method == "platt":
        return [
            f"{key}: must be a finite number" for key in ("a", "b") if not _finite(mapping.get(key))
        ]
    if method == "isotonic":
        x, y = mapping.get("x"), mapping.get("y")
        if not (isinstance(x, list) and isinstance(y, list) and x and len(x) == len(y)):
            return ["x and y: must be lists of the same non-zero length"]
        if not all(_finite(v) for v in [*x, *y]):
            return ["x and y: must hold finite numbers"]
        if any(b < a for a, b in zip(x, x[1:], strict=False)):
            return ["x: must be non-decreasing"]
        if any(not 0.0 <= v <= 1.0 for v in y):
            return ["y: must lie in [0, 1]"]
        return []
    return [f"method: must be one of {', '.join(METHODS)}, got {method!r}"]


def _prior_problems(mapping: Mapping) -> list[str]:
    """A map's optional `prior`: the share of positives it was fitted at, and the live prior
    its answers are moved to (engine/priors.py); both inside (0, 1)."""
    from guardian_core.engine.priors import prior_problems

    prior = mapping.get("prior")
    if prior is None:
        return []
    if not isinstance(prior, Mapping) or "fitted" not in prior:
        return ["prior: must be an object with fitted (and optionally live)"]
    return [
        f"prior.{key}: {problem}"
        for key in ("fitted", "live")
        if key in prior
        for problem in prior_problems(prior[key])
    ]


def apply_map(mapping: Mapping, p: float) -> float:
    """The calibrated probability of `p` under `mapping` (one that map_problems accepts), at
    the live prior when the map records one: fitted on examples people chose to label, it
    answers at the share of positives the traffic has (engine/priors.py)."""
    import numpy as np

    from guardian_core.engine.priors import shift_probability

    if mapping["method"] == "isotonic":
        value = float(np.interp(p, mapping["x"], mapping["y"]))
    else:
        value = _sigmoid(mapping["a"] * _logit(p) + mapping["b"])
    value = min(1.0, max(0.0, value))
    prior = mapping.get("prior") or {}
    if "live" in prior:
        value = shift_probability(value, prior["fitted"], prior["live"])
    return round(value, DECIMALS)


def _logit(p: float | np.ndarray) -> float | np.ndarray:
    import numpy as np

    p = np.clip(p, EPS, 1 - EPS)
    return np.log(p / (1 - p))


def _sigmoid(z: float) -> float:
    # The two branches keep exp() from overflowing at either end.
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# ---- fitting ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class MapFit:
    """A fitted map and how it did on the held-out examples, beside the raw probabilities.

    `fit_indices` and `held_out_indices` index the arrays given to `fit_map`; `candidates`
    holds each method's held-out log-loss and ECE (the lower log-loss won; a tie goes to Platt,
    the smoother map)."""

    method: str
    mapping: dict
    fit_indices: tuple[int, ...]
    held_out_indices: tuple[int, ...]
    before: dict
    after: dict
    candidates: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "method": self.method,
            "n_fit": len(self.fit_indices),
            "n_held_out": len(self.held_out_indices),
            "before": self.before,
            "after": self.after,
            "candidates": self.candidates,
        }


def fit_problems(y: Sequence[bool]) -> list[str]:
    """Why a map cannot be fitted on these labels; [] when it can."""
    n, positives = len(y), int(sum(bool(v) for v in y))
    problems = []
    if n < MIN_EXAMPLES:
        problems.append(f"{n} labelled examples with a probability, at least {MIN_EXAMPLES} needed")
    if n and (positives == 0 or positives == n):
        side = "all positive" if positives else "all negative"
        problems.append(f"one class only ({side}): need at least {MIN_PER_CLASS} of each class")
    elif n and min(positives, n - positives) < MIN_PER_CLASS:
        problems.append(
            f"{positives} positive and {n - positives} negative examples, at least "
            f"{MIN_PER_CLASS} of each needed"
        )
    return problems


def split_indices(
    y: np.ndarray, *, seed: int = DEFAULT_SEED, held_out_share: float = HELD_OUT_SHARE
) -> tuple[np.ndarray, np.ndarray]:
    """A stratified split (fit, held out): the same labels and seed give the same split."""
    import numpy as np

    rng = np.random.default_rng(seed)
    fit, held = [], []
    for value in (False, True):
        members = np.flatnonzero(y == value)
        members = members[rng.permutation(len(members))]
        k = max(1, round(held_out_share * len(members)))
        held.extend(members[:k])
        fit.extend(members[k:])
    return np.sort(np.array(fit, dtype=int)), np.sort(np.array(held, dtype=int))


def fit_map(
    p: Sequence[float],
    y: Sequence[bool],
    *,
    seed: int = DEFAULT_SEED,
    held_out_share: float = HELD_OUT_SHARE,
    bins: int = 15,
) -> MapFit:
    """Fit isotonic and Platt maps on a split of (p, y), keep the one with the lower held-out
    log-loss, and report both the raw and the mapped probabilities' ECE, Brier and log-loss
    on the held-out part. FitRefused when fit_problems says so."""
    import numpy as np

    problems = fit_problems(list(y))
    if problems:
        raise FitRefused("; ".join(problems))
    p = np.asarray(p, dtype=float)
    y = np.asarray(y, dtype=bool)
    fit, held = split_indices(y, seed=seed, held_out_share=held_out_share)
    # The share of positives the map learnt at: its answers are right at that prior only.
    fitted = {"fitted": round(float(y[fit].mean()), DECIMALS)}
    maps = {
        "isotonic": {**_fit_isotonic(p[fit], y[fit]), "prior": fitted},
        "platt": {**_fit_platt(p[fit], y[fit]), "prior": fitted},
    }
    scores = {}
    for method, mapping in maps.items():
        mapped = np.array([apply_map(mapping, v) for v in p[held]])
        scores[method] = calibration_figures(mapped, y[held], bins)
    # Platt first: on a tie, the smoother map.
    method = min(("platt", "isotonic"), key=lambda m: scores[m]["log_loss"])
    return MapFit(
        method=method,
        mapping=maps[method],
        fit_indices=tuple(int(i) for i in fit),
        held_out_indices=tuple(int(i) for i in held),
        before=calibration_figures(p[held], y[held], bins),
        after=scores[method],
        candidates={m: {"log_loss": s["log_loss"], "ece": s["ece"]} for m, s in scores.items()},
    )


def _fit_isotonic(p: np.ndarray, y: np.ndarray) -> dict:
    from sklearn.isotonic import IsotonicRegression

    iso = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip")
    iso.fit(p, y.astype(float))
    return {
        "method": "isotonic",
        "x": [float(v) for v in iso.X_thresholds_],
        "y": [float(v) for v in iso.y_thresholds_],
    }


def _fit_platt(p: np.ndarray, y: np.ndarray) -> dict:
    from sklearn.linear_model import LogisticRegression

    # Nearly unregularised: two parameters on tens of examples or more.
    model = LogisticRegression(C=1e4, max_iter=1000)
    model.fit(_logit(p).reshape(-1, 1), y)
    return {"method": "platt", "a": float(model.coef_[0][0]), "b": float(model.intercept_[0])}


def calibration_figures(
    p: np.ndarray, y: np.ndarray, bins: int, weights: np.ndarray | None = None
) -> dict:
    """n, ECE (`bins` equal-width bins, the harness's), Brier and log-loss of p against y;
    with `weights` (engine/priors.py prior_weights), each example counts by its weight, so the
    figures are read at another share of positives than the examples hold."""
    import numpy as np
    from sklearn.metrics import brier_score_loss, log_loss

    from guardian_core.engine.evaluation import expected_calibration_error, reliability_curve

    if weights is None:
        curve = reliability_curve(p, y, bins=bins)
        ece = expected_calibration_error(curve, len(p))
    else:
        ece = weighted_ece(p, y, weights, bins)
    return {
        "n": len(p),
        "ece": ece,
        "brier": float(brier_score_loss(y, p, pos_label=True, sample_weight=weights)),
        "log_loss": float(
            log_loss(y, np.clip(p, EPS, 1 - EPS), labels=[False, True], sample_weight=weights)
        ),
    }


def weighted_ece(p: np.ndarray, y: np.ndarray, weights: np.ndarray, bins: int) -> float:
    """ECE over the harness's equal-width bins with each example counted by its weight."""
    import numpy as np

    p, y, weights = np.asarray(p, float), np.asarray(y, float), np.asarray(weights, float)
    index = np.minimum(np.floor(p * bins).astype(int), bins - 1)
    total = weights.sum()
    if not total:
        return 0.0
    ece = 0.0
    for k in range(bins):
        w = weights[index == k]
        mass = w.sum()
        if mass:
            inside = index == k
            gap = abs(float(np.dot(w, p[inside]) - np.dot(w, y[inside]))) / mass
            ece += mass / total * gap
    return float(ece)
