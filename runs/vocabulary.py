"""The log's codes as people read them, one vocabulary for every page: a reason's source (a
condition, the gate, a cap), its band, a decision's outcome, and escalation summaries."""

import re
from collections.abc import Sequence

from runs.models import DecisionOutcome, RiskClass
from runs.stop_reasons import stop_reason_text

SOURCES = {
    "integrity": "Injected instructions",
    "risk": "Risk",
    "infeasible": "Infeasible",
    "goal_reached": "Goal reached",
    "drift": "Drift",
    "stagnation": "Stagnation",
    "gate": "Gate",
    "validation": "Validation",
    "tool_error": "Tool error",
    "exact_repeat": "Exact repeat",
    "turn_cap": "Turn cap",
    "token_budget": "Token budget",
    "cost_budget": "Cost budget",
    "wall_time_budget": "Wall time",
    "review_loop": "Coder ⇄ reviewer",
}
BANDS = {
    "clear": "clear",
    "uncertain": "in the uncertain band",
    "fired": "fired",
    # The logged detail already says "malformed answer (why)": the band's own name must not
    # repeat it, and a timeout or an error is no answer at all rather than a malformed one.
    "malformed": "no usable answer",
}
OUTCOMES = dict(DecisionOutcome.choices)
# How the coder ⇄ reviewer loop ended (guardian_core/engine/reviewer_loop.py EndReason).
REVIEW_ENDS = {
    "approved": "the reviewer agent approved",
    "round_cap": "round cap reached",
    "invalid_verdict": "no valid verdict, even after a repair turn",
    "refusal": "the model refused",
}


def _fallback(code: str) -> str:
    # A code this module does not know yet (a newer guard's) still reads as words.
    return code.replace("_", " ").capitalize()


def source_words(source: str) -> str:
    return SOURCES.get(source) or _fallback(source)


def band_words(band: str) -> str:
    return BANDS.get(band) or band.replace("_", " ")


def outcome_words(outcome: str, stop_reason: str = "") -> str:
    """ "Stop with success — Goal reached", as the run page says a turn's outcome."""
    if not outcome:
        return ""
    said = OUTCOMES.get(outcome) or _fallback(outcome)
    return f"{said} — {stop_reason_text(stop_reason)}" if stop_reason else said


def review_end_words(end_reason: str) -> str:
    return REVIEW_ENDS.get(end_reason) or end_reason.replace("_", " ")


def joined_reasons(reasons: list[str] | tuple[str, ...]) -> str:
    """Reasons (untrusted text) in one line: each one's own closing stop is dropped so the
    separator is not doubled ("… collapsed.; Leading …")."""
    return "; ".join(text.strip().rstrip(".;").strip() for text in reasons if text.strip())


def review_summary(*, end_reason: str, rounds: int, last_reasons: list[str]) -> str:
    """The summary of a coder ⇄ reviewer escalation, as it is stored."""
    said = f"{SOURCES['review_loop']}: {review_end_words(end_reason)} after {rounds} round"
    said += "s" if rounds != 1 else ""
    reasons = joined_reasons(last_reasons)
    return f"{said}. Last reasons: {reasons}" if reasons else f"{said}."


def reason_summary(source: str, detail: str) -> str:
    """The summary of an escalation a reason triggered, as it is stored."""
    return f"{source_words(source)}: {detail}"


_OLD_REVIEW = re.compile(r"Coder/reviewer loop: (\w+) after (\d+) rounds: (.*)", re.DOTALL)
_OLD_SOURCE = re.compile(r"([a-z_]+): (.*)", re.DOTALL)


def summary_words(summary: str) -> str:
    """A stored escalation summary as the page shows it. Summaries written before they were
    worded began with a code ("gate: …", "Coder/reviewer loop: round_cap after 2 rounds:
    a.; b"); they are stored text and stay as they are, and read here in today's words."""
    old = _OLD_REVIEW.fullmatch(summary)
    if old:
        end, rounds, rest = old.groups()
        return review_summary(end_reason=end, rounds=int(rounds), last_reasons=rest.split("; "))
    coded = _OLD_SOURCE.fullmatch(summary)
    if coded and coded.group(1) in SOURCES:
        return reason_summary(coded.group(1), coded.group(2))
    return summary


# What drove a run (runs.validation.ACTORS), as the runs list and its filter say it.
ACTORS = {
    "scripted": "Scripted",
    "openai": "OpenAI",
    "coder_reviewer": "Coder ⇄ reviewer",
    "external": "External loop (API)",
}


def actor_words(actor: str) -> str:
    return ACTORS.get(actor) or _fallback(actor)


RISK_CLASSES = dict(RiskClass.choices)


def risk_words(risk_class: str) -> str:
    """ "reversible_write" → "Reversible write", as the reviewers' risk choices say it."""
    return RISK_CLASSES.get(risk_class) or _fallback(risk_class)


def answer_words(condition: str, label: object) -> str:
    """A person's answer for a condition as people read it: yes / no, a class, a score."""
    if isinstance(label, bool):
        return "yes" if label else "no"
    if condition == "risk" and isinstance(label, str):
        return risk_words(label)  # as the risk choices say it: "Reversible write"
    return str(label)


def verdict_answer_words(
    answer: dict | None, risk_labels: dict | None, *, asked: Sequence[str] = ()
) -> list[str]:
    """What a reviewer answered, in the log's words: "Injected instructions: yes", in the
    order the questions were `asked` (the decision form's order; others after, by name), and
    each call's risk class as they labelled it ("Risk of call 0: Irreversible")."""
    place = {condition: i for i, condition in enumerate(asked)}
    said = [
        f"{source_words(condition)}: {answer_words(condition, label)}"
        for condition, label in sorted(
            (answer or {}).items(), key=lambda item: (place.get(item[0], len(place)), item[0])
        )
    ]
    said += [
        f"Risk of call {position}: {risk_words(str(label))}"
        for position, label in sorted((risk_labels or {}).items(), key=lambda kv: int(kv[0]))
    ]
    return said
