"""The reviewers' queue, read: open escalations filtered, paged, counted; who holds each."""

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.db import connection
from django.db.models import Count, F, Q, QuerySet
from django.db.models.fields.json import KeyTextTransform, KeyTransform
from django.db.models.fields.tuple_lookups import Tuple, TupleGreaterThan
from django.utils import timezone
from django.utils.translation import gettext as _

from escalations.models import (
    Approval,
    Escalation,
    EscalationEvent,
    EscalationEventKind,
    EscalationKind,
    EscalationStatus,
)
from guardian_core.engine.conditions import Condition


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
        problems.append(
            "kind: " + _("must be one of %(values)s") % {"values": ", ".join(EscalationKind.values)}
        )
        kind = ""
    condition = text("condition")
    if condition and condition not in QUEUE_CONDITIONS:
        problems.append(
            "condition: " + _("must be one of %(values)s") % {"values": ", ".join(QUEUE_CONDITIONS)}
        )
        condition = ""
    tool = text("tool")
    if tool and (len(tool) > 120 or "," in tool):
        problems.append("tool: " + _("a tool name of at most 120 characters, without commas"))
        tool = ""
    run = None
    if raw := text("run"):
        if raw.isascii() and raw.isdigit() and 0 < int(raw) < 2**63:
            run = int(raw)
        else:
            problems.append("run: " + _("must be a run number"))
    holder = text("holder")
    if holder not in QUEUE_HOLDERS:
        problems.append("holder: " + _("must be unclaimed or mine (or empty for everyone's)"))
        holder = ""
    sort = text("sort") or "urgent"
    if sort not in QUEUE_SORTS:
        problems.append(
            "sort: " + _("must be one of %(values)s") % {"values": ", ".join(QUEUE_SORTS)}
        )
        sort = "urgent"
    after = text("after")
    if after and _cursor_values(after, sort) is None:
        problems.append(
            "after: " + _("not a page of this order of the queue; start from the first page")
        )
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
        why = _(
            "you still held #%(opened)s, and Next gives back the item you hold before any "
            "other (decide or skip it to move on)"
        ) % {"opened": opened}
    else:
        holder = escalation_claim_holder(first, now=now)
        if holder is not None and holder.pk != reviewer.pk:
            why = _("#%(id)s is being reviewed by %(holder)s") % {
                "id": first.pk,
                "holder": holder.get_username(),
            }
        elif EscalationEvent.objects.filter(
            escalation_id=first.pk, actor=reviewer, kind=EscalationEventKind.SKIPPED
        ).exists():
            why = _("you skipped #%(id)s a moment ago") % {"id": first.pk}
        elif Approval.objects.filter(escalation_id=first.pk, reviewer=reviewer).exists():
            why = _("you approved #%(id)s: it waits for a second approver") % {"id": first.pk}
        else:
            why = _("#%(id)s was taken by another reviewer a moment ago") % {"id": first.pk}
    return _("Opened #%(opened)s, not #%(first)s at the top of the queue: %(why)s.") % {
        "opened": opened,
        "first": first.pk,
        "why": why,
    }


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
        # Of the config, only the MCP client's name: a session through the gateway says so.
        .annotate(
            mcp_client=KeyTextTransform(
                "name", KeyTransform("client", KeyTransform("mcp", F("run__config")))
            )
        )
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


def escalation_get(*, escalation_id: int) -> Escalation:
    """One escalation with what its API detail shows (run, turn, holder, verdict); raises
    Escalation.DoesNotExist."""
    return Escalation.objects.select_related(
        "run__policy_version", "turn__decision", "claimed_by", "verdict__reviewer"
    ).get(pk=escalation_id)
