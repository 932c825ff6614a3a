"""The decision pane: what a reviewer reads to decide one escalation, and its questions."""

import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from django.db.models import Q

from escalations.held_calls import HeldCall, escalation_held_calls
from escalations.models import Escalation, EscalationEvent, EscalationKind, ReviewGuidance, Verdict
from guardian_core.engine.conditions import Condition
from guardian_core.untrusted import BIDI_CONTROLS, has_bidi_controls
from runs.models import Run, Turn
from runs.vocabulary import (
    answer_words,
    escalation_summary_words,
    reason_words,
    review_end_words,
    risk_words,
)

# The pane shows the run's last few turns only: what it reads does not grow with the run.
PANE_RECENT_TURNS = 5
PANE_EVENTS = 50
ANSWERED_KINDS = (
    EscalationKind.UNCERTAIN,
    EscalationKind.GUARDIAN_FAILURE,
    EscalationKind.INTEGRITY,
    EscalationKind.AUDIT_SAMPLE,
)
# A tool output is shown verbatim up to this many characters; the rest is said to be cut.
PANE_OUTPUT_CHARS = 20_000
# Embeddings, overrides, isolates and marks (guardian_core/untrusted.py): the pane writes them
# out (the bidi_visible filter), escapes them in JSON, and says so at the top.
_BIDI_ESCAPES = {ord(c): f"\\u{ord(c):04x}" for c in BIDI_CONTROLS}


def pretty_json(value: object) -> str:
    """Indented JSON for a person to read and edit; a bidirectional control is written as its
    \\u escape (the same JSON value) so it cannot reorder what the reviewer reads."""
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True).translate(_BIDI_ESCAPES)


@dataclass(frozen=True)
class PaneTurn:
    """One earlier turn in short: what the actor proposed, what became of it, and why."""

    index: int
    message: str
    calls: list[tuple[str, str]]  # (tool, its status in words)
    outcome: str  # the code; the page says it in the run page's words
    reasons: list[str]
    escalated_here: bool
    # What the user said before the step (untrusted): a held refund the user asked for reads
    # otherwise than one they never mentioned.
    user_said: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PaneQuestion:
    """A condition the reviewer answers in the guardian's place."""

    condition: str
    text: str
    kind: str  # "yes_no" | "risk" | "drift"


@dataclass(frozen=True)
class PaneOutput:
    """A tool output of the escalated turn (untrusted), as the guardian judged it."""

    position: int
    tool: str
    status: str  # in words, as the run page's call status
    text: str
    cut: int  # characters not shown
    withheld: bool  # kept from the actor until a person clears it


@dataclass(frozen=True)
class PaneCall:
    """A held call as the pane shows it."""

    call: HeldCall
    arguments_json: str
    intent: str
    default_risk: str  # the reviewer's class starts at the guardian's (or the declared) one

    @property
    def declared_words(self) -> str:
        return (
            risk_words(self.call.declared_risk, translated=True) if self.call.declared_risk else ""
        )

    @property
    def guardian_words(self) -> str:
        return (
            risk_words(self.call.guardian_risk, translated=True) if self.call.guardian_risk else ""
        )


@dataclass(frozen=True)
class PaneAmbiguousCall:
    """A call that started and never recorded an outcome."""

    position: int
    tool: str
    intent: str
    arguments_json: str


@dataclass(frozen=True)
class DecisionPane:
    escalation: Escalation
    held_calls: list[PaneCall]
    ambiguous_calls: list[PaneAmbiguousCall]
    questions: list[PaneQuestion]
    outputs: list[PaneOutput]
    recent_turns: list[PaneTurn]
    events: list[EscalationEvent]
    guidance: list[ReviewGuidance]
    verdict: Verdict | None
    has_bidi: bool

    @property
    def run(self) -> Run:
        return self.escalation.run

    @property
    def triggered(self) -> list[dict]:
        return self.escalation.reason.get("triggered", [])

    @property
    def summary(self) -> str:
        """The stored summary in the run page's words (older rows begin with a code)."""
        return escalation_summary_words(self.escalation.summary, self.escalation.reason)

    @property
    def review_end(self) -> str:
        """How a coder ⇄ reviewer loop ended, in words ("round cap reached")."""
        return review_end_words(str(self.review_loop.get("end_reason", "")), translated=True)

    @property
    def review_loop(self) -> dict:
        """The coder/reviewer loop's last round, for a review_loop escalation ({} otherwise)."""
        if self.escalation.kind != EscalationKind.REVIEW_LOOP:
            return {}
        return self.escalation.reason

    @property
    def verdict_answers(self) -> list[tuple[str, str]]:
        """The verdict's answers as a person reads them: yes / no, a class, a score; in the
        order the form asked them (the stored JSON keeps no order: PostgreSQL's jsonb sorts
        its keys), any other after them by name."""
        answer = (self.verdict.answer if self.verdict else None) or {}
        return [
            (condition, answer_words(condition, label, translated=True))
            for condition, label in in_question_order(
                answer, [question.condition for question in self.questions]
            )
        ]


def in_question_order(answer: Mapping, asked: list[str]) -> list[tuple[str, object]]:
    """A verdict's {condition: label} in the order the questions were asked, any other
    condition after them by name."""
    place = {condition: i for i, condition in enumerate(asked)}
    return sorted(answer.items(), key=lambda item: (place.get(item[0], len(place)), item[0]))


