"""Reads of runs that pages, the API and commands need."""

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import date, datetime, time, timedelta

from django.db.models import Count, Exists, F, OuterRef, Prefetch, QuerySet, Subquery, Value
from django.db.models.fields.json import KeyTransform
from django.db.models.fields.tuple_lookups import Tuple, TupleGreaterThanOrEqual, TupleLessThan
from django.db.models.functions import Coalesce, Length, Substr
from django.utils import timezone
from django.utils.http import urlencode
from django.utils.translation import gettext as _

from escalations.models import Approval, Escalation
from runs.models import Decision, DecisionOutcome, Run, RunStatus, ToolCall, Turn
from runs.stop_reasons import STOP_REASONS
from runs.validation import ACTORS

# Newest first; the keyset of the runs list, read from the run_newest index.
RUN_ORDER = ("-created_at", "-id")


def run_list() -> QuerySet[Run]:
    """Every run, newest first, with its policy version and turn count in the same query.

    The order is explicit: an aggregate annotation (the turn count once was one) drops the
    model's default ordering, and the list then came out oldest first. The count is the last
    turn's index + 1 (indexes run 0, 1, 2, ... without gaps, a unique constraint per run), a
    seek per run shown instead of a GROUP BY over every run's turns before the page is cut."""
    return (
        Run.objects.select_related("policy_version")
        .annotate(turn_count=Coalesce(_last_turn_index() + 1, Value(0)))
        .order_by(*RUN_ORDER)
    )


def _last_turn_index() -> Subquery:
    return Subquery(
        Turn.objects.filter(run_id=OuterRef("pk")).order_by("-index").values("index")[:1]
    )


def run_get(*, run_id: int) -> Run:
    """One run with its policy version and turn count; raises Run.DoesNotExist."""
    return run_list().get(pk=run_id)


def run_turns_decided(*, run_id: int, after_index: int = -1) -> QuerySet[Turn]:
    """The run's turns that have a decision, oldest first, after `after_index`."""
    return (
        Turn.objects.filter(run_id=run_id, index__gt=after_index, decision__isnull=False)
        .select_related("decision")
        .prefetch_related("tool_calls")
        .order_by("index")
    )


# ---- the run page: one run's decision log, bounded whatever the run's length -----------------

# The run page shows this many turns at a time, newest first; older ones are a keyset page away.
RUN_PAGE_TURNS = 50
# A tool result is read up to this many characters per call on the page; the export has it whole.
RUN_PAGE_RESULT_CHARS = 4000


@dataclass(frozen=True)
class RunTimeline:
    """One page of a run's turns, newest first, each with its decision, its calls (results cut
    to RUN_PAGE_RESULT_CHARS: `result_head`, `result_length`) and its escalations (verdict and
    reviewer loaded); `older_than` is the `before` of the next page, None at the run's start."""

    turns: list[Turn]
    older_than: int | None


def run_page_run(*, run_id: int) -> Run:
    """The run the page is about, with its policy version; raises Run.DoesNotExist. Its
    compact loop state is left out: the page rebuilds nothing from it."""
    return Run.objects.select_related("policy_version").defer("state").get(pk=run_id)


def run_last_turn(*, run_id: int) -> Turn | None:
    """The run's latest turn, decided or not (its usage is the budget spent so far once
    decided): one seek on the (run, index) unique index, at any run length."""
    return (
        Turn.objects.filter(run_id=run_id)
        .only("id", "run_id", "index", "usage", "finished_at")
        .order_by("-index")
        .first()
    )


def run_last_usage(*, run_id: int) -> dict:
    """The budget spent by the run's latest decided turn ({} before the first)."""
    usage = (
        Turn.objects.filter(run_id=run_id, finished_at__isnull=False)
        .order_by("-index")
        .values_list("usage", flat=True)
        .first()
    )
    return usage or {}


def run_page_stamp(run: Run, last_turn: Turn | None) -> str:
    """A token that moves whenever the run page's head would: the run row changes (status, a
    verdict's resume, a cancel) or a turn starts or finishes."""
    parts = (
        run.status,
        run.updated_at.isoformat(),
        last_turn.pk if last_turn else 0,
        last_turn.finished_at.isoformat() if last_turn and last_turn.finished_at else "",
    )
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


