"""The six breaking conditions, their typed answers, and what makes an answer malformed.

A guardian answers one typed question per condition. Its raw answer is parsed here into a
typed answer, or into Malformed — which the policy treats as uncertain and escalates.
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Condition(StrEnum):
    INTEGRITY = "integrity"
    RISK = "risk"
    INFEASIBLE = "infeasible"
    GOAL_REACHED = "goal_reached"
    DRIFT = "drift"
    STAGNATION = "stagnation"


class RiskClass(StrEnum):
    """Risk classes from least to most severe; the order matters (a declared class is a floor)."""

    READ_ONLY = "read_only"
    REVERSIBLE_WRITE = "reversible_write"
    IRREVERSIBLE = "irreversible"
    REGULATED = "regulated"

    @property
    def severity(self) -> int:
        return list(RiskClass).index(self)

    @property
    def needs_approval(self) -> bool:
        return self in (RiskClass.IRREVERSIBLE, RiskClass.REGULATED)


DRIFT_SCORES = (0, 1, 2, 3, 4)
# A drift score this low or lower means the sub-task has left the goal.
DRIFT_MISALIGNED_MAX_SCORE = 1
DISTRIBUTION_TOLERANCE = 1e-3

YES_NO_CONDITIONS = frozenset(
    {Condition.INTEGRITY, Condition.INFEASIBLE, Condition.GOAL_REACHED, Condition.STAGNATION}
)


@dataclass(frozen=True)
class YesNo:
    """P(yes) for a yes/no question."""

    probability: float


@dataclass(frozen=True)
class RiskDistribution:
    """P(class) for each of the four risk classes; sums to 1."""

    probabilities: Mapping[RiskClass, float]


@dataclass(frozen=True)
class DriftDistribution:
    """P(score) for drift scores 0 (lost) to 4 (on goal); sums to 1."""

    probabilities: Mapping[int, float]


@dataclass(frozen=True)
class Malformed:
    """An answer that cannot be used: missing, not a number, out of range, not a distribution,
    or the guardian failed (timeout, error). Always uncertain, never a reason to continue."""

    reason: str


Answer = YesNo | RiskDistribution | DriftDistribution | Malformed


def parse_answer(condition: Condition, raw: object) -> Answer:
    """Turn a guardian's raw answer for `condition` into a typed answer or Malformed.

    Yes/no conditions take a probability; risk takes {class: probability}; drift takes
    {score: probability} (score keys may be ints or digit strings, as JSON makes them).
    """
    # The common case first, and cheaply: a yes/no probability as JSON gives it back (a float
    # in [0, 1]; NaN fails the comparison). Exactly what the general path below returns.
    if type(raw) is float and 0.0 <= raw <= 1.0 and condition in YES_NO_CONDITIONS:
        return YesNo(raw)
    if raw is None:
        return Malformed("missing answer")
    if isinstance(raw, Malformed | YesNo | RiskDistribution | DriftDistribution):
        return raw if _matches(condition, raw) else Malformed("answer of the wrong type")
    if condition in YES_NO_CONDITIONS:
        problem = _probability_problem(raw)
        return Malformed(problem) if problem else YesNo(float(raw))
    if condition == Condition.RISK:
        parsed = _distribution(raw, _RISK_KEYS)
        return parsed if isinstance(parsed, Malformed) else RiskDistribution(parsed)
    parsed = _distribution(raw, _DRIFT_KEYS)
    return parsed if isinstance(parsed, Malformed) else DriftDistribution(parsed)


def compared_probability(condition: Condition, answer: Answer) -> float | None:
    """The one probability the policy compares with the condition's threshold.

    yes/no: P(yes). risk: P(irreversible or regulated). drift: P(score ≤ 1), the chance the
    current sub-task has left the goal. None for a malformed answer.
    """
    if type(answer) is YesNo:
        return answer.probability
    match answer:
        case YesNo(probability=p):
            return p
        case RiskDistribution(probabilities=dist):
            return min(1.0, dist[RiskClass.IRREVERSIBLE] + dist[RiskClass.REGULATED])
        case DriftDistribution(probabilities=dist):
            low = sum(dist[s] for s in DRIFT_SCORES if s <= DRIFT_MISALIGNED_MAX_SCORE)
            return min(1.0, low)
    return None


def most_likely_risk(answer: Answer) -> RiskClass | None:
    """The guardian's most probable class (the more severe one on a tie), or None."""
    if not isinstance(answer, RiskDistribution):
        return None
    return max(RiskClass, key=lambda c: (answer.probabilities[c], c.severity))


# A distribution's keys as they come in (JSON makes every key a string) → the typed key.
_RISK_KEYS = {member.value: member for member in RiskClass}
_DRIFT_KEYS = {str(score): score for score in DRIFT_SCORES}


def _matches(condition: Condition, answer: Answer) -> bool:
    if isinstance(answer, Malformed):
        return True
    if condition in YES_NO_CONDITIONS:
        return isinstance(answer, YesNo) and _probability_problem(answer.probability) is None
    if condition == Condition.RISK:
        return isinstance(answer, RiskDistribution)
    return isinstance(answer, DriftDistribution)


def _probability_problem(value: object) -> str | None:
    # bool is an int in Python; True is not a probability.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"not a probability: {value!r}"[:200]
    if math.isnan(value):
        return "probability is NaN"
    if not 0.0 <= value <= 1.0:
        return f"probability {value!r} is outside [0, 1]"
    return None


def _distribution(raw: object, keys: dict) -> dict | Malformed:
    if not isinstance(raw, Mapping):
        return Malformed(f"not a distribution: {raw!r}"[:200])
    parsed = dict.fromkeys(keys.values(), 0.0)
    for key, value in raw.items():
        member = keys.get(str(key))
        if member is None or isinstance(key, bool):
            return Malformed(f"unknown class {key!r}"[:200])
        # A float in [0, 1] has no problem (NaN fails the comparison): the check is skipped.
        if not (type(value) is float and 0.0 <= value <= 1.0):
            problem = _probability_problem(value)
            if problem:
                return Malformed(f"{key}: {problem}")
        parsed[member] = float(value)
    total = math.fsum(parsed.values())
    if abs(total - 1.0) > DISTRIBUTION_TOLERANCE:
        return Malformed(f"distribution sums to {total:.4f}, not 1")
    return parsed
