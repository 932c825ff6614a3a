"""How a run reads on its page: each turn of the timeline, the probability chart's geometry,
the budget against each cap, and the reasons in words, formatted once in Python (untrusted
text stays plain str: the template escapes it)."""

from dataclasses import dataclass, field
from datetime import datetime

from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from escalations.decision_pane import pretty_json
from escalations.held_calls import approval_edits
from escalations.models import Escalation
from guardian_core.engine.conditions import Condition, most_likely_risk, parse_answer
from guardian_core.engine.thresholds import Budgets
from runs.judging import judge_lines
from runs.models import Run, RunStatus, ToolCall, ToolCallStatus, Turn
from runs.stop_reasons import stop_reason_text
from runs.tools import run_tools
from runs.vocabulary import (
    band_words,
    detail_words,
    escalation_summary_words,
    review_end_words,
    source_words,
    verdict_answer_words,
)

LIVE_STATUSES = (RunStatus.PENDING, RunStatus.RUNNING, RunStatus.WAITING)

REVIEW_STEPS = {
    "coder": gettext_lazy("the coder's answer"),
    "reviewer": gettext_lazy("the reviewer's verdict"),
    "repair": gettext_lazy("the reviewer's repair turn"),
}
# Translators: the reviewer agent's verdict in a coder ⇄ reviewer loop.
VERDICTS = {
    "APPROVED": gettext_lazy("approved"),
    "CHANGES_REQUESTED": gettext_lazy("changes requested"),
}
_CONDITIONS = tuple(c.value for c in Condition)


# An external run (runs/external.py) has no worker: the integrator's agent loop, running
# elsewhere, sends each step through the API and is answered there.
EXTERNAL_ACTOR = "external"


def status_sentence(run: Run) -> str:
    """What the run is doing, or why it ended, in words (its status label goes beside)."""
    external = run.actor == EXTERNAL_ACTOR
    if run.status == RunStatus.PENDING:
        if external:
            return _("Its agent loop, which runs elsewhere, has yet to send its first step.")
        return _("A worker has yet to take its first turn.")
    if run.status == RunStatus.RUNNING:
        if external:
            return _(
                "Its agent loop runs elsewhere and drives it through the API: each step it "
                "sends is checked and decided here before its calls run."
            )
        return _("A worker advances it turn by turn.")
    if run.status == RunStatus.WAITING:
        return _("An escalation waits for a reviewer's verdict before it goes on.")
    return f"{stop_reason_text(run.stop_reason, translated=True)}." if run.stop_reason else ""


# ---- one turn of the timeline ---------------------------------------------------------------


@dataclass(frozen=True)
class CallView:
    position: int
    tool: str
    intent: str
    arguments_json: str
    risk_class: str  # the class the call was handled at (declared floor, guardian above it)
    declared_risk: str  # "" when the tool is no longer registered
    guardian_risk: str  # "" when the guardian gave no usable answer
    status: str
    status_label: str
    idempotency_key: str
    result: str | None  # the result's first RUN_PAGE_RESULT_CHARS; None when it never ran
    result_cut: int  # characters of the result not shown
    error: str


@dataclass(frozen=True)
class EscalationView:
    pk: int
    kind_label: str
    status: str
    status_label: str
    summary: str
    created_at: datetime
    resolved_at: datetime | None
    verdict: str  # "approve" | "reject" | "answer" | "" while none
    verdict_label: str
    verdict_reason: str
    verdict_answers: list[str]  # what the reviewer answered, in words
    reviewer: str
    decided_at: datetime | None
    # "call 0 (issue_refund) approved with edited arguments: amount 49.9 → 39.9", per call
    # the reviewer edited before approving it.
    verdict_edits: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class ReviewView:
    """A coder ⇄ reviewer step: whose turn, which round, and what came of it."""

    role: str
    round: int
    step: str
    verdict: str  # "approved" | "changes requested" | ""
    reasons: list[str]
    problem: str  # an invalid verdict's or the coder's format error, a refusal
    end_reason: str
    reply: str  # untrusted model output, verbatim


