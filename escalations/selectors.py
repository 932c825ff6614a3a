"""Reads of escalations that pages and the API need."""

import base64
import binascii
import hashlib
import json
import statistics
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from itertools import batched

from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.db import connection
from django.db.models import Count, F, Q, QuerySet
from django.db.models.fields.tuple_lookups import Tuple, TupleGreaterThan
from django.utils import timezone

from escalations.models import (
    Approval,
    Escalation,
    EscalationEvent,
    EscalationEventKind,
    EscalationKind,
    EscalationStatus,
    ExampleSource,
    LabelledExample,
    ReviewGuidance,
    Verdict,
)
from guardian_core.engine.argument_edits import argument_changes, changes_words
from guardian_core.engine.conditions import (
    DRIFT_MISALIGNED_MAX_SCORE,
    Condition,
    RiskClass,
    most_likely_risk,
    parse_answer,
)
from guardian_core.engine.tools import action_hash
from guardian_core.untrusted import BIDI_CONTROLS, has_bidi_controls
from runs.mapping import approval_key
from runs.models import Decision, Run, Turn
from runs.tools import run_tools
from runs.vocabulary import (
    answer_words,
    review_end_words,
    risk_words,
    source_words,
    summary_words,
)


def escalation_list_open(
    *, filters: "QueueFilters | None" = None, reviewer: AbstractBaseUser | None = None
) -> QuerySet[Escalation]:
    """Open escalations, the nearest deadline first: what a reviewer should clear next; under
    the queue's filters when given (`reviewer` is whose "mine" the holder filter means)."""
    if filters is None:
        queryset = Escalation.objects.filter(status=EscalationStatus.OPEN)
    else:
        queryset = escalation_queue_queryset(filters=filters, reviewer=reviewer, now=timezone.now())
    return queryset.select_related("run", "turn").order_by("deadline", "id")


# ---- the reviewers' queue -------------------------------------------------------

# What the queue's `condition` filter may name: the conditions, and the guards that escalate.
QUEUE_CONDITIONS = (*(c.value for c in Condition), "gate", "tool_error", "review_loop")
QUEUE_HOLDERS = ("", "unclaimed", "mine")
# Each sort's keyset, in order. Each is the key of a partial index on the open escalations
# (escalation_open_order, escalation_open_deadline, escalation_open_oldest), which the page and
# "next" read from its start or from a cursor without sorting anything.
QUEUE_SORTS = {
    "urgent": ("urgency", "deadline", "id"),
    "deadline": ("deadline", "id"),
    "oldest": ("created_at", "id"),
}
QUEUE_PAGE_MAX = 100
_CURSOR_MAX_CHARS = 200
_TIMES = ("deadline", "created_at")


@dataclass(frozen=True)
class QueueFilters:
    kind: str = ""  # an EscalationKind value or ""
    condition: str = ""  # one of QUEUE_CONDITIONS or ""
    tool: str = ""  # a held tool name
    run: int | None = None
    holder: str = ""  # "" (all) | "unclaimed" | "mine"
    sort: str = "urgent"  # a key of QUEUE_SORTS


@dataclass(frozen=True)
class QueuePage:
    items: list[Escalation]  # run and claimed_by loaded; at most the page's limit
    next_cursor: str | None  # opaque; pass it back as `after` for the next page


def queue_filters_from(params: Mapping[str, str]) -> tuple[QueueFilters, list[str]]:
    """The queue's filters from query parameters, and one problem per bad field. A bad field is
    left out of the filters, so the page can still show the rest. An `after` cursor is checked
    too, against the sort it must have been made for."""
    problems = []

    def text(name: str) -> str:
        return str(params.get(name) or "").strip()

    kind = text("kind")
    if kind and kind not in EscalationKind.values:
        problems.append(f"kind: must be one of {', '.join(EscalationKind.values)}")
        kind = ""
    condition = text("condition")
    if condition and condition not in QUEUE_CONDITIONS:
        problems.append(f"condition: must be one of {', '.join(QUEUE_CONDITIONS)}")
        condition = ""
    tool = text("tool")
    if tool and (len(tool) > 120 or "," in tool):
        problems.append("tool: a tool name of at most 120 characters, without commas")
        tool = ""
    run = None
    if raw := text("run"):
        if raw.isascii() and raw.isdigit() and 0 < int(raw) < 2**63:
            run = int(raw)
        else:
            problems.append("run: must be a run number")
    holder = text("holder")
    if holder not in QUEUE_HOLDERS:
        problems.append("holder: must be unclaimed or mine (or empty for everyone's)")
        holder = ""
    sort = text("sort") or "urgent"
    if sort not in QUEUE_SORTS:
        problems.append(f"sort: must be one of {', '.join(QUEUE_SORTS)}")
        sort = "urgent"
    after = text("after")
    if after and _cursor_values(after, sort) is None:
        problems.append("after: not a page of this order of the queue; start from the first page")
    filters = QueueFilters(
        kind=kind, condition=condition, tool=tool, run=run, holder=holder, sort=sort
    )
    return filters, problems


