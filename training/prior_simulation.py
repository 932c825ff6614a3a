"""How well each live-prior estimate serves a map fitted on examples people labelled at about
half positives, when the traffic holds 5 % (`python -m training.prior_simulation`).

A simulated pair of classes (injected outputs' evidence ~ N(2, 1), clean ones' ~ N(0, 1), the
guardian's score sigmoid(2x - 5): low and unsure, as a shipped guardian often is); per seed, a
map fitted on 400 labelled examples at 50 %, moved to the prior each estimate gives, and
measured on 6 000 fresh traffic examples at 5 %. Prints, per estimate, the median and 90th
percentile ECE at the traffic and the share of seeds with ECE ≤ 0.03, and each estimate's bias
and error. No database: the arithmetic is the app's (engine/calibration.py, engine/priors.py).
"""

from __future__ import annotations

import argparse

import numpy as np

from guardian_core.engine.calibration import apply_map, fit_map
from guardian_core.engine.evaluation import expected_calibration_error, reliability_curve
from guardian_core.engine.priors import em_prior, sampled_prior

LABELLED, TRAFFIC = 0.5, 0.05


def cases(prior: float, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The guardian's scores and the labels of `n` examples at `prior`."""
    rng = np.random.default_rng(seed)
    y = rng.uniform(size=n) < prior
    x = np.where(y, rng.normal(2.0, 1.0, n), rng.normal(0.0, 1.0, n))
    return np.round(1 / (1 + np.exp(-(2 * x - 5))), 6), y


def ece(p: np.ndarray, y: np.ndarray) -> float:
    return expected_calibration_error(reliability_curve(p, y, bins=15), len(p))


def simulate(seeds: int) -> dict[str, dict[str, list[float]]]:
    """Per estimate: the traffic ECE of the moved map and the estimate's error, per seed."""
    out: dict[str, dict[str, list[float]]] = {}

    def record(name: str, live: float, truth: float, fit, test) -> None:
        mapping = {**fit.mapping, "prior": {**fit.mapping["prior"], "live": live}}
        p = np.array([apply_map(mapping, v) for v in test[0]])
        entry = out.setdefault(name, {"ece": [], "error": []})
        entry["ece"].append(ece(p, test[1]))
        entry["error"].append(live - truth)

    for seed in range(seeds):
        p, y = cases(LABELLED, 400, seed)
        fit = fit_map(list(p), list(y))
        fitted = fit.mapping["prior"]["fitted"]
        unshifted = {k: v for k, v in fit.mapping.items() if k != "prior"}
        test = cases(TRAFFIC, 6000, seed + 500)
        record("none (the labelled share)", fitted, TRAFFIC, fit, test)
        record("the true prior", TRAFFIC, TRAFFIC, fit, test)
        for n in (600, 2000):
            tp, _ = cases(TRAFFIC, n, seed + 100)
            estimate = em_prior([apply_map(unshifted, v) for v in tp], fitted)
            record(f"EM on {n} traffic scores", estimate, TRAFFIC, fit, test)
        for n in (300, 600):
            _, ay = cases(TRAFFIC, n, seed + 300)
            estimate = sampled_prior(int(ay.sum()), n).value
            record(f"audit sample of {n}", estimate, TRAFFIC, fit, test)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=30)
    seeds = parser.parse_args().seeds
    print(f"{'live prior from':<28}{'ECE median':>11}{'p90':>8}{'≤ 0.03':>8}{'bias':>9}{'RMSE':>8}")
    for name, entry in simulate(seeds).items():
        e, err = np.array(entry["ece"]), np.array(entry["error"])
        print(
            f"{name:<28}{np.median(e):>11.4f}{np.quantile(e, 0.9):>8.4f}"
            f"{(e <= 0.03).mean():>8.0%}{err.mean():>+9.4f}{np.sqrt((err**2).mean()):>8.4f}"
        )


if __name__ == "__main__":
    main()
