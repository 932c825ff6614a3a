"""Thresholds derived from stated costs, the uncertain band around them, and the policy's
configuration (thresholds per condition, hysteresis, replan limit, caps and budgets).

A condition fires when p · C_cont > (1 − p) · C_stop, that is when p > t* = C_stop / (C_stop +
C_cont). Within δ of t* the answer is uncertain and escalates: the band sits around t*, where a
wrong probability flips the outcome, not around 0.5.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

from guardian_core.engine.conditions import Condition


class Band(StrEnum):
    CLEAR = "clear"  # p < t* − δ: the condition does not hold
    UNCERTAIN = "uncertain"  # |p − t*| ≤ δ, or a malformed answer: a person decides
    FIRED = "fired"  # p > t* + δ: the condition holds


@dataclass(frozen=True)
class Threshold:
    """C_stop: cost of a false stop. C_cont: cost of a false continue. δ: half-width of the
    uncertain band around t*."""

    c_stop: float
    c_cont: float
    delta: float

    def __post_init__(self) -> None:
        problems = []
        for name in ("c_stop", "c_cont", "delta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
                problems.append(f"{name} must be a number, got {value!r}")
        if not problems:
            if self.c_stop <= 0:
                problems.append(f"c_stop must be > 0, got {self.c_stop}")
            if self.c_cont <= 0:
                problems.append(f"c_cont must be > 0, got {self.c_cont}")
            if not 0 <= self.delta < 0.5:
                problems.append(f"delta must be in [0, 0.5), got {self.delta}")
        if problems:
            raise ValueError("; ".join(problems))

    # Computed once per threshold (its fields are frozen): `decide` reads it for every
    # condition of every turn, live and in replay.
    @cached_property
    def t_star(self) -> float:
        return self.c_stop / (self.c_stop + self.c_cont)

    def band(self, probability: float | None) -> Band:
        """Where `probability` falls; None (a malformed answer) is uncertain."""
        if probability is None:
            return Band.UNCERTAIN
        t_star = self.t_star
        if abs(probability - t_star) <= self.delta:
            return Band.UNCERTAIN
        return Band.FIRED if probability > t_star else Band.CLEAR

    def as_dict(self) -> dict:
        return {
            "c_stop": self.c_stop,
            "c_cont": self.c_cont,
            "t_star": round(self.t_star, 6),
            "delta": self.delta,
        }


@dataclass(frozen=True)
class Budgets:
    """Plain-code caps. None means no limit for that budget (the turn cap is always set)."""

    max_turns: int = 20
    max_tokens: int | None = None
    max_cost: float | None = None
    max_wall_seconds: float | None = None


@dataclass(frozen=True)
class Hysteresis:
    """A replanning condition acts only when it fired on `required` of its latest `window`
    turns, this one included: one noisy turn does not replan."""

    window: int = 3
    required: int = 2

    def __post_init__(self) -> None:
        if not 1 <= self.required <= self.window:
            raise ValueError("hysteresis: required must be between 1 and the window")


@dataclass(frozen=True)
class Policy:
    """Everything `decide` needs besides the answers and the history; versioned as a whole."""

    thresholds: Mapping[Condition, Threshold]
    question_set_version: str = "q1"
    # Drift and stagnation fire only when they fired on `hysteresis_required` of the last
    # `hysteresis_window` turns (this one included): one noisy turn does not replan.
    hysteresis_window: int = 3
    hysteresis_required: int = 2
    # After this many replans, stagnation (or an exact repeat) stops the run with failure.
    max_replans: int = 2
    # The same tool with the same canonical arguments this many turns in a row is a loop.
    repeat_limit: int = 3
    budgets: Budgets = field(default_factory=Budgets)
    # Per condition (drift, stagnation): its own window and count, over the two above.
    hysteresis: Mapping[Condition, Hysteresis] = field(default_factory=dict)

    def hysteresis_for(self, condition: Condition) -> Hysteresis:
        """The window and count `condition` replans by: its own, else the policy's."""
        return self.hysteresis.get(
            condition, Hysteresis(self.hysteresis_window, self.hysteresis_required)
        )

    def __post_init__(self) -> None:
        missing = [c.value for c in Condition if c not in self.thresholds]
        if missing:
            raise ValueError(f"no threshold for: {', '.join(missing)}")
        if not 1 <= self.hysteresis_required <= self.hysteresis_window:
            raise ValueError("hysteresis_required must be between 1 and hysteresis_window")
        if self.max_replans < 0 or self.repeat_limit < 2 or self.budgets.max_turns < 1:
            raise ValueError("max_replans ≥ 0, repeat_limit ≥ 2 and max_turns ≥ 1 are required")


# Cost ratios behind the default policy (DESIGN.md: low t* where a miss is costly, high t*
# where a false stop abandons or ships unfinished work, medium for drift and stagnation).
DEFAULT_COSTS: Mapping[Condition, tuple[float, float, float]] = {
    Condition.INTEGRITY: (1.0, 9.0, 0.05),  # t* = 0.10
    Condition.RISK: (1.0, 9.0, 0.05),  # t* = 0.10
    Condition.INFEASIBLE: (4.0, 1.0, 0.05),  # t* = 0.80
    Condition.GOAL_REACHED: (4.0, 1.0, 0.05),  # t* = 0.80
    Condition.DRIFT: (1.0, 1.0, 0.10),  # t* = 0.50
    Condition.STAGNATION: (1.0, 1.0, 0.10),  # t* = 0.50
}


def default_policy(**overrides) -> Policy:
    """The shipped policy, built from DEFAULT_COSTS; keyword arguments override fields."""
    thresholds = {c: Threshold(*costs) for c, costs in DEFAULT_COSTS.items()}
    return Policy(thresholds=overrides.pop("thresholds", thresholds), **overrides)