@dataclass(frozen=True)
class TurnView:
    index: int
    started_at: datetime
    finished_at: datetime | None
    message: str
    calls: list[CallView]
    # What the user said before this step (untrusted text, verbatim, oldest first).
    user_messages: list[str]
    problems: list[str]  # validation problems of the proposal, per invalid call
    conditions: list[dict]  # the reasons of guardian conditions, for probability_bar
    outcome: str  # "" while the turn is undecided
    outcome_label: str
    reasons: list[str]  # why, in words: every reason that asked for more than "continue"
    stop_reason: str
    escalations: list[EscalationView]
    review: ReviewView | None
    guardian_model_version: str
    question_set_version: str  # what the guardian logged it was asked ("" before a decision)
    # The gate held the step for a reviewer before any call ran: the guardian was asked only
    # the calls' risk, so the turn has no condition probabilities.
    held: bool = False
    # The guardian read instructions in this turn's outputs: the actor got none of them (the
    # engine's quarantine), until a reviewer answers that they hold none.
    withheld: bool = False
    # `conditions` as the probability bars show them: each source in words.
    bars: list[dict] = field(default_factory=list)
    # The second-tier judge's answers beside the guardian's (runs/judging.py judge_lines).
    judged: list[dict] = field(default_factory=list)


def turn_views(turns: list[Turn], *, run) -> list[TurnView]:
    """The turns of `run` as its page shows them, with its own tools (an external run's
    definitions too) for the calls' declared classes."""
    registry = run_tools(run)
    return [_turn_view(turn, registry) for turn in turns]


def _turn_view(turn: Turn, registry) -> TurnView:
    decision = getattr(turn, "decision", None)
    reasons = (decision.reasons if decision else None) or []
    risk_answers = (decision.risk_answers if decision else None) or []
    calls = [_call_view(call, registry, risk_answers) for call in turn.tool_calls.all()]
    proposal = turn.proposal if isinstance(turn.proposal, dict) else {}
    review = _review_view(proposal, reasons, getattr(turn, "review_reply", None))
    conditions = [r for r in reasons if isinstance(r, dict) and r.get("source") in _CONDITIONS]
    said = []
    for reason in reasons:
        if not isinstance(reason, dict) or reason.get("source") == "review_loop":
            continue
        source = str(reason.get("source", ""))
        if reason.get("band") == "clear" and reason.get("outcome") == "continue":
            continue
        band = band_words(str(reason.get("band", "")), translated=True)
        said.append(f"{source_words(source, translated=True)} ({band}): {detail_words(reason)}")
    return TurnView(
        index=turn.index,
        started_at=turn.started_at,
        finished_at=turn.finished_at,
        message=str(proposal.get("message") or "") if review is None else "",
        calls=calls,
        user_messages=_user_messages(proposal),
        problems=[
            _("call %(position)s (%(tool)s): %(error)s")
            % {"position": c.position, "tool": c.tool, "error": c.error or _("invalid arguments")}
            for c in calls
            if c.status == ToolCallStatus.INVALID
        ],
        conditions=conditions,
        outcome=decision.outcome if decision else "",
        outcome_label=decision.get_outcome_display() if decision else "",
        reasons=said,
        stop_reason=stop_reason_text(decision.stop_reason, translated=True) if decision else "",
        escalations=[_escalation_view(e) for e in turn.escalations.all()],
        review=review,
        guardian_model_version=decision.guardian_model_version if decision else "",
        question_set_version=decision.question_set_version if decision else "",
        bars=[
            {**r, "source": source_words(str(r.get("source")), translated=True)} for r in conditions
        ],
        held=any(isinstance(r, dict) and r.get("source") == "gate" for r in reasons),
        withheld=any(
            isinstance(r, dict)
            and r.get("source") == Condition.INTEGRITY.value
            and r.get("outcome") == "escalate"
            for r in reasons
        ),
        judged=[
            {**line, "label": source_words(line["condition"], translated=True)}
            for line in judge_lines(decision.answers if decision else None)
        ],
    )


def _call_view(call: ToolCall, registry, risk_answers: list) -> CallView:
    tool = registry.get(call.tool)
    raw = risk_answers[call.position] if call.position < len(risk_answers) else None
    likely = most_likely_risk(parse_answer(Condition.RISK, raw)) if raw is not None else None
    length = getattr(call, "result_length", None)
    head = getattr(call, "result_head", None)
    return CallView(
        position=call.position,
        tool=call.tool,
        intent=call.intent,
        arguments_json=pretty_json(call.arguments),
        risk_class=call.risk_class,
        declared_risk=tool.risk_class.value if tool else "",
        guardian_risk=likely.value if likely else "",
        status=call.status,
        status_label=call.get_status_display(),
        idempotency_key=call.idempotency_key or "",
        result=head,
        result_cut=max((length or 0) - len(head or ""), 0),
        error=call.error,
    )