def run_timeline(
    *, run_id: int, before: int | None = None, limit: int = RUN_PAGE_TURNS
) -> RunTimeline:
    """The run's turns before turn `before` (the latest ones when None), newest first, at most
    `limit`: five queries whatever the run's length (turns with decisions, calls, escalations
    with verdicts, and the keyset's one extra row), and a sixth for the approvals reviewers
    edited when an escalation is shown. Columns the page never shows (what the
    guardian saw, the state steps, a coder ⇄ reviewer turn's whole histories) are not read;
    a review turn's reply comes as `review_reply`."""
    turns = Turn.objects.filter(run_id=run_id)
    if before is not None:
        turns = turns.filter(index__lt=before)
    calls = (
        ToolCall.objects.defer("result")
        .annotate(
            result_head=Substr("result", 1, RUN_PAGE_RESULT_CHARS),
            result_length=Length("result"),
        )
        .order_by("position")
    )
    # Only the approvals a reviewer edited: the verdict says what changed (one query more,
    # only when the page shows an escalation).
    edited = Approval.objects.filter(original_arguments__isnull=False).select_related("reviewer")
    escalations = (
        Escalation.objects.select_related("verdict__reviewer")
        .prefetch_related(Prefetch("approvals", queryset=edited, to_attr="edited_approvals"))
        .order_by("id")
    )
    rows = list(
        turns.defer("projection", "risk_projections", "steps", "state", "feedback")
        .annotate(review_reply=KeyTransform("reply", "state"))
        .select_related("decision")
        .prefetch_related(
            Prefetch("tool_calls", queryset=calls), Prefetch("escalations", queryset=escalations)
        )
        .order_by("-index")[: limit + 1]
    )
    shown = rows[:limit]
    older_than = shown[-1].index if len(rows) > limit else None
    return RunTimeline(turns=shown, older_than=older_than)


# ---- the tools external runs defined -------------------------------------------------------

# How many of the latest external runs the guidance form looks through for the tools they
# defined: bounded, so the form costs the same however many runs there are.
EXTERNAL_TOOL_RUNS = 500


def run_external_tool_names(*, runs: int = EXTERNAL_TOOL_RUNS) -> list[str]:
    """The names of the tools the latest `runs` external runs defined themselves (their
    config.tools: an integrator's tools, which run in its own process), sorted."""
    configs = Run.objects.filter(actor="external").order_by("-id").values_list("config", flat=True)
    names = set()
    for config in configs[:runs]:
        tools = config.get("tools") if isinstance(config, dict) else None
        for tool in tools if isinstance(tools, list) else []:
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                names.add(tool["name"])
    return sorted(names)


# ---- the API's reads of turns ---------------------------------------------------------------


def run_turns_for_api(*, run_id: int) -> QuerySet[Turn]:
    """The run's turns, oldest first, with their decision and calls (for the paginated list)."""
    return (
        Turn.objects.filter(run_id=run_id)
        .select_related("decision", "decision__policy_version")
        .prefetch_related("tool_calls")
        .order_by("index")
    )


def run_turn_get(*, run_id: int, index: int) -> Turn:
    """One turn with its decision, calls and escalations; raises Turn.DoesNotExist."""
    # No row has an id past a 64-bit integer, and SQLite cannot even bind one for a foreign
    # key (Django guards a model's own id and integer fields, not a foreign key's).
    if not 0 <= run_id < 2**63:
        raise Turn.DoesNotExist(f"no run {run_id}")
    return (
        Turn.objects.select_related("decision", "decision__policy_version")
        .prefetch_related("tool_calls", "escalations")
        .get(run_id=run_id, index=index)
    )


# ---- the auditors' runs list -------------------------------------------------------------

# The most runs one page may hold: the API's `limit` goes up to it (the page shows 50).
RUN_LIST_PAGE_MAX = 200
RUN_LIST_GOAL_CHARS = 101  # a row shows 100 characters of the goal, and says when it is cut
RUN_SEARCH_MAX_CHARS = 200
RUN_ESCALATED = ("", "yes", "no")
_RUN_CURSOR_MAX_CHARS = 200
_RUN_CURSOR_TAG = "runs"


