"""The second-tier judge on the uncertain band: which of the guardian's answers it is asked
about, when its answer settles a condition, and the decision that follows. Pure.

A guardian answer inside the uncertain band goes to the judge first when the policy version
names its condition. A judge answer outside the band settles the condition: the policy decides
on it. An uncertain, malformed, failed or late judge answer settles nothing: the guardian's
band answer stands and the turn escalates to a person, as without a judge.

Never judged: risk (an irreversible or regulated call, or one in the band toward them, always
goes to a person), and a guardian answer that is malformed (a guardian that failed is for a
person to see, not for a second model to paper over). The decision is a function of the
logged guardian answers and the logged judge answers, so replay re-decides it identically.
"""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from guardian_core.engine.conditions import (
    Condition,
    Malformed,
    compared_probability,
    parse_answer,
)
from guardian_core.engine.policy import (
    POST_EXECUTION_CONDITIONS,
    PastTurn,
    PolicyDecision,
    Reason,
    Usage,
    decide,
)
from guardian_core.engine.thresholds import Band, Policy

# What a judge may settle: the questions asked after a step ran. Risk is asked before a call
# runs and gates it; an irreversible or regulated call is a person's to approve.
JUDGEABLE: frozenset[Condition] = frozenset(POST_EXECUTION_CONDITIONS)


class Judge(Protocol):
    model_version: str

    def judge(self, projection: Mapping, condition: Condition) -> object:
        """A raw answer to `condition` about `projection` (a borderline case), as a guardian
        gives one; raising or returning Malformed counts as no answer."""
        ...


class Clock(Protocol):
    def monotonic(self) -> float: ...


@dataclass(frozen=True)
class Judgement:
    """One condition the judge was asked: both answers, and whether the judge's settled it."""

    condition: Condition
    guardian: object  # the guardian's raw answer, in the band
    judge: object  # the judge's raw answer, or Malformed
    settled: bool


def to_judge(
    answers: Mapping, policy: Policy, conditions: Collection[Condition | str]
) -> tuple[Condition, ...]:
    """The configured conditions whose guardian answer is a probability inside the band."""
    wanted = {Condition(c) for c in conditions} & JUDGEABLE
    return tuple(
        c
        for c in POST_EXECUTION_CONDITIONS
        if c in wanted and _in_band(c, answers.get(c.value), policy)
    )


def ask_judge(
    judge: Judge,
    projection: Mapping,
    conditions: Sequence[Condition],
    *,
    clock: Clock,
    deadline_seconds: float | None = None,
) -> dict[str, object]:
    """The judge's raw answer per condition, asked one after another. A raise becomes
    Malformed; so does an answer that took longer than `deadline_seconds` (by `clock`): late
    is as good as none, whatever the adapter's own timeout did."""
    answers: dict[str, object] = {}
    for condition in conditions:
        start = clock.monotonic()
        try:
            raw = judge.judge(projection, condition)
        except Exception as exc:  # a judge that fails settles nothing: a person decides
            raw = Malformed(f"judge failed: {type(exc).__name__}: {exc}"[:300])
        if deadline_seconds is not None and clock.monotonic() - start > deadline_seconds:
            raw = Malformed(f"judge answered after its {deadline_seconds:g} s deadline")
        answers[condition.value] = raw
    return answers


def judgements(answers: Mapping, judged: Mapping, policy: Policy) -> tuple[Judgement, ...]:
    """Each judged condition with both answers and whether the judge's settles it: only a
    judgeable condition whose guardian answer is in the band, and a judge answer that parses
    and falls outside the band. Decided from the answers alone, so a log replays the same."""
    found = []
    for condition in POST_EXECUTION_CONDITIONS:
        if condition.value not in judged or condition not in JUDGEABLE:
            continue
        guardian = answers.get(condition.value)
        if not _in_band(condition, guardian, policy):
            continue  # a log cannot make a judge overrule a confident guardian
        raw = judged[condition.value]
        settles = _probability(condition, raw) is not None and (
            policy.thresholds[condition].band(_probability(condition, raw)) != Band.UNCERTAIN
        )
        found.append(Judgement(condition, guardian, raw, settles))
    return tuple(found)


def decide_judged(
    answers: Mapping,
    judged: Mapping,
    policy: Policy,
    history: Sequence[PastTurn] = (),
    usage: Usage | None = None,
    **decide_options,
) -> PolicyDecision:
    """`decide` with the judge's settling answers in place of the guardian's band answers;
    each judged condition's reason says both answers. Without judge answers, exactly
    `decide`."""
    if not judged:  # the judge was not asked (most turns): nothing to settle or to copy
        return decide(answers, policy, history, usage, **decide_options)
    found = judgements(answers, judged, policy)
    effective = dict(answers)
    for judgement in found:
        if judgement.settled:
            effective[judgement.condition.value] = judgement.judge
    decision = decide(effective, policy, history, usage, **decide_options)
    if not found:
        return decision
    by_condition = {j.condition.value: j for j in found}
    reasons = tuple(
        _with_judgement(reason, by_condition[reason.source], policy)
        if reason.source in by_condition
        else reason
        for reason in decision.reasons
    )
    return replace(decision, reasons=reasons)


def _with_judgement(reason: Reason, judgement: Judgement, policy: Policy) -> Reason:
    condition = judgement.condition
    guardian_p = _probability(condition, judgement.guardian)
    judge_p = _probability(condition, judgement.judge)
    if judgement.settled:
        detail = (
            f"settled by the judge: {reason.detail}; the guardian's p={guardian_p:.3f} was "
            f"within δ={policy.thresholds[condition].delta} of t*"
        )
    elif judge_p is None:
        why = parse_answer(condition, judgement.judge)
        why = why.reason if isinstance(why, Malformed) else "no usable answer"
        detail = f"{reason.detail}; the judge gave no usable answer ({why}): to a person"
    else:
        detail = f"{reason.detail}; the judge's p={judge_p:.3f} is in the band too: to a person"
    return replace(reason, detail=detail[:1000])


def _probability(condition: Condition, raw: object) -> float | None:
    return compared_probability(condition, parse_answer(condition, raw))


def _in_band(condition: Condition, raw: object, policy: Policy) -> bool:
    value = _probability(condition, raw)
    return value is not None and policy.thresholds[condition].band(value) == Band.UNCERTAIN