def _escalation_view(escalation: Escalation) -> EscalationView:
    try:
        verdict = escalation.verdict
    except Escalation.verdict.RelatedObjectDoesNotExist:
        verdict = None
    return EscalationView(
        pk=escalation.pk,
        kind_label=escalation.get_kind_display(),
        status=escalation.status,
        status_label=escalation.get_status_display(),
        summary=escalation_summary_words(escalation.summary, escalation.reason),
        created_at=escalation.created_at,
        resolved_at=escalation.resolved_at,
        verdict=verdict.decision if verdict else "",
        verdict_label=verdict.get_decision_display() if verdict else "",
        verdict_reason=verdict.reason if verdict else "",
        verdict_answers=verdict_answer_words(
            verdict.answer,
            verdict.risk_labels,
            translated=True,
            # The decision form asks in the order the conditions triggered.
            asked=[
                str(t.get("source", ""))
                for t in (escalation.reason or {}).get("triggered", [])
                if isinstance(t, dict)
            ],
        )
        if verdict
        else [],
        reviewer=verdict.reviewer.get_username() if verdict else "",
        decided_at=verdict.created_at if verdict else None,
        verdict_edits=[
            edit["words"]
            for edit in approval_edits(getattr(escalation, "edited_approvals", None) or [])
            if verdict and edit["position"] in (verdict.approved_calls or [])
        ],
    )


def _review_view(proposal: dict, reasons: list, reply: object) -> ReviewView | None:
    if proposal.get("kind") != "review_step":
        return None
    review = next(
        (r.get("review") for r in reasons if isinstance(r, dict) and r.get("review")), None
    )
    review = review if isinstance(review, dict) else {}
    problem = review.get("parse_error") or review.get("code_error") or ""
    if review.get("refused"):
        problem = _("the model refused")
    return ReviewView(
        role=str(proposal.get("role", "")),
        round=proposal.get("round") or 0,
        step=REVIEW_STEPS.get(str(proposal.get("step", "")), str(proposal.get("step", ""))),
        verdict=VERDICTS.get(str(review.get("verdict") or ""), ""),
        reasons=[str(r) for r in review.get("reasons") or []],
        problem=str(problem),
        end_reason=review_end_words(str(review.get("end_reason") or ""), translated=True),
        reply=str(reply.get("text", "")) if isinstance(reply, dict) else "",
    )


# ---- the chart of each condition's probability across the shown turns ------------------------

CHART_WIDTH = 720
CHART_LEFT = 150  # room for the condition's name
CHART_RIGHT = 12
PANEL_HEIGHT = 44
PANEL_GAP = 14
CHART_TOP = 6


@dataclass(frozen=True)
class ChartPoint:
    x: str
    y: str
    title: str


@dataclass(frozen=True)
class ChartPanel:
    """One condition's row: its probabilities as a line, t* and the band t*±δ behind it.
    Numbers are strings for SVG attributes (the CSP allows no inline style)."""

    condition: str
    label: str
    label_y: str
    top: str
    bottom: str
    band_y: str | None
    band_height: str | None
    t_star_y: str | None
    t_star_text: str
    lines: list[str]  # polyline point lists; a turn without a probability breaks the line
    points: list[ChartPoint]
    missing: list[ChartPoint]  # turns where the answer was malformed or absent


@dataclass(frozen=True)
class ChartHeld:
    """A turn held at the gate: no probability was asked for, which the chart says."""

    x: str  # the stripe's left edge
    tick_x: str  # the turn's place on the x axis
    title: str
    index: int


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    left: int
    right: int
    inner: int  # the plotting width, right - left
    panel_height: int
    panels: list[ChartPanel]
    first_turn: int
    last_turn: int
    axis_y: str
    description: str
    ticks: list[tuple[str, int]] = field(default_factory=list)  # (x, turn index)
    # Turns held at the gate: a hatched stripe across the panels, so their gap is explained.
    held: list[ChartHeld] = field(default_factory=list)
    held_width: str = "0"
    plot_top: int = CHART_TOP
    plot_height: str = "0"  # from the first panel's top to the last one's bottom
    plot_bottom: str = "0"
    held_tick_end: str = "0"  # a held turn's tick: from the plot's bottom to above its label