# Every query parameter of the runs list, page and API alike, and what it means: the API's
# schema documents each from here (runs/api.py), so the two cannot describe different lists.
RUN_LIST_PARAMETERS = {
    "status": "The run's status.",
    "actor": "What drove the run: scripted, openai, coder_reviewer, or external (an agent "
    "loop that runs elsewhere and asks through the API).",
    "outcome": "The outcome of the run's last decision.",
    "stop_reason": "Why the run stopped.",
    "since": "Created on this date or later (a day in the site's time zone).",
    "until": "Created on this date or earlier (a day in the site's time zone).",
    "policy": "The number of the policy version the run pinned.",
    "model": "A guardian model version some decision of the run was taken with (exact).",
    "escalated": "yes: the run escalated at least once; no: never.",
    "tool": "A tool the run proposed a call of (exact name).",
    "q": "Words in the goal, as typed (case-insensitive substring).",
    "after": "The next page's cursor, as the previous page gave it.",
}


@dataclass(frozen=True)
class RunFilters:
    status: str = ""  # a RunStatus value or ""
    actor: str = ""  # an actor name (runs.validation.ACTORS) or ""
    outcome: str = ""  # a DecisionOutcome value: the outcome of the run's last decision
    stop_reason: str = ""  # a key of STOP_REASONS or ""
    since: date | None = None  # created on this local date or later
    until: date | None = None  # created on this local date or earlier
    policy: int | None = None  # a policy version's number
    model: str = ""  # a guardian model version some decision of the run was taken with
    escalated: str = ""  # "" (any) | "yes" | "no": whether the run ever escalated
    tool: str = ""  # a tool the run proposed a call of
    q: str = ""  # words in the goal, as typed

    def as_params(self) -> dict[str, str]:
        """The filters set, as query parameters: the list's canonical, shareable address."""
        params = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if value not in ("", None):
                params[field.name] = value.isoformat() if isinstance(value, date) else str(value)
        return params

    def query(self) -> str:
        """as_params as a query string ("" when no filter is set)."""
        return urlencode(self.as_params())


@dataclass(frozen=True)
class RunListPage:
    # Only the columns a row shows; goal_head (the goal's first RUN_LIST_GOAL_CHARS
    # characters), policy_number, turn_count, last_outcome and escalation_count set.
    items: list[Run]
    next_cursor: str | None  # opaque; pass it back as `after` for the next page
    # Set when a filter on another table looked through RUN_PROBE_WINDOW runs without
    # filling the page: the creation time of the oldest run it looked at.
    looked_back_to: datetime | None = None


def run_filters_from(params: Mapping[str, str]) -> tuple[RunFilters, list[str]]:
    """The runs list's filters from query parameters, and one problem per bad field, naming
    it. A bad field is left out of the filters, so the list still shows the rest; a bad
    `after` cursor is named too (the list then starts from its first page)."""
    problems = []

    def text(name: str) -> str:
        return str(params.get(name) or "").strip()

    def choice(name: str, allowed: tuple[str, ...] | list[str], what: str) -> str:
        value = text(name)
        if value and value not in allowed:
            problems.append(f"{name}: {what}")
            return ""
        return value

    # The problems name the field (its query parameter, an interface) before the words.
    def one_of(values) -> str:
        return _("must be one of %(values)s") % {"values": ", ".join(values)}

    status = choice("status", RunStatus.values, one_of(RunStatus.values))
    actor = choice("actor", ACTORS, one_of(ACTORS))
    outcome = choice("outcome", DecisionOutcome.values, one_of(DecisionOutcome.values))
    stop_reason = choice("stop_reason", list(STOP_REASONS), _("not a stop reason runs end with"))
    escalated = choice("escalated", RUN_ESCALATED, _("must be yes or no (or empty for any run)"))
    days: dict[str, date | None] = {}
    for name in ("since", "until"):
        raw = text(name)
        days[name] = _day(raw)
        if raw and days[name] is None:
            problems.append(f"{name}: " + _("not a date like 2026-03-31"))
    if days["since"] and days["until"] and days["since"] > days["until"]:
        problems.append("until: " + _("must not be before since"))
        days["until"] = None
    policy = None
    if raw := text("policy"):
        if raw.isascii() and raw.isdigit() and 0 < int(raw) < 2**31:
            policy = int(raw)
        else:
            problems.append("policy: " + _("must be a policy version's number"))
    model = text("model")
    if len(model) > 120 or "\x00" in model:
        problems.append("model: " + _("a guardian model version of at most 120 characters, no NUL"))
        model = ""
    tool = text("tool")
    if len(tool) > 120 or "\x00" in tool:
        problems.append("tool: " + _("a tool name of at most 120 characters, no NUL"))
        tool = ""
    q = text("q")
    if len(q) > RUN_SEARCH_MAX_CHARS:
        problems.append(
            "q: "
            + _("search at most %(count)s characters of the goal") % {"count": RUN_SEARCH_MAX_CHARS}
        )
        q = ""
    if "\x00" in q:  # PostgreSQL refuses NUL in text: a 400-worthy value, not a 500
        problems.append("q: " + _("the search cannot hold a NUL character"))
        q = ""
    after = text("after")
    if after and _run_cursor_values(after) is None:
        problems.append("after: " + _("not a page of this list; start from the first page"))
    filters = RunFilters(
        status=status,
        actor=actor,
        outcome=outcome,
        stop_reason=stop_reason,
        since=days["since"],
        until=days["until"],
        policy=policy,
        model=model,
        escalated=escalated,
        tool=tool,
        q=q,
    )
    return filters, problems


