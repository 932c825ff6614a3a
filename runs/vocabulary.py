"""The log's codes as people read them, one vocabulary for every page: a reason's source (a
condition, the gate, a cap), its band, a decision's outcome, and escalation summaries.

The words are English unless a caller asks for them `translated` (in the active language): a
page showing them does; what is stored or sealed (an escalation's summary, a verdict's note)
and what is sent to a model keeps them in English, whoever's request wrote it."""

import re
from collections.abc import Mapping, Sequence

from django.utils import translation
from django.utils.translation import gettext, gettext_noop, pgettext_lazy

from guardian_core.engine.conditions import Condition
from guardian_core.said import figure, said, worded
from runs.models import DecisionOutcome, RiskClass
from runs.stop_reasons import stop_reason_text

SOURCES = {
    "integrity": gettext_noop("Injected instructions"),
    "risk": gettext_noop("Risk"),
    "infeasible": gettext_noop("Infeasible"),
    "goal_reached": gettext_noop("Goal reached"),
    "drift": gettext_noop("Drift"),
    "stagnation": gettext_noop("Stagnation"),
    # Translators: the gate that holds a risky step for a reviewer ("barrière d’évaluation").
    "gate": gettext_noop("Gate"),
    "validation": gettext_noop("Validation"),
    "tool_error": gettext_noop("Tool error"),
    "exact_repeat": gettext_noop("Exact repeat"),
    "turn_cap": gettext_noop("Turn cap"),
    "token_budget": gettext_noop("Token budget"),
    "cost_budget": gettext_noop("Cost budget"),
    "wall_time_budget": gettext_noop("Wall time"),
    "review_loop": gettext_noop("Coder ⇄ reviewer"),
}
BANDS = {
    # Translators: a condition's band: its probability is below the uncertain band.
    "clear": gettext_noop("clear"),
    "uncertain": gettext_noop("in the uncertain band"),
    # Translators: a condition's band: its probability is above the uncertain band.
    "fired": gettext_noop("fired"),
    # The logged detail already says "malformed answer (why)": the band's own name must not
    # repeat it, and a timeout or an error is no answer at all rather than a malformed one.
    "malformed": gettext_noop("no usable answer"),
}
OUTCOMES = dict(DecisionOutcome.choices)
# How the coder ⇄ reviewer loop ended (guardian_core/engine/reviewer_loop.py EndReason).
REVIEW_ENDS = {
    "approved": gettext_noop("the reviewer agent approved"),
    "round_cap": gettext_noop("round cap reached"),
    "invalid_verdict": gettext_noop("no valid verdict, even after a repair turn"),
    "refusal": gettext_noop("the model refused"),
}


def _fallback(code: str) -> str:
    # A code this module does not know yet (a newer guard's) still reads as words.
    return code.replace("_", " ").capitalize()


def _say(words, translated: bool) -> str:
    """`words` (English, marked with gettext_noop, or a model choice's lazy label) in the
    active language when `translated`, else in English."""
    if translated:
        return gettext(words) if isinstance(words, str) else str(words)
    if isinstance(words, str):
        return words
    with translation.override("en"):
        return str(words)


def source_words(source: str, *, translated: bool = False) -> str:
    said = SOURCES.get(source)
    return _fallback(source) if said is None else _say(said, translated)


def band_words(band: str, *, translated: bool = False) -> str:
    said = BANDS.get(band)
    return band.replace("_", " ") if said is None else _say(said, translated)


def outcome_words(outcome: str, stop_reason: str = "", *, translated: bool = False) -> str:
    """ "Stop with success — Goal reached", as the run page says a turn's outcome."""
    if not outcome:
        return ""
    label = OUTCOMES.get(outcome)
    said = _fallback(outcome) if label is None else _say(label, translated)
    if not stop_reason:
        return said
    return f"{said} — {stop_reason_text(stop_reason, translated=translated)}"


def review_end_words(end_reason: str, *, translated: bool = False) -> str:
    said = REVIEW_ENDS.get(end_reason)
    return end_reason.replace("_", " ") if said is None else _say(said, translated)


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


def detail_words(reason: Mapping) -> str:
    """A decision reason's detail as a page shows it. The engine writes it in English and the
    log seals it as written; where the reason's own fields (band, p, t*, δ) say its first
    clause exactly, that clause is said in the reader's language and notation, and the rest
    is kept as recorded. Any other detail is shown as it is."""
    detail = str(reason.get("detail") or "")
    head = _detail_head(reason)
    if head is None or not detail.startswith(head["text"]):
        return detail
    return worded(head) + detail[len(head["text"]) :]


