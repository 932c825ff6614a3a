"""A guardian whose answers pass through per-condition calibration maps: any guardian adapter
wrapped by a recalibrated guardian model version (guardian_core/engine/calibration.py).

Yes/no conditions map P(yes). Risk and drift map the probability the policy compares (P(
irreversible or regulated), P(drift score ≤ 1)), the one the map was fitted on, and rescale
the distribution to match: the classes on the firing side share the mapped probability in the
ratios the guardian gave them, the others share the rest. That keeps the answer a
distribution and moves exactly the number the policy and the harness look at; one map per
class renormalised afterwards would move it by an amount no map was fitted for.

A Malformed answer, or any answer the engine would not accept, is passed on untouched: a
calibration map must never turn "no usable answer" into a probability. The judge, when the
inner guardian has one, is passed through uncalibrated: the maps were fitted on the guardian's
answers, not on the judge's.
"""

from collections.abc import Mapping, Sequence

from guardian_core.engine.calibration import apply_map, map_problems
from guardian_core.engine.conditions import (
    DRIFT_MISALIGNED_MAX_SCORE,
    DRIFT_SCORES,
    Condition,
    DriftDistribution,
    Malformed,
    RiskClass,
    RiskDistribution,
    YesNo,
    compared_probability,
    parse_answer,
)


class CalibratedGuardian:
    """`inner` with its probabilities mapped by `maps` ({condition: map}); it reports
    `model_version` to the decision log. Everything but the answers is the inner guardian's:
    the question set it asks, whether it takes question text, what it spends, its judge.

    With `base_model_version`, the maps were fitted on that model: if `inner` reports another,
    every answer is Malformed (uncertain, escalated) saying so, never silently uncalibrated or
    calibrated for a model it was not fitted on."""

    def __init__(
        self,
        inner: object,
        maps: Mapping[str, Mapping],
        model_version: str,
        *,
        base_model_version: str | None = None,
    ) -> None:
        if not isinstance(model_version, str) or not model_version:
            raise ValueError("model_version must be non-empty text")
        problems = []
        for name, mapping in maps.items():
            try:
                Condition(name)
            except ValueError:
                problems.append(f"{name}: not a condition")
                continue
            problems += [f"{name}: {problem}" for problem in map_problems(mapping)]
        if problems:
            raise ValueError("calibration maps: " + "; ".join(problems))
        self.inner = inner
        self.maps = {Condition(name): dict(mapping) for name, mapping in maps.items()}
        self.model_version = model_version
        now = getattr(inner, "model_version", None)
        self.refused = (
            f"guardian model {model_version} was learnt on {base_model_version}; "
            f"the guardian now is {now}"
            if base_model_version is not None and now != base_model_version
            else ""
        )

    def __repr__(self) -> str:
        return f"CalibratedGuardian({self.inner!r}, model_version={self.model_version!r})"

    def __getattr__(self, name: str) -> object:
        # Only called for what this class does not define: judge, warm, close, spend,
        # question_set_version, takes_question_text... are the inner guardian's, so
        # hasattr(guardian, "judge") answers as the inner one does.
        if name == "inner":  # not set yet (a half-built object): no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()

    def answer(self, projection: Mapping, conditions: Sequence[Condition]) -> dict[str, object]:
        if self.refused:
            return {Condition(c).value: Malformed(self.refused) for c in conditions}
        raw = self.inner.answer(projection, conditions)
        return {key: self.calibrated(Condition(key), value) for key, value in dict(raw).items()}

    def assess_risk(self, projections: Sequence[Mapping]) -> list[object]:
        if self.refused:
            return [Malformed(self.refused) for _ in projections]
        return [self.calibrated(Condition.RISK, a) for a in self.inner.assess_risk(projections)]

    def calibrated(self, condition: Condition, raw: object) -> object:
        """`raw` mapped by the condition's map, in the shape the guardian gave; untouched when
        there is no map or the answer is not usable."""
        mapping = self.maps.get(condition)
        return raw if mapping is None else calibrate_answer(condition, raw, mapping)


def calibrate_answer(condition: Condition, raw: object, mapping: Mapping) -> object:
    """One raw answer through `mapping` (see the module's docstring); `raw` itself when the
    engine would read it as Malformed."""
    answer = parse_answer(condition, raw)
    if isinstance(answer, Malformed):
        return raw
    p = compared_probability(condition, answer)
    mapped = apply_map(mapping, p)
    if isinstance(answer, YesNo):
        return mapped
    if isinstance(answer, RiskDistribution):
        dist = {c.value: answer.probabilities[c] for c in RiskClass}
        firing = {c.value for c in RiskClass if c.needs_approval}
        return _rescaled(dist, firing, p, mapped)
    if isinstance(answer, DriftDistribution):
        dist = {str(s): answer.probabilities[s] for s in DRIFT_SCORES}
        firing = {str(s) for s in DRIFT_SCORES if s <= DRIFT_MISALIGNED_MAX_SCORE}
        return _rescaled(dist, firing, p, mapped)
    return raw


def _rescaled(dist: dict[str, float], firing: set[str], p: float, mapped: float) -> dict:
    """`dist` with the firing classes summing to `mapped` and the others to 1 − `mapped`, each
    side in its own ratios (evenly when that side had nothing)."""
    out = {}
    for side, old, new in ((firing, p, mapped), (set(dist) - firing, 1.0 - p, 1.0 - mapped)):
        for key in side:
            share = dist[key] / old if old > 0 else 1.0 / len(side)
            out[key] = share * new
    # Six decimals, as guardians answer; the rounding error goes to the largest class so the
    # distribution still sums to 1.
    rounded = {key: round(value, 6) for key, value in out.items()}
    largest = max(rounded, key=lambda key: rounded[key])
    rounded[largest] = round(rounded[largest] + 1.0 - sum(rounded.values()), 6)
    return {key: rounded[key] for key in dist}