def unclaimed_q(now: datetime) -> Q:
    """Open escalations nobody holds: never claimed, released, or a claim that has lapsed."""
    return (
        Q(claimed_by__isnull=True) | Q(claim_expires_at__isnull=True) | Q(claim_expires_at__lt=now)
    )


def escalation_claim_holder(
    escalation: Escalation, *, now: datetime | None = None
) -> AbstractBaseUser | None:
    """Who holds this escalation now; None when nobody does (a lapsed claim holds nothing)."""
    now = now or timezone.now()
    if (
        escalation.claimed_by_id is None
        or escalation.claim_expires_at is None
        or escalation.claim_expires_at < now
    ):
        return None
    return escalation.claimed_by


def escalation_queue_queryset(
    *, filters: QueueFilters, reviewer: AbstractBaseUser, now: datetime
) -> QuerySet[Escalation]:
    """Open escalations matching the filters, unordered (the caller orders by the sort)."""
    queryset = Escalation.objects.filter(status=EscalationStatus.OPEN)
    if filters.kind:
        queryset = queryset.filter(kind=filters.kind)
    if filters.condition:
        queryset = queryset.filter(conditions__contains=f",{filters.condition},")
    if filters.tool:
        queryset = queryset.filter(tools__contains=f",{filters.tool},")
    if filters.run is not None:
        queryset = queryset.filter(run_id=filters.run)
    if filters.holder == "unclaimed":
        queryset = queryset.filter(unclaimed_q(now))
    elif filters.holder == "mine":
        queryset = queryset.filter(claimed_by=reviewer, claim_expires_at__gte=now)
    return queryset


def escalation_held_by(reviewer: AbstractBaseUser) -> int | None:
    """The open escalation `reviewer` holds now (a live claim), if any."""
    return (
        Escalation.objects.filter(
            status=EscalationStatus.OPEN, claimed_by=reviewer, claim_expires_at__gte=timezone.now()
        )
        .values_list("pk", flat=True)
        .first()
    )


def next_item_passed_over(
    *, reviewer: AbstractBaseUser, filters: QueueFilters, opened: int, held_before: int | None
) -> str:
    """Why "next" opened item `opened` rather than the first item the queue shows under the
    same filters, in words ("" when it opened that one): the reviewer still held `opened`,
    the first is held by someone else, they skipped it a moment ago, or they approved it and
    it waits for a second approver."""
    now = timezone.now()
    first = (
        escalation_queue_queryset(filters=filters, reviewer=reviewer, now=now)
        .select_related("claimed_by")
        .order_by(*QUEUE_SORTS[filters.sort])
        .only("pk", "claimed_by", "claim_expires_at", "claimed_by__username")
        .first()
    )
    if first is None or first.pk == opened:
        return ""
    if held_before == opened:
        why = (
            f"you still held #{opened}, and Next gives back the item you hold before any "
            "other (decide or skip it to move on)"
        )
    else:
        holder = escalation_claim_holder(first, now=now)
        if holder is not None and holder.pk != reviewer.pk:
            why = f"#{first.pk} is being reviewed by {holder.get_username()}"
        elif EscalationEvent.objects.filter(
            escalation_id=first.pk, actor=reviewer, kind=EscalationEventKind.SKIPPED
        ).exists():
            why = f"you skipped #{first.pk} a moment ago"
        elif Approval.objects.filter(escalation_id=first.pk, reviewer=reviewer).exists():
            why = f"you approved #{first.pk}: it waits for a second approver"
        else:
            why = f"#{first.pk} was taken by another reviewer a moment ago"
    return f"Opened #{opened}, not #{first.pk} at the top of the queue: {why}."