def reason_words(reason: Mapping) -> str:
    """A decision reason as a page lists it: its source and its detail, in the reader's words
    (reason_summary is the same line as it is stored)."""
    return gettext("%(source)s: %(detail)s") % {
        "source": source_words(str(reason.get("source", "")), translated=True),
        "detail": detail_words(reason),
    }


_CONDITION_NAMES = frozenset(c.value for c in Condition)


def _detail_head(reason: Mapping) -> dict | None:
    # The clauses guardian_core/engine/policy.py writes first, from the same fields.
    value, t_star, delta = reason.get("value"), reason.get("t_star"), reason.get("delta")
    if reason.get("source") not in _CONDITION_NAMES or not _numbers(value, t_star):
        return None
    p, t = figure(value, 3), figure(t_star, 3)
    band = reason.get("band")
    if band == "clear":
        return said("p=%(p)s is below t*=%(t_star)s", p=p, t_star=t)
    if band == "fired":
        return said("p=%(p)s is above t*=%(t_star)s", p=p, t_star=t)
    if band == "uncertain" and _numbers(delta):
        return said(
            "p=%(p)s is within δ=%(delta)s of t*=%(t_star)s",
            p=p,
            delta=figure(delta, None),
            t_star=t,
        )
    return None


def _numbers(*values: object) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def escalation_summary_words(summary: str, reason: Mapping | None) -> str:
    """An escalation's stored summary as a page shows it: in the reader's words when it is the
    summary of its first triggered reason as it was recorded (reason_summary), else in
    today's words for an older row (summary_words)."""
    triggered = (reason or {}).get("triggered") or []
    first = triggered[0] if triggered and isinstance(triggered[0], Mapping) else None
    if first is not None:
        source = str(first.get("source", ""))
        if summary == reason_summary(source, str(first.get("detail", "")))[:300]:
            return reason_words(first)
    return summary_words(summary)


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
    "scripted": gettext_noop("Scripted"),
    "openai": "OpenAI",
    "coder_reviewer": gettext_noop("Coder ⇄ reviewer"),
    "external": gettext_noop("External loop (API)"),
}


def actor_words(actor: str, *, translated: bool = False) -> str:
    said = ACTORS.get(actor)
    return _fallback(actor) if said is None else _say(said, translated)


RISK_CLASSES = dict(RiskClass.choices)
# Translators: a reviewer's yes / no answer to a question about a condition.
_YES = pgettext_lazy("answer", "yes")
_NO = pgettext_lazy("answer", "no")


def risk_words(risk_class: str, *, translated: bool = False) -> str:
    """ "reversible_write" → "Reversible write", as the reviewers' risk choices say it."""
    said = RISK_CLASSES.get(risk_class)
    return _fallback(risk_class) if said is None else _say(said, translated)


def answer_words(condition: str, label: object, *, translated: bool = False) -> str:
    """A person's answer for a condition as people read it: yes / no, a class, a score."""
    if isinstance(label, bool):
        return _say(_YES if label else _NO, translated)
    if condition == "risk" and isinstance(label, str):
        # as the risk choices say it: "Reversible write"
        return risk_words(label, translated=translated)
    return str(label)


def verdict_answer_words(
    answer: dict | None,
    risk_labels: dict | None,
    *,
    asked: Sequence[str] = (),
    translated: bool = False,
) -> list[str]:
    """What a reviewer answered, in the log's words: "Injected instructions: yes", in the
    order the questions were `asked` (the decision form's order; others after, by name), and
    each call's risk class as they labelled it ("Risk of call 0: Irreversible")."""
    place = {condition: i for i, condition in enumerate(asked)}
    said = [
        f"{source_words(condition, translated=translated)}: "
        f"{answer_words(condition, label, translated=translated)}"
        for condition, label in sorted(
            (answer or {}).items(), key=lambda item: (place.get(item[0], len(place)), item[0])
        )
    ]
    for position, label in sorted((risk_labels or {}).items(), key=lambda kv: int(kv[0])):
        words = risk_words(str(label), translated=translated)
        if translated:
            said.append(
                gettext("Risk of call %(position)s: %(risk)s")
                % {"position": position, "risk": words}
            )
        else:
            said.append(f"Risk of call {position}: {words}")
    return said