def run_list_queryset(*, filters: RunFilters) -> QuerySet[Run]:
    """Runs matching the filters, unordered: the run's own columns, then what needs another
    table (escalations, calls, decisions) as an EXISTS per run, never a join that multiplies
    the rows."""
    return _with_probes(_own_columns(Run.objects.all(), filters), filters)


def _own_columns(queryset: QuerySet[Run], filters: RunFilters) -> QuerySet[Run]:
    if filters.status:
        queryset = queryset.filter(status=filters.status)
    if filters.actor:
        queryset = queryset.filter(actor=filters.actor)
    if filters.stop_reason:
        queryset = queryset.filter(stop_reason=filters.stop_reason)
    if filters.since:
        queryset = queryset.filter(created_at__gte=_local_midnight(filters.since))
    if filters.until:
        queryset = queryset.filter(created_at__lt=_local_midnight(filters.until + timedelta(1)))
    if filters.policy is not None:
        queryset = queryset.filter(policy_version__number=filters.policy)
    if filters.q:
        # On PostgreSQL, the run_goal_trigram index (migration 0010) answers this.
        queryset = queryset.filter(goal__icontains=filters.q)
    return queryset


def _has_probes(filters: RunFilters) -> bool:
    return bool(filters.escalated or filters.tool or filters.model or filters.outcome)


def _with_probes(queryset: QuerySet[Run], filters: RunFilters) -> QuerySet[Run]:
    if filters.escalated:
        # An audit sample is no escalation of the run: the policy let that turn through.
        escalated = Exists(Escalation.objects.raised().filter(run_id=OuterRef("pk")))
        queryset = queryset.filter(escalated if filters.escalated == "yes" else ~escalated)
    if filters.tool:
        calls = ToolCall.objects.filter(turn__run_id=OuterRef("pk"), tool=filters.tool)
        queryset = queryset.filter(Exists(calls))
    if filters.model:
        decisions = Decision.objects.filter(
            turn__run_id=OuterRef("pk"), guardian_model_version=filters.model
        )
        queryset = queryset.filter(Exists(decisions))
    if filters.outcome:
        last_outcome = _last_outcome()
        queryset = queryset.alias(last_outcome=last_outcome).filter(last_outcome=filters.outcome)
    return queryset


# A page under a filter on another table (escalated, tool, model, last outcome) looks through
# at most this many runs, newest first from its cursor: each probe costs a few µs a run, and a
# value no recent run has would otherwise make one page read every run ever made (seconds at
# 100 000 runs). A page that found fewer than a page's worth says how far back it looked, and
# its next page goes on from there.
RUN_PROBE_WINDOW = 1000