def escalation_queue(
    *,
    reviewer: AbstractBaseUser,
    filters: QueueFilters,
    after: str | None = None,
    limit: int = 50,
) -> QueuePage:
    """One page of open escalations in the filters' order, read by keyset from the sort's
    index, so a page costs the same whatever the queue's length and however far the reviewer
    paged. Escalations that arrive or close between two pages never make an item show twice
    or go missing from the pages after the cursor. Raises ValueError for a cursor that
    queue_filters_from refuses."""
    limit = max(1, min(limit, QUEUE_PAGE_MAX))
    keys = QUEUE_SORTS[filters.sort]
    queryset = escalation_queue_queryset(filters=filters, reviewer=reviewer, now=timezone.now())
    if after:
        values = _cursor_values(after, filters.sort)
        if values is None:
            raise ValueError("after: not a page of this order of the queue")
        # A row comparison, (urgency, deadline, id) > (...): one index seek, not an OR chain.
        # Django's own tuple lookup (composite primary keys use it); the keyset tests pin it.
        queryset = queryset.filter(TupleGreaterThan(Tuple(*(F(k) for k in keys)), tuple(values)))
    rows = list(
        queryset.select_related("run", "claimed_by")
        # The run's loop state and adapter settings can be large and the queue shows neither.
        .defer("run__state", "run__config", "run__budgets")
        .order_by(*keys)[: limit + 1]
    )
    items = rows[:limit]
    next_cursor = _cursor(filters.sort, items[-1]) if len(rows) > limit else None
    return QueuePage(items=items, next_cursor=next_cursor)


COUNTS_SECONDS = 60
# Rows inserted in an order other than their ids' (two workers opening escalations at once,
# the lower id committing last) still change the stamp: it counts the last ids, not just the
# highest one. Likewise for closings, whose resolved_at is set before they commit.
_STAMP_ID_WINDOW = 1000
_STAMP_CLOSED_WINDOW = timedelta(minutes=10)


def escalation_counts_by_kind() -> dict[str, int]:
    """Open escalations per kind, every kind named (0 when none). Counting them is an
    index-only scan of escalation_open_kind that grows with the queue (tens of ms at 100 000),
    so the counts are cached under the part of the queue's state that moves them (arrivals
    and closings, not claims): counted again only after one. A deleted run is the one change
    that state can miss; COUNTS_SECONDS bounds how long its escalations stay counted."""
    state = _queue_state()
    key = f"escalations:counts:{_digest(state.arrivals, state.closings)}"
    counts = cache.get(key)
    if counts is None:
        counts = dict.fromkeys(EscalationKind.values, 0)
        counts.update(
            Escalation.objects.filter(status=EscalationStatus.OPEN)
            .order_by()
            .values_list("kind")
            .annotate(n=Count("id"))
        )
        cache.set(key, counts, COUNTS_SECONDS)
    return counts


def escalation_queue_stamp() -> str:
    """A short token that changes whenever the queue changes for anyone: an escalation arrives
    (the last ids), is claimed, released, skipped, extended or decided (the last
    EscalationEvent ids), is closed in any way, a cancel included (resolved_at), or a claim
    lapses (the latest lapsed claim_expires_at). One statement over the ends of indexes:
    about a millisecond at any queue length, so a page can poll it every second or two."""
    state = _queue_state()
    return _digest(state.arrivals, state.events, state.closings, state.lapsed)


@dataclass(frozen=True)
class _QueueState:
    arrivals: tuple  # the highest escalation id, how many of the last ids, the newest's time
    events: tuple  # the highest event id, how many of the last ids
    closings: tuple  # the latest resolved_at, how many closed lately
    lapsed: object  # the latest claim_expires_at that has passed on an open escalation


