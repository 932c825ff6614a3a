"""The gate: the whole step is screened before any call in it runs.

If any call is irreversible or regulated — declared so, classified so by the guardian with P
above the risk threshold, or in the uncertain band (a malformed answer included) — no call of
the step runs and the step is held for a person, who sees every call. The declared class is a
floor: the guardian can raise it, never lower it. After a person's verdict, exactly the
approved calls run; confirming one call never confirms another.
"""

from collections.abc import Sequence
from dataclasses import dataclass

from guardian_core.engine.conditions import (
    Answer,
    Condition,
    RiskClass,
    compared_probability,
    most_likely_risk,
    parse_answer,
)
from guardian_core.engine.policy import Outcome, Reason
from guardian_core.engine.thresholds import Band, Threshold


@dataclass(frozen=True)
class StepCall:
    """A validated call of the step, as the gate sees it."""

    position: int
    tool: str
    declared: RiskClass


@dataclass(frozen=True)
class GatedCall:
    position: int
    tool: str
    declared: RiskClass
    assessed: RiskClass | None  # the guardian's most likely class; None when malformed
    effective: RiskClass  # max(declared, assessed): the declared class is a floor
    probability: float | None  # P(irreversible or regulated) according to the guardian
    band: Band
    needs_approval: bool
    why: str


@dataclass(frozen=True)
class GateDecision:
    held: bool
    calls: tuple[GatedCall, ...]  # every call of the step, in position order
    runnable: tuple[int, ...]  # positions that may run now (none while held)
    # The risk threshold the calls were screened at: a held call's reason carries its t* and δ,
    # so the reviewer's bar marks them beside the probability.
    threshold: Threshold | None = None

    def reasons(self) -> tuple[Reason, ...]:
        """One escalate reason per call that needs approval, when the step is held."""
        if not self.held:
            return ()
        return tuple(
            Reason(
                source="gate",
                band=call.band.value,
                outcome=Outcome.ESCALATE,
                detail=f"call {call.position} {call.tool}: {call.why}",
                value=call.probability,
                t_star=None if self.threshold is None else self.threshold.t_star,
                delta=None if self.threshold is None else self.threshold.delta,
            )
            for call in self.calls
            if call.needs_approval
        )


def gate_step(
    calls: Sequence[StepCall],
    risk_answers: Sequence[Answer | object],
    threshold: Threshold,
    *,
    approved: frozenset[int] | None = None,
) -> GateDecision:
    """Screen every call of a step before any runs.

    `risk_answers[i]` is the guardian's risk answer for `calls[i]` (raw or typed; a missing
    one is malformed). `approved` is None on the first pass; after a person's verdict it is
    the set of positions they approved, and exactly those run.
    """
    gated = tuple(
        _screen(call, risk_answers[i] if i < len(risk_answers) else None, threshold)
        for i, call in enumerate(calls)
    )
    if approved is not None:
        positions = {call.position for call in gated}
        return GateDecision(
            held=False,
            calls=gated,
            runnable=tuple(sorted(approved & positions)),
            threshold=threshold,
        )
    held = any(call.needs_approval for call in gated)
    runnable = () if held else tuple(call.position for call in gated)
    return GateDecision(held=held, calls=gated, runnable=runnable, threshold=threshold)


def _screen(call: StepCall, raw_answer: object, threshold: Threshold) -> GatedCall:
    answer = parse_answer(Condition.RISK, raw_answer)
    probability = compared_probability(Condition.RISK, answer)
    band = threshold.band(probability)
    assessed = most_likely_risk(answer)
    effective = max(call.declared, assessed or call.declared, key=lambda c: c.severity)
    if effective.needs_approval:
        why = f"{effective.value} (declared {call.declared.value})"
    elif band == Band.FIRED:
        why = f"P(irreversible or regulated)={probability:.3f} is above t*={threshold.t_star:.3f}"
    elif band == Band.UNCERTAIN:
        why = (
            "the risk answer is malformed"
            if probability is None
            else f"P(irreversible or regulated)={probability:.3f} is in the uncertain band"
        )
    else:
        why = f"{effective.value}: runs without approval"
    needs_approval = effective.needs_approval or band != Band.CLEAR
    return GatedCall(
        position=call.position,
        tool=call.tool,
        declared=call.declared,
        assessed=assessed,
        effective=effective,
        probability=probability,
        band=band,
        needs_approval=needs_approval,
        why=why,
    )