def uncertain_conditions(escalation: Escalation) -> list[str]:
    """The conditions a person may answer for this escalation."""
    return [
        reason["source"]
        for reason in escalation.reason.get("triggered", [])
        if reason["source"] in {c.value for c in Condition}
    ]


def escalation_pane(*, escalation_id: int) -> DecisionPane:
    """Everything the decision pane shows for one escalation; raises Escalation.DoesNotExist.

    Bounded whatever the run's length: the last PANE_RECENT_TURNS turns, the escalated turn's
    own calls, the escalation's last PANE_EVENTS events.
    """
    escalation = Escalation.objects.select_related(
        "run__policy_version", "turn__decision", "claimed_by"
    ).get(pk=escalation_id)
    reason = escalation.reason
    turn = escalation.turn
    calls = list(turn.tool_calls.order_by("position"))
    intents = {call.position: call.intent for call in calls}
    held = [
        PaneCall(
            call=held_call,
            arguments_json=pretty_json(held_call.arguments),
            intent=intents.get(held_call.position, ""),
            default_risk=held_call.guardian_risk or held_call.declared_risk,
        )
        for held_call in escalation_held_calls(escalation)
    ]
    ambiguous_positions = set(reason.get("ambiguous_calls", []))
    questions = [
        PaneQuestion(
            condition=condition,
            text=escalation.run.policy_version.question_set.get(condition, condition),
            kind=(
                "risk"
                if condition == Condition.RISK
                else "drift"
                if condition == Condition.DRIFT
                else "yes_no"
            ),
        )
        for condition in uncertain_conditions(escalation)
        # A held step is approved or rejected call by call; only the others ask questions.
        if escalation.kind in ANSWERED_KINDS
    ]
    sources = {t.get("source", "") for t in reason.get("triggered", [])}
    # An audit sample's turn went on: its outputs reached the actor, nothing is withheld.
    withheld = (
        Condition.INTEGRITY.value in sources and escalation.kind != EscalationKind.AUDIT_SAMPLE
    )
    outputs = [
        PaneOutput(
            position=call.position,
            tool=call.tool,
            status=call.get_status_display().lower(),
            text=(call.result or call.error)[:PANE_OUTPUT_CHARS],
            cut=max(len(call.result or call.error) - PANE_OUTPUT_CHARS, 0),
            withheld=withheld and call.result is not None,
        )
        for call in calls
        if call.result is not None or call.error
    ]
    recent = list(
        escalation.run.turns.filter(index__lte=turn.index)
        .select_related("decision")
        .prefetch_related("tool_calls")
        .order_by("-index")[:PANE_RECENT_TURNS]
    )
    recent_turns = [_pane_turn(t, escalated_here=t.pk == turn.pk) for t in reversed(recent)]
    events = list(
        escalation.events.select_related("actor").order_by("-created_at", "-id")[:PANE_EVENTS]
    )[::-1]
    ambiguous_tools = {c.tool for c in calls if c.position in ambiguous_positions}
    tools = {c.call.tool for c in held} | ambiguous_tools
    conditions = {s for s in sources if s in {c.value for c in Condition}}
    if escalation.kind == EscalationKind.GATED_STEP:
        conditions.add(Condition.RISK.value)  # the gate holds what the risk check classed
    guidance = list(
        ReviewGuidance.objects.filter(
            Q(condition__in=conditions, tool__in=[*tools, ""]) | Q(condition="", tool__in=tools)
        )[:20]
    )
    verdict = Verdict.objects.select_related("reviewer").filter(escalation=escalation).first()
    untrusted = [
        escalation.run.goal,
        escalation.run.acceptance_criteria,
        escalation.summary,
        reason,
        turn.proposal,
        *(o.text for o in outputs),
        *(t.message for t in recent_turns),
        *(said for t in recent_turns for said in t.user_said),
        *(r for t in recent_turns for r in t.reasons),
    ]
    return DecisionPane(
        escalation=escalation,
        held_calls=held,
        ambiguous_calls=[
            PaneAmbiguousCall(c.position, c.tool, c.intent, pretty_json(c.arguments))
            for c in calls
            if c.position in ambiguous_positions
        ],
        questions=questions,
        outputs=outputs,
        recent_turns=recent_turns,
        events=events,
        guidance=guidance,
        verdict=verdict,
        has_bidi=any(has_bidi_controls(text) for text in untrusted),
    )


def _pane_turn(turn: Turn, *, escalated_here: bool) -> PaneTurn:
    decision = getattr(turn, "decision", None)
    reasons = []
    for reason in (decision.reasons if decision else []) or []:
        # What asked for something other than "go on", and every step of a coder/reviewer loop.
        source = reason.get("source", "")
        if reason.get("band") != "clear" or source == "review_loop":
            said = (
                str(reason.get("detail", "")) if source == "review_loop" else reason_words(reason)
            )
            reasons.append(said[:300])
    proposal = turn.proposal or {}
    return PaneTurn(
        index=turn.index,
        message=str(proposal.get("message") or "")[:300],
        calls=[(c.tool, c.get_status_display().lower()) for c in turn.tool_calls.all()],
        outcome=decision.outcome if decision else "",
        reasons=reasons[:4],
        escalated_here=escalated_here,
        user_said=[
            str(item.get("text", ""))[:300]
            for item in proposal.get("user_messages") or ()
            if isinstance(item, dict)
        ],
    )