def _n(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _unit(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return min(max(float(value), 0.0), 1.0)


def probability_chart(turns: list[TurnView]) -> Chart | None:
    """Each condition's probability across `turns` (any order), oldest left, with the turns
    held at the gate marked where they fall; None when no shown turn carries a guardian
    condition (a coder ⇄ reviewer run, a run not started)."""
    if not any(t.conditions for t in turns):
        return None
    ordered = sorted((t for t in turns if t.conditions or t.held), key=lambda t: t.index)
    names = [
        c for c in _CONDITIONS if any(r.get("source") == c for t in ordered for r in t.conditions)
    ]
    inner = CHART_WIDTH - CHART_LEFT - CHART_RIGHT
    span = max(len(ordered) - 1, 1)

    def x_of(position: int) -> float:
        if len(ordered) == 1:
            return CHART_LEFT + inner / 2
        return CHART_LEFT + inner * position / span

    panels = []
    for row, name in enumerate(names):
        top = CHART_TOP + row * (PANEL_HEIGHT + PANEL_GAP)

        def y_of(p: float, top: float = top) -> float:
            return top + (1 - p) * PANEL_HEIGHT

        lines, current, points, missing = [], [], [], []
        t_star = delta = None
        for position, turn in enumerate(ordered):
            if turn.held:  # marked once across every panel, not as a missing answer in each
                if current:
                    lines.append(" ".join(current))
                current = []
                continue
            reason = next((r for r in turn.conditions if r.get("source") == name), None)
            value = _unit(reason.get("value")) if reason else None
            if reason and t_star is None and _unit(reason.get("t_star")) is not None:
                t_star, delta = _unit(reason.get("t_star")), _unit(reason.get("delta")) or 0.0
            x = x_of(position)
            if value is None:
                if current:
                    lines.append(" ".join(current))
                current = []
                missing.append(
                    ChartPoint(
                        _n(x),
                        _n(top + PANEL_HEIGHT / 2),
                        _("turn %(index)s: no probability") % {"index": turn.index},
                    )
                )
                continue
            current.append(f"{_n(x)},{_n(y_of(value))}")
            band = reason.get("band", "")
            points.append(
                ChartPoint(
                    _n(x),
                    _n(y_of(value)),
                    _("turn %(index)s: p %(value)s (%(band)s)")
                    % {
                        "index": turn.index,
                        "value": f"{value:.2f}",
                        "band": band_words(band, translated=True),
                    },
                )
            )
        if current:
            lines.append(" ".join(current))
        band_y = band_height = t_star_y = None
        if t_star is not None:
            high, low = min(t_star + delta, 1.0), max(t_star - delta, 0.0)
            band_y, band_height = _n(y_of(high)), _n((high - low) * PANEL_HEIGHT)
            t_star_y = _n(y_of(t_star))
        panels.append(
            ChartPanel(
                condition=name,
                label=source_words(name, translated=True),
                label_y=_n(top + PANEL_HEIGHT / 2 + 4),
                top=_n(top),
                bottom=_n(top + PANEL_HEIGHT),
                band_y=band_y,
                band_height=band_height,
                t_star_y=t_star_y,
                t_star_text="" if t_star is None else f"t* {t_star:.2f} ± {delta:.2f}",
                lines=lines,
                points=points,
                missing=missing,
            )
        )
    height = CHART_TOP + len(names) * (PANEL_HEIGHT + PANEL_GAP) + 10
    plot_bottom = CHART_TOP + len(names) * (PANEL_HEIGHT + PANEL_GAP) - PANEL_GAP
    held_width = min(10.0, max(inner / max(len(ordered), 1) * 0.6, 3.0))
    held = [
        ChartHeld(
            # Inside the plot's frame, also for the first and the last turn.
            x=_n(min(max(x_of(i) - held_width / 2, CHART_LEFT), CHART_LEFT + inner - held_width)),
            tick_x=_n(x_of(i)),
            title=_("turn %(index)s: held at the gate, guardian not asked") % {"index": t.index},
            index=t.index,
        )
        for i, t in enumerate(ordered)
        if t.held
    ]
    step = max(1, len(ordered) // 10)
    # A held turn's index is always written under its stripe (in held), not among these.
    ticks = [(_n(x_of(i)), t.index) for i, t in enumerate(ordered) if i % step == 0 and not t.held]
    return Chart(
        width=CHART_WIDTH,
        height=height,
        left=CHART_LEFT,
        right=CHART_WIDTH - CHART_RIGHT,
        inner=inner,
        panel_height=PANEL_HEIGHT,
        panels=panels,
        first_turn=ordered[0].index,
        last_turn=ordered[-1].index,
        axis_y=_n(height - 4),
        description=(
            _(
                "Probability of each condition from turn %(first)s to turn %(last)s, against "
                "its threshold t* and the uncertain band t*±δ"
            )
            % {"first": ordered[0].index, "last": ordered[-1].index}
            + (
                ngettext(
                    "; %(count)d turn held at the gate, where the guardian was not asked",
                    "; %(count)d turns held at the gate, where the guardian was not asked",
                    len(held),
                )
                % {"count": len(held)}
                if held
                else ""
            )
        ),
        ticks=ticks,
        held=held,
        held_width=_n(held_width),
        plot_height=_n(len(names) * (PANEL_HEIGHT + PANEL_GAP) - PANEL_GAP),
        plot_bottom=_n(plot_bottom),
        held_tick_end=_n(plot_bottom + 8),
    )


# ---- the budget against each cap --------------------------------------------------------------


@dataclass(frozen=True)
class BudgetRow:
    label: str
    used: float
    used_text: str
    cap: float | None
    cap_text: str  # "no cap" when the run has none
    reached: bool


def budget_rows(run: Run, usage: dict) -> list[BudgetRow]:
    """Turns, tokens, cost and wall time spent (the latest decided turn's usage) against the
    run's caps; the turn cap is the engine's default when the run sets none."""
    budgets = run.budgets if isinstance(run.budgets, dict) else {}
    defaults = Budgets()
    rows = []
    for label, key, cap_key, unit in (
        (_("Turns"), "turns", "max_turns", ""),
        (_("Tokens"), "tokens", "max_tokens", ""),
        (_("Cost"), "cost", "max_cost", "$"),
        (_("Wall time"), "wall_seconds", "max_wall_seconds", "s"),
    ):
        used = usage.get(key) or 0
        cap = budgets.get(cap_key, getattr(defaults, cap_key))
        rows.append(
            BudgetRow(
                label=label,
                used=used,
                used_text=_amount(used, unit),
                cap=cap,
                cap_text=_("no cap") if cap is None else _amount(cap, unit),
                reached=cap is not None and used >= cap,
            )
        )
    return rows


def run_first_turn(*, run_id: int) -> Turn | None:
    """The run's first turn, once recorded. (A read for the run page's clock; it belongs with
    runs/selectors.py's reads.)"""
    return Turn.objects.filter(run_id=run_id, index=0).only("started_at").first()


def queue_wait_seconds(run: Run, first_turn: Turn | None) -> float | None:
    """The time from the run's creation until its first turn was recorded: the wait in the
    queue plus the actor's first proposal (the turn row is written once the actor has
    proposed, runs/turns.py); None before then. The wall-time budget counts from the run's
    creation (runs/turns.py passes run.created_at to the engine), so this is part of it."""
    if first_turn is None:
        return None
    return max((first_turn.started_at - run.created_at).total_seconds(), 0.0)


def seconds_text(value: float) -> str:
    return _amount(value, "s")


def _amount(value: float, unit: str) -> str:
    if unit == "$":
        return f"${value:.4f}".rstrip("0").rstrip(".") if value else "$0"
    if unit == "s":
        return f"{value:.1f} s"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _user_messages(proposal: dict) -> list[str]:
    """The texts of a proposal's user messages; an altered log's odd entries shown as text."""
    items = proposal.get("user_messages")
    if not isinstance(items, list):
        return []
    return [str(item.get("text", "")) if isinstance(item, dict) else str(item) for item in items]