def run_list_filtered(
    *, filters: RunFilters, after: str | None = None, limit: int = 50
) -> RunListPage:
    """One page of the runs matching the filters, newest first, read by keyset from the
    run_newest index: a page costs the same however far the auditor paged, and runs that
    start meanwhile never push a run onto two pages. Each run comes with its turn count, the
    outcome of its last decision and how many escalations it raised, each a seek per run on
    the page. Filters on other tables look through RUN_PROBE_WINDOW runs a page at most (see
    there). Raises ValueError for a cursor run_filters_from refuses."""
    limit = max(1, min(limit, RUN_LIST_PAGE_MAX))
    base = _own_columns(Run.objects.all(), filters)
    if after:
        values = _run_cursor_values(after)
        if values is None:
            raise ValueError("after: not a page of this list")
        # A row comparison, (created_at, id) < (...): one index seek, not an OR chain.
        base = base.filter(TupleLessThan(Tuple(F("created_at"), F("id")), values))
    window_end = None
    queryset = base
    if _has_probes(filters):
        window = base.order_by(*RUN_ORDER).values_list("created_at", "id")
        last = list(window[RUN_PROBE_WINDOW - 1 : RUN_PROBE_WINDOW])
        if last:
            window_end = last[0]
            queryset = base.filter(
                TupleGreaterThanOrEqual(Tuple(F("created_at"), F("id")), window_end)
            )
        queryset = _with_probes(queryset, filters)
    escalations = (
        Escalation.objects.raised()
        .filter(run_id=OuterRef("pk"))
        .order_by()
        .values("run_id")
        .annotate(n=Count("id"))
        .values("n")
    )
    rows = list(
        # Only what a row shows: a goal can run to 20 000 characters, the loop state and the
        # policy version's thresholds and questions to more, and none of it is on the list.
        queryset.only("id", "actor", "status", "stop_reason", "created_at", "policy_version_id")
        .annotate(
            goal_head=Substr("goal", 1, RUN_LIST_GOAL_CHARS),
            policy_number=F("policy_version__number"),
            turn_count=Coalesce(_last_turn_index() + 1, Value(0)),
            last_outcome=_last_outcome(),
            escalation_count=Coalesce(Subquery(escalations), Value(0)),
        )
        .order_by(*RUN_ORDER)[: limit + 1]
    )
    items = rows[:limit]
    if len(rows) > limit:
        last_shown = items[-1]
        cursor = _run_cursor_at(last_shown.created_at, last_shown.pk)
        return RunListPage(items=items, next_cursor=cursor)
    if window_end is not None:
        return RunListPage(
            items=items, next_cursor=_run_cursor_at(*window_end), looked_back_to=window_end[0]
        )
    return RunListPage(items=items, next_cursor=None)


def run_policy_numbers() -> list[tuple[int, str]]:
    """Every policy version's number and label, newest first: the policy filter's choices."""
    from guardian_core.models import PolicyVersion

    return list(PolicyVersion.objects.order_by("-number").values_list("number", "label"))


def run_recent_model_versions(*, decisions: int = 500) -> list[str]:
    """The guardian model versions of the latest decisions, most recent first: suggestions for
    the model filter. Read from the end of the primary key, so it costs the same at any log
    length (a DISTINCT over the whole log would not)."""
    seen = Decision.objects.order_by("-id").values_list("guardian_model_version", flat=True)
    return list(dict.fromkeys(seen[:decisions]))


def _last_outcome() -> Subquery:
    """The outcome of the run's last decided turn: a backward seek on the turns' (run, index)
    index, then the decision of that turn by its unique key."""
    return Subquery(
        Decision.objects.filter(turn__run_id=OuterRef("pk"))
        .order_by("-turn__index")
        .values("outcome")[:1]
    )


def _day(raw: str) -> date | None:
    try:
        day = date.fromisoformat(raw) if raw else None
    except ValueError:
        return None
    # A date the database and Python can both turn into a moment and back.
    return day if day is None or 1900 <= day.year <= 9000 else None


def _local_midnight(day: date) -> datetime:
    return timezone.make_aware(datetime.combine(day, time.min))


def _run_cursor_at(created_at: datetime, pk: int) -> str:
    payload = [_RUN_CURSOR_TAG, created_at.isoformat(), pk]
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _run_cursor_values(cursor: str) -> tuple[datetime, int] | None:
    """The (created_at, id) a cursor points after, or None when it is not one of this list."""
    if len(cursor) > _RUN_CURSOR_MAX_CHARS:
        return None
    try:
        payload = json.loads(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)))
    except (ValueError, binascii.Error):
        return None
    if not isinstance(payload, list) or len(payload) != 3 or payload[0] != _RUN_CURSOR_TAG:
        return None
    _, moment, pk = payload
    try:
        created = datetime.fromisoformat(moment) if isinstance(moment, str) else None
    except ValueError:
        return None
    if created is None or created.tzinfo is None:
        return None
    if isinstance(pk, bool) or not isinstance(pk, int) or not 0 <= pk < 2**63:
        return None
    return created, pk


def run_webhook_deliveries(*, run: Run) -> list:
    """An external run's verdicts as its webhook received them (or did not), for its page; no
    query for the other runs."""
    from runs.models import WebhookDelivery

    if run.actor != "external":
        return []
    return list(WebhookDelivery.objects.filter(webhook__run_id=run.pk).order_by("escalation_id"))
