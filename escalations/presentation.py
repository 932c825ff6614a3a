"""How escalations read on the pages: countdowns, ages, the probability bar's geometry, and the
queue's rows, each formatted once in Python (the queue renders fifty rows on every poll that
finds a change, and the template language is slow at arithmetic and formatting)."""

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser
from django.urls import reverse
from django.utils import dateformat, timezone
from django.utils.formats import number_format
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext, pgettext_lazy

from escalations.models import AUDIT_OUTCOME, Escalation, Verdict
from escalations.queue import escalation_claim_holder
from runs.vocabulary import SOURCES, band_words, escalation_summary_words, source_words

# The bar's drawing width in SVG user units.
BAR_WIDTH = 100
# A row shows at most this many of the reasons that triggered (the decision pane shows all).
ROW_REASONS = 3


def span(seconds: float) -> str:
    """A duration as a person says it: "under a minute", "23 min", "2 h 5 min", "3 d 4 h"."""
    minutes = int(abs(seconds) // 60)
    if minutes < 1:
        return _("under a minute")
    if minutes < 60:
        return _("%(minutes)d min") % {"minutes": minutes}
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        if minutes:
            return _("%(hours)d h %(minutes)d min") % {"hours": hours, "minutes": minutes}
        return _("%(hours)d h") % {"hours": hours}
    days, hours = divmod(hours, 24)
    # Translators: "d" is the abbreviation of days (French: "j").
    if hours:
        return _("%(days)d d %(hours)d h") % {"days": days, "hours": hours}
    return _("%(days)d d") % {"days": days}


def countdown(moment: datetime, now: datetime) -> str:
    """ "in 23 min" before `moment`, "overdue by 5 min" after it."""
    seconds = (moment - now).total_seconds()
    if seconds >= 0:
        return _("in %(span)s") % {"span": span(seconds)}
    return _("overdue by %(span)s") % {"span": span(seconds)}


def _truncated(text: str, limit: int) -> str:
    # truncatechars without its lazy-translation machinery, which costs more than the row.
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def _unit(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return min(max(float(value), 0.0), 1.0)


def _number(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".") if value else "0"


@dataclass(frozen=True)
class Bar:
    """One triggered reason drawn as a bar: the guardian's probability against t*, with the
    uncertain band t*±δ. Geometry is in SVG user units of a BAR_WIDTH-wide track, as strings
    for SVG attributes (the CSP allows no inline style)."""

    source: str  # the code ("integrity"), kept for the log's readers
    band: str
    value: str | None  # "0.42", or None when the answer carried no probability
    t_star: str | None
    delta: str | None
    value_x: str | None = None
    band_x: str | None = None
    band_width: str | None = None
    t_star_x: str | None = None
    width: int = BAR_WIDTH

    @property
    def words(self) -> str:
        """The source as the run page says it ("Injected instructions"). The run page hands
        over sources it has already worded, which stay as they are."""
        worded = _WORDED | {_(words) for words in _WORDED}  # in English or already translated
        return self.source if self.source in worded else source_words(self.source, translated=True)

    @property
    def label(self) -> str:
        said = _("no probability") if self.value is None else f"p {_shown(self.value)}"
        if self.t_star is not None:
            said = _("%(said)s against t* %(t_star)s ± %(delta)s") % {
                "said": said,
                "t_star": _shown(self.t_star),
                "delta": _shown(self.delta),
            }
        # The marker's colour says "fired"; a screen reader hears it.
        return f"{said}, {band_words(self.band, translated=True)}" if self.band else said

    @property
    def band_word(self) -> str:
        """The band in words, shown next to the bar: its marker's colour is never the only
        thing that says "fired" (issue 28); empty when the reason has no band."""
        return band_words(self.band, translated=True) if self.band else ""

    @property
    def text(self) -> str:
        said = _("no answer") if self.value is None else f"p {_shown(self.value)}"
        if self.t_star is not None:
            said += f" · t* {_shown(self.t_star)}±{_shown(self.delta)}"
        return said


def _shown(figure: str | None) -> str:
    # Geometry keeps "0.42" for SVG; what people read is in their notation (0,42).
    return "" if figure is None else number_format(float(figure), 2)


_WORDED = frozenset(SOURCES.values())


def probability_bar(reason: dict) -> Bar:
    value = _unit(reason.get("value"))
    t_star = _unit(reason.get("t_star"))
    delta = _unit(reason.get("delta")) or 0.0
    geometry = {}
    if value is not None:
        # A marker 2 units wide, kept inside the track at 0 and 1.
        geometry["value_x"] = _number(min(max(value * BAR_WIDTH - 1, 0), BAR_WIDTH - 2))
    if t_star is not None:
        low = max(t_star - delta, 0.0) * BAR_WIDTH
        high = min(t_star + delta, 1.0) * BAR_WIDTH
        geometry["band_x"] = _number(low)
        geometry["band_width"] = _number(max(high - low, 0.0))
        geometry["t_star_x"] = _number(t_star * BAR_WIDTH)
    return Bar(
        source=str(reason.get("source", "")),
        band=str(reason.get("band", "")),
        value=None if value is None else f"{value:.2f}",
        t_star=None if t_star is None else f"{t_star:.2f}",
        delta=None if t_star is None else f"{delta:.2f}",
        **geometry,
    )


@dataclass(frozen=True)
class QueueRow:
    """What one row of the queue shows. Untrusted text (goal, summary, tool names, user
    names) stays plain str here: the template escapes it and isolates it in <bdi>."""

    pk: int
    kind: str
    kind_label: str
    url: str
    run_id: int
    goal: str
    mcp_client: str  # the MCP client's name (as it named itself) for a gateway session, or ""
    summary: str
    bars: list[Bar]
    more_reasons: int  # triggered reasons beyond the bars shown (the pane shows every one)
    tools: list[str]
    age: str
    countdown: str
    deadline_iso: str
    deadline_text: str
    holder: str  # the holder's user name, "" when unclaimed
    held_by_viewer: bool
    since_iso: str
    since_text: str


def queue_rows(
    items: list[Escalation], *, viewer: AbstractBaseUser, now: datetime | None = None
) -> list[QueueRow]:
    now = now or timezone.now()
    rows = []
    for escalation in items:
        holder = escalation_claim_holder(escalation, now=now)
        deadline = timezone.localtime(escalation.deadline)
        since = timezone.localtime(escalation.claimed_at) if holder is not None else None
        triggered = escalation.reason.get("triggered", []) if escalation.reason else []
        rows.append(
            QueueRow(
                pk=escalation.pk,
                kind=escalation.kind,
                kind_label=escalation.get_kind_display(),
                url=reverse("escalations:detail", args=[escalation.pk]),
                run_id=escalation.run_id,
                goal=_truncated(escalation.run.goal, 90),
                mcp_client=_truncated(getattr(escalation, "mcp_client", None) or "", 60),
                # Stored as written (older rows begin with a code); read in today's words.
                summary=_truncated(
                    escalation_summary_words(escalation.summary, escalation.reason), 160
                ),
                bars=[probability_bar(r) for r in triggered[:ROW_REASONS] if isinstance(r, dict)],
                more_reasons=max(0, len(triggered) - ROW_REASONS),
                tools=[name for name in escalation.tools.split(",") if name],
                age=span((now - escalation.created_at).total_seconds()),
                countdown=countdown(escalation.deadline, now),
                deadline_iso=deadline.isoformat(),
                # "Fri 4 Dec 19:20", in the reader's language.
                deadline_text=dateformat.format(deadline, "D j M H:i"),
                holder=holder.get_username() if holder is not None else "",
                held_by_viewer=holder is not None and holder.pk == viewer.pk,
                since_iso=since.isoformat() if since else "",
                since_text=f"{since:%H:%M}" if since else "",
            )
        )
    return rows


# What a run does after a bulk verdict, as the bulk report says it.
RUN_NEXT = {
    "continue": gettext_lazy("its run goes on with its next turn"),
    "replan": gettext_lazy("its run replans from its goal"),
    "stop_success": gettext_lazy("its run stops: succeeded"),
    "stop_failure": gettext_lazy("its run stops: failed"),
    "stop_cancelled": gettext_lazy("its run stops: cancelled"),
    AUDIT_OUTCOME: gettext_lazy("its run is not changed (an audit sample)"),
}
BULK_DONE = {
    "approve": pgettext_lazy("an escalation in a bulk decision", "approved"),
    "reject": pgettext_lazy("an escalation in a bulk decision", "rejected"),
}


@dataclass(frozen=True)
class BulkLine:
    """One item's outcome in the report of a bulk decision: "decided", "waiting" (a first
    approval; a second approver is needed) or "refused" (nothing was decided, and why)."""

    pk: int
    url: str
    state: str
    outcome: str
    detail: str

    @property
    def text(self) -> str:
        return f"#{self.pk} {self.outcome}" + (f" — {self.detail}" if self.detail else "")


def bulk_lines(results: list[tuple[int, Verdict | None, str]]) -> list[BulkLine]:
    """The report of escalation_resolve_bulk's (id, verdict or None, problem) triples."""
    lines = []
    for pk, verdict, problem in results:
        url = reverse("escalations:detail", args=[pk])
        if problem:
            # The number leads the line already; the service's "escalation 12: " would repeat it.
            detail = problem.removeprefix(f"escalation {pk}: ")
            lines.append(BulkLine(pk, url, "refused", _("not decided"), detail))
        elif verdict is None:
            lines.append(
                BulkLine(
                    pk, url, "waiting", _("approval recorded"), _("waits for a second approver")
                )
            )
        else:
            detail = str(RUN_NEXT.get(verdict.resulting_outcome, ""))
            lines.append(BulkLine(pk, url, "decided", str(BULK_DONE[verdict.decision]), detail))
    return lines


def bulk_summary(lines: list[BulkLine], decision: str) -> str:
    """ "2 approved · 1 not decided": how many items came out each way."""
    said = {
        "decided": {
            "approve": lambda n: ngettext("%(count)d approved", "%(count)d approved", n),
            "reject": lambda n: ngettext("%(count)d rejected", "%(count)d rejected", n),
        }.get(decision, lambda n: ngettext("%(count)d decided", "%(count)d decided", n)),
        "waiting": lambda n: ngettext(
            "%(count)d waiting for a second approver",
            "%(count)d waiting for a second approver",
            n,
        ),
        "refused": lambda n: ngettext("%(count)d not decided", "%(count)d not decided", n),
    }
    counts = {state: sum(line.state == state for line in lines) for state in said}
    return " · ".join(said[state](n) % {"count": n} for state, n in counts.items() if n)
