"""The threshold policy: a pure, total, deterministic map from the guardian's answers, the
thresholds and the recent history to exactly one outcome, with a reason per condition.

Precedence when several conditions fire: escalate > stop_failure > stop_success > replan >
continue (a contradictory stop is read conservatively: failure, never success). Caps and
budgets are plain code and absolute: once one is reached the run stops with failure and no
answer, whatever else fired — no one can buy more turns by approving something.
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from guardian_core.engine.conditions import (
    Condition,
    Malformed,
    compared_probability,
    parse_answer,
)
from guardian_core.engine.thresholds import Band, Policy


class Outcome(StrEnum):
    CONTINUE = "continue"
    REPLAN = "replan"
    ESCALATE = "escalate"
    STOP_SUCCESS = "stop_success"
    STOP_FAILURE = "stop_failure"


PRECEDENCE: tuple[Outcome, ...] = (
    Outcome.ESCALATE,
    Outcome.STOP_FAILURE,
    Outcome.STOP_SUCCESS,
    Outcome.REPLAN,
    Outcome.CONTINUE,
)

# The questions asked after the tools ran. Risk is asked before execution, by the gate.
POST_EXECUTION_CONDITIONS: tuple[Condition, ...] = (
    Condition.INTEGRITY,
    Condition.INFEASIBLE,
    Condition.GOAL_REACHED,
    Condition.DRIFT,
    Condition.STAGNATION,
)

# What each condition asks for when it fires (before hysteresis and the replan limit).
ON_FIRE: Mapping[Condition, Outcome] = {
    Condition.INTEGRITY: Outcome.ESCALATE,
    Condition.RISK: Outcome.ESCALATE,
    Condition.INFEASIBLE: Outcome.STOP_FAILURE,
    Condition.GOAL_REACHED: Outcome.STOP_SUCCESS,
    Condition.DRIFT: Outcome.REPLAN,
    Condition.STAGNATION: Outcome.REPLAN,
}
HYSTERESIS_CONDITIONS = frozenset({Condition.DRIFT, Condition.STAGNATION})


@dataclass(frozen=True)
class Reason:
    """Why one condition or guard asked for an outcome; machine-readable for the decision log."""

    source: str  # a condition, or a guard: gate, tool_error, exact_repeat, turn_cap, ...
    band: str  # clear | uncertain | fired | malformed
    outcome: Outcome  # what this source asks for
    detail: str
    value: float | None = None
    t_star: float | None = None
    delta: float | None = None

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "band": self.band,
            "outcome": self.outcome.value,
            "detail": self.detail,
            "value": self.value,
            "t_star": self.t_star,
            "delta": self.delta,
        }


@dataclass(frozen=True)
class PastTurn:
    """What the policy remembers of an earlier turn."""

    outcome: Outcome
    fired: frozenset[Condition] = frozenset()  # conditions in the fired band, before hysteresis
    calls: tuple[str, ...] = ()  # call signatures of the step (tool + canonical arguments)


@dataclass(frozen=True)
class Usage:
    """Budget spent so far, this turn included."""

    turns: int
    tokens: int = 0
    cost: float = 0.0
    wall_seconds: float = 0.0


@dataclass(frozen=True)
class PolicyDecision:
    outcome: Outcome
    reasons: tuple[Reason, ...]  # one per evaluated condition and per guard that fired
    fired: frozenset[Condition] = field(default_factory=frozenset)
    stop_reason: str | None = None  # set on stop outcomes: goal_reached, infeasible, turn_cap, ...

    @property
    def triggered(self) -> tuple[Reason, ...]:
        """The reasons that asked for the chosen outcome."""
        return tuple(r for r in self.reasons if r.outcome == self.outcome)


def decide(
    answers: Mapping,
    policy: Policy,
    history: Sequence[PastTurn] = (),
    usage: Usage | None = None,
    *,
    calls: tuple[str, ...] = (),
    conditions: Sequence[Condition] = POST_EXECUTION_CONDITIONS,
    extra_reasons: Sequence[Reason] = (),
    replans: int | None = None,
) -> PolicyDecision:
    """Map answers to exactly one outcome. Pure, total and deterministic.

    `answers` maps conditions to raw or typed answers; each condition in `conditions` is
    evaluated (a missing one is malformed, so uncertain), and so is risk when it is present.
    Keys that are not conditions are ignored. `extra_reasons` come from the loop step (a held
    gate, a failed tool) and take part in the precedence like any other reason. `history`
    need only hold the last turns the hysteresis and repeat windows read (`history_needed`);
    `replans` is how many replans the run has had, counted from `history` when not given.
    """
    usage = usage or Usage(turns=1)
    evaluated = dict.fromkeys([*conditions, *_known_conditions(answers)])
    reasons: list[Reason] = []
    fired: set[Condition] = set()
    replans_so_far = (
        replans
        if replans is not None
        else sum(1 for turn in history if turn.outcome == Outcome.REPLAN)
    )

    for condition in evaluated:
        reason, did_fire = _evaluate(condition, answers.get(condition), policy, history)
        if did_fire:
            fired.add(condition)
        if condition == Condition.STAGNATION and reason.outcome == Outcome.REPLAN:
            reason = _limit_replans(reason, replans_so_far, policy)
        reasons.append(reason)

    repeat = _exact_repeat(calls, history, policy)
    if repeat:
        reasons.append(_limit_replans(repeat, replans_so_far, policy))
    reasons.extend(extra_reasons)

    asked = {reason.outcome for reason in reasons}
    outcome = next(o for o in PRECEDENCE if o == Outcome.CONTINUE or o in asked)
    caps = _caps_reached(usage, policy)
    reasons.extend(caps)
    # The last allowed turn may still reach the goal; a run that overspent tokens, cost or
    # time has no answer, whoever spent it (actor or guardian).
    overspent = any(cap.source.endswith("_budget") for cap in caps)
    if caps and (outcome != Outcome.STOP_SUCCESS or overspent):
        outcome = Outcome.STOP_FAILURE
    return PolicyDecision(
        outcome=outcome,
        reasons=tuple(reasons),
        fired=frozenset(fired),
        stop_reason=_stop_reason(outcome, reasons),
    )


def history_needed(policy: Policy) -> int:
    """How many of the latest decided turns `decide` reads: the hysteresis window and the
    exact-repeat window, this turn excluded."""
    windows = [policy.hysteresis_for(c).window for c in HYSTERESIS_CONDITIONS]
    return max(*windows, policy.repeat_limit) - 1


# A key of the answers → its condition (StrEnum members hash and compare as their values), and
# each condition's place in the enum's order: a lookup, not an enum call that raises per key.
_CONDITION_OF = {condition.value: condition for condition in Condition}
_CONDITION_ORDER = {condition: place for place, condition in enumerate(Condition)}


def _known_conditions(answers: Mapping) -> list[Condition]:
    # A key that is not a condition is ignored, so decide stays total over any mapping.
    known = [_CONDITION_OF[key] for key in answers if _is_condition(key)]
    return sorted(known, key=_CONDITION_ORDER.__getitem__)


def _is_condition(key: object) -> bool:
    try:
        return key in _CONDITION_OF
    except TypeError:  # an unhashable key cannot be a condition (Condition(key) refuses it)
        return False


_CLEAR, _UNCERTAIN, _FIRED = Band.CLEAR.value, Band.UNCERTAIN.value, Band.FIRED.value


def _evaluate(condition, raw, policy: Policy, history) -> tuple[Reason, bool]:
    threshold = policy.thresholds[condition]
    answer = parse_answer(condition, raw)
    value = compared_probability(condition, answer)
    band = threshold.band(value)
    name, t_star, delta = condition.value, threshold.t_star, threshold.delta
    rounded = round(t_star, 6)
    if isinstance(answer, Malformed):
        detail = f"malformed answer ({answer.reason}): counted as uncertain"
        return Reason(name, "malformed", Outcome.ESCALATE, detail, value, rounded, delta), False
    if band is Band.UNCERTAIN:
        detail = f"p={value:.3f} is within δ={delta} of t*={t_star:.3f}"
        return Reason(name, _UNCERTAIN, Outcome.ESCALATE, detail, value, rounded, delta), False
    if band is Band.CLEAR:
        detail = f"p={value:.3f} is below t*={t_star:.3f}"
        return Reason(name, _CLEAR, Outcome.CONTINUE, detail, value, rounded, delta), False
    detail = f"p={value:.3f} is above t*={t_star:.3f}"
    if condition in HYSTERESIS_CONDITIONS:
        hysteresis = policy.hysteresis_for(condition)
        window = history[len(history) - (hysteresis.window - 1) :] if history else ()
        times = 1 + sum(1 for turn in window if condition in turn.fired)
        if times < hysteresis.required:
            detail += (
                f"; fired on {times} of the last {hysteresis.window} turns, "
                f"{hysteresis.required} needed"
            )
            return Reason(name, _FIRED, Outcome.CONTINUE, detail, value, rounded, delta), True
        detail += f"; fired on {times} of the last {hysteresis.window} turns"
    return Reason(name, _FIRED, ON_FIRE[condition], detail, value, rounded, delta), True


def _limit_replans(reason: Reason, replans_so_far: int, policy: Policy) -> Reason:
    if replans_so_far < policy.max_replans:
        return reason
    detail = f"{reason.detail}; {replans_so_far} replans already (limit {policy.max_replans})"
    return Reason(
        reason.source,
        reason.band,
        Outcome.STOP_FAILURE,
        detail,
        reason.value,
        reason.t_star,
        reason.delta,
    )


def _exact_repeat(calls: tuple[str, ...], history, policy: Policy) -> Reason | None:
    needed = policy.repeat_limit - 1
    if not calls or len(history) < needed:
        return None
    if all(turn.calls == calls for turn in history[-needed:]):
        detail = f"the same calls {policy.repeat_limit} turns in a row: {', '.join(calls)}"
        return Reason("exact_repeat", "fired", Outcome.REPLAN, detail[:500])
    return None


def _caps_reached(usage: Usage, policy: Policy) -> list[Reason]:
    budgets = policy.budgets
    checks = [
        ("turn_cap", budgets.max_turns, usage.turns, usage.turns >= budgets.max_turns),
        ("token_budget", budgets.max_tokens, usage.tokens, None),
        ("cost_budget", budgets.max_cost, usage.cost, None),
        ("wall_time_budget", budgets.max_wall_seconds, usage.wall_seconds, None),
    ]
    reasons = []
    for name, limit, spent, reached in checks:
        if limit is None:
            continue
        if reached is None:
            reached = spent > limit
        if reached:
            detail = f"{name}: {spent} spent of {limit}; the run stops with no answer"
            reasons.append(Reason(name, "fired", Outcome.STOP_FAILURE, detail))
    return reasons


def _stop_reason(outcome: Outcome, reasons: Sequence[Reason]) -> str | None:
    if outcome not in (Outcome.STOP_SUCCESS, Outcome.STOP_FAILURE):
        return None
    # A cap names the stop even when a condition asked for failure in the same turn.
    for reason in reversed(reasons):
        if reason.outcome == outcome and reason.source.endswith(("_cap", "_budget")):
            return reason.source
    return next(reason.source for reason in reasons if reason.outcome == outcome)