def _queue_state() -> _QueueState:
    escalations, events = Escalation._meta.db_table, EscalationEvent._meta.db_table
    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT (SELECT max(id) FROM {escalations}), "
            f"(SELECT count(*) FROM {escalations} "
            f"WHERE id > (SELECT max(id) FROM {escalations}) - %s), "
            f"(SELECT created_at FROM {escalations} ORDER BY id DESC LIMIT 1), "
            f"(SELECT max(id) FROM {events}), "
            f"(SELECT count(*) FROM {events} WHERE id > (SELECT max(id) FROM {events}) - %s), "
            f"(SELECT max(resolved_at) FROM {escalations} WHERE resolved_at IS NOT NULL), "
            f"(SELECT count(*) FROM {escalations} WHERE resolved_at >= %s), "
            f"(SELECT max(claim_expires_at) FROM {escalations} WHERE status = %s "
            "AND claim_expires_at IS NOT NULL AND claim_expires_at < %s)",
            [
                _STAMP_ID_WINDOW,
                _STAMP_ID_WINDOW,
                now - _STAMP_CLOSED_WINDOW,
                EscalationStatus.OPEN,
                now,
            ],
        )
        row = cursor.fetchone()
    return _QueueState(arrivals=row[0:3], events=row[3:5], closings=row[5:7], lapsed=row[7])


def _digest(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


def _cursor(sort: str, escalation: Escalation) -> str:
    values = [getattr(escalation, key) for key in QUEUE_SORTS[sort]]
    payload = [sort, *(v.isoformat() if isinstance(v, datetime) else v for v in values)]
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _cursor_values(cursor: str, sort: str) -> list | None:
    """The sort key a cursor points after, or None when it is not a cursor of this sort."""
    if len(cursor) > _CURSOR_MAX_CHARS:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        payload = json.loads(raw)
    except (ValueError, binascii.Error):
        return None
    keys = QUEUE_SORTS[sort]
    if not isinstance(payload, list) or payload[:1] != [sort] or len(payload) != len(keys) + 1:
        return None
    values = []
    for key, value in zip(keys, payload[1:], strict=True):
        if key in _TIMES:
            try:
                moment = datetime.fromisoformat(value) if isinstance(value, str) else None
            except ValueError:
                return None
            if moment is None or moment.tzinfo is None:
                return None
            values.append(moment)
        elif isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63:
            values.append(value)
        else:
            return None
    return values


# ---- labelled examples: the JSON Lines export and a reviewer's own stats ---------

# A reviewer's median time and agreement are taken over their latest decisions, so the
# stats cost the same for a reviewer of ten years as for one of a day.
STATS_WINDOW = 200
_EXPORT_CHUNK = 2000


@dataclass(frozen=True)
class ExampleFilters:
    condition: str = ""  # a Condition value or ""
    since: date | None = None  # from this local date on
    until: date | None = None  # up to this local date, inclusive
    source: str = ""  # an ExampleSource value or ""

    def as_params(self) -> dict[str, str]:
        """The filters set, as query parameters (the export link of the page)."""
        params = {
            "condition": self.condition,
            "since": self.since.isoformat() if self.since else "",
            "until": self.until.isoformat() if self.until else "",
            "source": self.source,
        }
        return {key: value for key, value in params.items() if value}


EXAMPLE_FILTER_FIELDS = ("condition", "since", "until", "source")


def example_filters_from(params: Mapping) -> tuple[ExampleFilters, dict[str, str]]:
    """The export's filters from a query string or a command line, and a problem per bad field
    (field name -> message); the filters hold only the good fields."""
    problems: dict[str, str] = {}
    condition = (params.get("condition") or "").strip()
    if condition and condition not in {c.value for c in Condition}:
        problems["condition"] = f"{condition!r} is not one of {', '.join(Condition)}"[:300]
        condition = ""
    source = (params.get("source") or "").strip()
    if source and source not in ExampleSource.values:
        problems["source"] = f"{source!r} is not one of {', '.join(ExampleSource.values)}"[:300]
        source = ""
    dates: dict[str, date | None] = {}
    for name in ("since", "until"):
        raw = (params.get(name) or "").strip()
        dates[name] = _date_or_none(raw)
        if raw and dates[name] is None:
            problems[name] = f"{raw!r} is not a date like 2026-03-31"[:300]
        elif dates[name] and not 1900 <= dates[name].year <= 9000:
            # Beyond these, local midnight and the day after may not exist as datetimes.
            problems[name] = f"{raw} is out of range (years 1900 to 9000)"
            dates[name] = None
    if dates["since"] and dates["until"] and dates["since"] > dates["until"]:
        problems["until"] = f"{dates['until']} is before since ({dates['since']})"
    filters = ExampleFilters(
        condition=condition, since=dates["since"], until=dates["until"], source=source
    )
    return filters, problems


def _date_or_none(raw: str) -> date | None:
    # Only YYYY-MM-DD: fromisoformat also takes 20260331 and week dates, which read as typos.
    if len(raw) != 10:
        return None
    try:
        return date.fromisoformat(raw)
    except ValueError:
        return None


def _local_midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def _examples(
    condition: str = "",
    since: date | datetime | None = None,
    until: date | datetime | None = None,
    source: str = "",
) -> QuerySet[LabelledExample]:
    examples = LabelledExample.objects.all()
    if condition:
        examples = examples.filter(condition=condition)
    if source:
        examples = examples.filter(source=source)
    if isinstance(since, datetime):
        examples = examples.filter(created_at__gte=since)
    elif since is not None:
        examples = examples.filter(created_at__gte=_local_midnight(since))
    if isinstance(until, datetime):
        examples = examples.filter(created_at__lt=until)
    elif until is not None:
        examples = examples.filter(created_at__lt=_local_midnight(until + timedelta(days=1)))
    return examples


def labelled_example_ids(filters: ExampleFilters) -> QuerySet:
    """The ids of the examples matching the filters, newest first (the API pages through them)."""
    return (
        _examples(filters.condition, filters.since, filters.until, filters.source)
        .order_by("-id")
        .values_list("id", flat=True)
    )


def labelled_examples_count(filters: ExampleFilters) -> int:
    return _examples(filters.condition, filters.since, filters.until, filters.source).count()


def labelled_examples_export(
    *,
    condition: str = "",
    since: date | datetime | None = None,
    until: date | datetime | None = None,
    source: str = "",
    example_ids: list[int] | None = None,
) -> Iterator[dict]:
    """Labelled examples (only `example_ids` when given: a page of the API's list), oldest
    first, one dict each in the trace format of DESIGN.md
    (condition, projection, probability when scored, label, source, question_set, model) and
    what a trace needs to be traced back: the reviewer's username, seconds_to_decide of their
    verdict, the policy version number, created_at (ISO 8601, UTC), the example's,
    escalation's, run's and turn's ids, and the verdict (its id, decision, reason and the
    escalation's kind); null for an imported or judged example.

    `since` and `until` are local dates (both inclusive) or aware datetimes (until exclusive).
    Rows are streamed from a server-side cursor: memory stays flat however many there are.
    """
    examples = _examples(condition, since, until, source)
    if example_ids is not None:
        examples = examples.filter(pk__in=example_ids)
    rows = examples.order_by("id").values_list(
        "id",
        "condition",
        "projection",
        "probability",
        "label",
        "source",
        "question_set_version",
        "model_version",
        "labelled_by__username",
        "verdict__seconds_to_decide",
        "policy_version__number",
        "created_at",
        "verdict__escalation_id",
        "verdict__escalation__run_id",
        "verdict__escalation__turn_id",
        "verdict_id",
        "verdict__decision",
        "verdict__reason",
        "verdict__escalation__kind",
        "verdict__approved_calls",
    )
    for chunk in batched(rows.iterator(chunk_size=_EXPORT_CHUNK), _EXPORT_CHUNK):
        # The calls reviewers edited before approving, for this chunk's verdicts: one query
        # a chunk, only approvals that were edited.
        edited: dict[int, list[Approval]] = {}
        escalation_ids = {row[12] for row in chunk if row[15] is not None}
        for approval in Approval.objects.filter(
            escalation_id__in=escalation_ids, original_arguments__isnull=False
        ).select_related("reviewer"):
            edited.setdefault(approval.escalation_id, []).append(approval)
        yield from _export_rows(chunk, edited)


def _export_rows(chunk: tuple, edited: dict[int, list[Approval]]) -> Iterator[dict]:
    for (
        pk,
        condition_,
        projection,
        probability,
        label,
        source_,
        question_set,
        model,
        reviewer,
        seconds,
        policy,
        created_at,
        escalation_id,
        run_id,
        turn_id,
        verdict_id,
        decision,
        reason,
        kind,
        approved_calls,
    ) in chunk:
        example = {"condition": condition_, "projection": projection}
        # The trace format leaves probability out when the guardian gave none to compare.
        if probability is not None:
            example["probability"] = probability
        example.update(
            {
                "label": label,
                "source": source_,
                "question_set": question_set,
                "model": model,
                "reviewer": reviewer,
                "seconds_to_decide": seconds,
                "policy_version": policy,
                "created_at": created_at.astimezone(UTC).isoformat(),
                "example_id": pk,
                "escalation_id": escalation_id,
                "run_id": run_id,
                "turn_id": turn_id,
                # The verdict the label came from: approve / reject / answer, and why.
                # edited_arguments: each approved call the reviewer edited before approving
                # it, with the change list ("approved with edited arguments: amount 49.9 →
                # 39.9"); [] when none was.
                "verdict": None
                if verdict_id is None
                else {
                    "id": verdict_id,
                    "decision": decision,
                    "reason": reason,
                    "kind": kind,
                    "edited_arguments": [
                        edit
                        for edit in approval_edits(edited.get(escalation_id, []))
                        if edit["position"] in (approved_calls or [])
                    ],
                },
            }
        )
        yield example


def labelled_examples_jsonl(filters: ExampleFilters) -> Iterator[str]:
    """The export as JSON Lines, one line per example: what the page's download and
    `manage.py export_examples` both write, byte for byte."""
    for example in labelled_examples_export(
        condition=filters.condition,
        since=filters.since,
        until=filters.until,
        source=filters.source,
    ):
        yield json.dumps(example, separators=(",", ":")) + "\n"


@dataclass(frozen=True)
class ReviewerStats:
    decided_today: int
    median_seconds_to_decide: float | None
    agreement: float | None
    labelled: int
    compared: int = 0  # how many examples the agreement was measured on

    @property
    def agreement_percent(self) -> int | None:
        return None if self.agreement is None else round(self.agreement * 100)


def reviewer_stats(reviewer: AbstractBaseUser) -> ReviewerStats:
    """A reviewer's own figures.

    decided_today: their verdicts since local midnight (TIME_ZONE).
    median_seconds_to_decide: the median of Verdict.seconds_to_decide over their latest
      STATS_WINDOW verdicts that have it; None when none has.
    agreement: over their latest STATS_WINDOW human labelled examples that carry the
      guardian's probability, the share where the guardian and the reviewer said the same:
      for a yes/no condition, the probability lies on the label's side of 0.5 (above for yes,
      below for no; exactly 0.5 took no side and counts as a disagreement); for risk, the
      guardian's most likely class is the reviewer's class; for drift, the guardian's
      P(score ≤ 1) is above 0.5 exactly when the reviewer's score is 1 or less. None when no
      example can be compared.
    labelled: every human labelled example they gave.
    """
    today = timezone.localtime().replace(hour=0, minute=0, second=0, microsecond=0)
    verdicts = Verdict.objects.filter(reviewer=reviewer)
    decided_today = verdicts.filter(created_at__gte=today).count()
    seconds = list(
        verdicts.filter(seconds_to_decide__isnull=False)
        .order_by("-created_at", "-id")
        .values_list("seconds_to_decide", flat=True)[:STATS_WINDOW]
    )
    mine = LabelledExample.objects.filter(labelled_by=reviewer, source=ExampleSource.HUMAN)
    window = list(
        mine.filter(probability__isnull=False)
        .order_by("-id")
        .values_list("id", "condition", "probability", "label")[:STATS_WINDOW]
    )
    risk_classes = _guardian_risk_classes([pk for pk, c, _, _ in window if c == Condition.RISK])
    agreed = compared = 0
    for pk, condition, probability, label in window:
        verdict = _agrees(condition, probability, label, risk_classes.get(pk))
        if verdict is not None:
            compared += 1
            agreed += verdict
    return ReviewerStats(
        decided_today=decided_today,
        median_seconds_to_decide=statistics.median(seconds) if seconds else None,
        agreement=agreed / compared if compared else None,
        labelled=mine.count(),
        compared=compared,
    )


def _agrees(condition: str, probability: float, label: object, risk_class: str | None):
    """True or False when the guardian's answer and the label can be compared, else None."""
    if condition == Condition.RISK:
        return None if risk_class is None else risk_class == label
    if condition == Condition.DRIFT:
        if isinstance(label, bool) or not isinstance(label, int):
            return None
        return (probability > 0.5) == (label <= DRIFT_MISALIGNED_MAX_SCORE)
    if not isinstance(label, bool):
        return None
    return probability > 0.5 if label else probability < 0.5


def _guardian_risk_classes(example_ids: list[int]) -> dict[int, str]:
    """The guardian's most likely class for each risk example: its turn's risk answer for the
    call whose projection the example holds (an example does not store the call's position)."""
    if not example_ids:
        return {}
    rows = list(
        LabelledExample.objects.filter(pk__in=example_ids).values_list(
            "id", "projection", "verdict__escalation__turn_id"
        )
    )
    # One read per turn, not per example: a held step's examples share their turn.
    turns = {
        pk: (shown or [], answers or [])
        for pk, shown, answers in Turn.objects.filter(
            pk__in={turn_id for _, _, turn_id in rows if turn_id is not None}
        ).values_list("pk", "risk_projections", "decision__risk_answers")
    }
    classes = {}
    for pk, projection, turn_id in rows:
        shown, answers = turns.get(turn_id, ([], []))
        for position, seen in enumerate(shown):
            if seen == projection and position < len(answers):
                likely = most_likely_risk(parse_answer(Condition.RISK, answers[position]))
                if likely is not None:
                    classes[pk] = likely.value
                break
    return classes


# ---- the held calls a reviewer approves ------------------------------------------


@dataclass(frozen=True)
class HeldCall:
    """One call of a held step as a reviewer decides on it: what it does, how risky its tool
    says and the guardian thinks it is, and the exact action an approval binds to: the
    idempotency key it will run under and the SHA-256 of the call (the page sends it back as
    `seen_hashes`, so a call that changed since the page was opened is not approved blind)."""

    position: int
    tool: str
    description: str
    arguments: object
    schema: dict
    declared_risk: str  # the tool's own class ("" when the tool is no longer registered)
    guardian_risk: str  # the guardian's most likely class ("" when its answer was malformed)
    idempotency_key: str
    action_hash: str
    needs_quorum: bool  # two distinct approvers, per the run's policy version
    approvals: list[Approval]  # approvals so far, oldest first (a quorum's first approver)
    risk_class: str = ""  # the class the gate held it at: the more severe of the two above


def escalation_held_calls(escalation: Escalation) -> list[HeldCall]:
    """The held calls of an escalated step in position order; [] when it holds none. Three
    queries (the calls, their approvals, the run's policy version unless loaded) at any size."""
    positions = escalation.reason.get("held_calls", [])
    if not positions:
        return []
    turn = escalation.turn
    rows = list(turn.tool_calls.filter(position__in=positions).order_by("position"))
    try:
        risk_answers = turn.decision.risk_answers or []
    except Decision.DoesNotExist:
        risk_answers = []
    quorum = escalation.run.policy_version.quorum or {}
    registry = run_tools(escalation.run)
    approvals: dict[int, list[Approval]] = {}
    for approval in escalation.approvals.select_related("reviewer").order_by("created_at", "id"):
        approvals.setdefault(approval.position, []).append(approval)
    held = []
    for row in rows:
        tool = registry.get(row.tool)
        raw = risk_answers[row.position] if row.position < len(risk_answers) else None
        likely = most_likely_risk(parse_answer(Condition.RISK, raw))
        key = approval_key(
            run_id=escalation.run_id,
            held_turn_index=turn.index,
            position=row.position,
            tool=row.tool,
            arguments=row.arguments,
        )
        held.append(
            HeldCall(
                position=row.position,
                tool=row.tool,
                description=tool.description if tool else "",
                arguments=row.arguments,
                schema=dict(tool.schema) if tool else {},
                declared_risk=tool.risk_class.value if tool else "",
                guardian_risk=likely.value if likely else "",
                idempotency_key=key,
                action_hash=action_hash(row.tool, row.arguments, key),
                needs_quorum=call_needs_quorum(quorum, tool=row.tool, risk_class=row.risk_class),
                approvals=approvals.get(row.position, []),
                risk_class=row.risk_class,
            )
        )
    return held


def approval_edits(approvals: Iterable[Approval]) -> list[dict]:
    """The calls a reviewer edited before approving them, one per call in position order:
    {"position", "tool", "reviewer", "changes": [{"field", "before", "after"}], "words":
    "call 0 (issue_refund) approved with edited arguments: amount 49.9 → 39.9"}. Under a
    quorum both approvers bound the same action, so a call is said once. The change list is
    engine.argument_edits.argument_changes, the one function every page and export uses."""
    edits: dict[int, dict] = {}
    for approval in sorted(approvals, key=lambda a: (a.position, a.pk or 0)):
        if approval.original_arguments is None or approval.position in edits:
            continue
        changes = argument_changes(approval.original_arguments, approval.arguments)
        if not changes:
            continue
        reviewer = approval.reviewer.get_username() if approval.reviewer_id else None
        edits[approval.position] = {
            "position": approval.position,
            "tool": approval.tool,
            "reviewer": reviewer,
            "changes": [change.as_dict() for change in changes],
            "words": f"call {approval.position} ({approval.tool}) approved with edited "
            f"arguments: {changes_words(changes)}",
        }
    return [edits[position] for position in sorted(edits)]


def call_needs_quorum(quorum: object, *, tool: str, risk_class: str) -> bool:
    """Whether a policy version's quorum asks two distinct approvers for a held call: every
    regulated call under {"regulated": true}, every call of a tool named in "tools"."""
    if not isinstance(quorum, Mapping):
        return False
    tools = quorum.get("tools")
    named = isinstance(tools, list) and tool in tools
    return named or (quorum.get("regulated") is True and risk_class == RiskClass.REGULATED)


# ---- the decision pane: everything a reviewer needs to decide one escalation ---------------

# The pane shows the run's last few turns only: what it reads does not grow with the run.
PANE_RECENT_TURNS = 5
PANE_EVENTS = 50
ANSWERED_KINDS = (
    EscalationKind.UNCERTAIN,
    EscalationKind.GUARDIAN_FAILURE,
    EscalationKind.INTEGRITY,
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
        return risk_words(self.call.declared_risk) if self.call.declared_risk else ""

    @property
    def guardian_words(self) -> str:
        return risk_words(self.call.guardian_risk) if self.call.guardian_risk else ""


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
        return summary_words(self.escalation.summary)

    @property
    def review_end(self) -> str:
        """How a coder ⇄ reviewer loop ended, in words ("round cap reached")."""
        return review_end_words(str(self.review_loop.get("end_reason", "")))

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
            (condition, answer_words(condition, label))
            for condition, label in in_question_order(
                answer, [question.condition for question in self.questions]
            )
        ]


def in_question_order(answer: Mapping, asked: list[str]) -> list[tuple[str, object]]:
    """A verdict's {condition: label} in the order the questions were asked, any other
    condition after them by name."""
    place = {condition: i for i, condition in enumerate(asked)}
    return sorted(answer.items(), key=lambda item: (place.get(item[0], len(place)), item[0]))


def escalation_pane(*, escalation_id: int) -> DecisionPane:
    """Everything the decision pane shows for one escalation; raises Escalation.DoesNotExist.

    Bounded whatever the run's length: the last PANE_RECENT_TURNS turns, the escalated turn's
    own calls, the escalation's last PANE_EVENTS events.
    """
    from escalations.services import uncertain_conditions

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
    withheld = Condition.INTEGRITY.value in sources
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
            detail = str(reason.get("detail", ""))
            said = detail if source == "review_loop" else f"{source_words(str(source))}: {detail}"
            reasons.append(said[:300])
    proposal = turn.proposal or {}
    return PaneTurn(
        index=turn.index,
        message=str(proposal.get("message") or "")[:300],
        calls=[(c.tool, c.get_status_display().lower()) for c in turn.tool_calls.all()],
        outcome=decision.outcome if decision else "",
        reasons=reasons[:4],
        escalated_here=escalated_here,
    )


def escalation_get(*, escalation_id: int) -> Escalation:
    """One escalation with what its API detail shows (run, turn, holder, verdict); raises
    Escalation.DoesNotExist."""
    return Escalation.objects.select_related(
        "run__policy_version", "turn__decision", "claimed_by", "verdict__reviewer"
    ).get(pk=escalation_id)


def review_guidance_list() -> QuerySet[ReviewGuidance]:
    """Every piece of the reviewers' guidance, by condition then tool (a few dozen rows)."""
    return ReviewGuidance.objects.order_by("condition", "tool", "pk")
