"""`make bench`: the reviewers' queue at BENCH_QUEUE_ROWS open escalations (default 100 000).

Fills the configured database with that many open escalations (each on a run of its own, as
a run waits on one question at a time), a realistic mix of kinds, tools, conditions and
deadlines (many equal), a few items held by other reviewers; VACUUM ANALYZE; then times the
server side of the queue page through Django's test Client as a signed-in reviewer (the whole
request: middleware, session, the view, the template), BENCH_PAGE_REQUESTS times each (default
30, after one warm-up): the first page, a filtered page, the second page by cursor, the htmx
poll when nothing changed (204) and when something did (the rows); and "next" (claim the most
urgent unclaimed item). Medians, and the SQL statements of one request. The rows are deleted
afterwards, so the demo's queue is left as it was. Run alone: .venv/bin/python -m bench.queue_page
"""

import os
import re
import statistics
import time
from collections.abc import Callable
from datetime import timedelta
from urllib.parse import unquote

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from bench.report import Report  # noqa: E402
from bench.rows import delete_marked_runs  # noqa: E402

ROWS = int(os.environ.get("BENCH_QUEUE_ROWS", "100000"))
REQUESTS = int(os.environ.get("BENCH_PAGE_REQUESTS", "30"))
BATCH = 5000
MARK = "bench: queue page"  # the goal of every run this section makes, and deletes
TARGET_MS = 50.0  # issue 9: the page's server time at 100 000 open escalations, PostgreSQL
GATED_TOOLS = (
    ("issue_refund",) * 10 + ("send_email",) * 5 + ("delete_account",) * 3 + ("wire_transfer",) * 2
)
UNCERTAIN = ("risk", "drift", "stagnation", "goal_reached", "infeasible")


def measure(report: Report) -> dict[str, float]:
    """Report and return the median ms of each request ({label: ms})."""
    from django.core.cache import cache
    from django.test import Client
    from django.urls import reverse

    from escalations.claims import escalation_claim_next, escalation_release_all
    from escalations.queue import (
        QueueFilters,
        escalation_counts_by_kind,
        escalation_queue,
        escalation_queue_stamp,
    )

    call_command("migrate", verbosity=0)
    reviewer = _reviewer("bench-reviewer")
    others = [_reviewer(f"bench-reviewer-{i}") for i in range(5)]
    delete_rows()
    try:
        started = time.perf_counter()
        fill(ROWS, held_by=others)
        report.add(
            "filling the queue",
            time.perf_counter() - started,
            "s",
            extra=f"{ROWS} open escalations, each on a run of its own",
        )
        # The test Client's host: with DEBUG off no host is allowed unless ALLOWED_HOSTS says.
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
        client = Client(secure=settings.SECURE_SSL_REDIRECT)
        client.force_login(reviewer)
        queue = reverse("escalations:queue")
        htmx = {"HX-Request": "true"}
        cursor = escalation_queue(reviewer=reviewer, filters=QueueFilters(), limit=50).next_cursor
        filtered = {"kind": "gated_step", "tool": "wire_transfer", "sort": "deadline"}
        requests: dict[str, Callable[[], object]] = {
            "queue page, first page": lambda: client.get(queue),
            "queue page, filtered (kind, tool, by deadline)": lambda: client.get(queue, filtered),
            "queue page, second page by cursor": lambda: client.get(queue, {"after": cursor}),
            "live poll, changed: the rows": lambda: client.get(queue, {"stamp": "-"}, headers=htmx),
        }
        medians = {label: _time(report, label, request) for label, request in requests.items()}
        # The page's own stamp (its poll URL carries it), read just before: the minute in it
        # must not turn during the timing.
        stamp = _poll_stamp(client.get(queue).content.decode())
        medians["poll"] = _time(
            report,
            "live poll, nothing changed",
            lambda: client.get(queue, {"stamp": stamp}, headers=htmx),
        )
        medians["next"] = _time(
            report,
            "next: claim the most urgent unclaimed item",
            lambda: escalation_claim_next(reviewer=reviewer),
        )
        escalation_release_all(reviewer=reviewer)
        report.note("what the page reads, alone:")
        for label, read in {
            "  escalation_queue, first page of 50": lambda: escalation_queue(
                reviewer=reviewer, filters=QueueFilters()
            ),
            "  escalation_counts_by_kind, counted": lambda: (
                cache.clear(),  # as after an arrival or a closing
                escalation_counts_by_kind(),
            ),
            "  escalation_counts_by_kind, cached": escalation_counts_by_kind,
            "  escalation_queue_stamp": escalation_queue_stamp,
        }.items():
            medians[label.strip()] = _time(report, label, read)
        page = medians["queue page, first page"]
        if connection.vendor == "postgresql" and ROWS >= 100_000:
            verdict = "within" if page <= TARGET_MS else "OVER"
            report.note(f"first page {page:.1f} ms: {verdict} the {TARGET_MS:.0f} ms target")
        return medians
    finally:
        delete_rows()


def _time(report: Report, label: str, request: Callable[[], object]) -> float:
    """Median ms of `request` over REQUESTS calls after one warm-up; the SQL statements and
    HTTP status of one call go in the note."""
    request()  # warm-up: the connection, templates, the planner's caches
    # Counted by a wrapper: a request resets connection.queries as it starts.
    statements = []
    with connection.execute_wrapper(
        lambda execute, sql, *args: statements.append(sql) or execute(sql, *args)
    ):
        response = request()
    status = getattr(response, "status_code", None)
    if status is not None and status >= 400:
        raise SystemExit(f"{label}: HTTP {status}")
    times = []
    for _ in range(REQUESTS):
        start = time.perf_counter()
        request()
        times.append((time.perf_counter() - start) * 1000)
    median = statistics.median(times)
    p90 = statistics.quantiles(times, n=10)[-1] if len(times) > 1 else median
    extra = f"p90 {p90:.1f} ms, {len(statements)} SQL statements"
    if status is not None:
        extra += f", HTTP {status}"
    report.add(label, median, "ms", extra=extra)
    return median


def _poll_stamp(html: str) -> str:
    """The stamp in the page's poll URL."""
    found = re.search(r"stamp=([^&\"']+)", html)
    if found is None:
        raise SystemExit("the queue page has no poll URL with a stamp")
    return unquote(found.group(1))


def _reviewer(username: str):
    """A reviewer nobody can sign in as (the bench signs in with force_login)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user, created = get_user_model().objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    user.groups.add(Group.objects.get(name="reviewer"))
    return user


def fill(rows: int, *, held_by: list) -> None:
    """`rows` open escalations on runs of their own; a few held by the users in `held_by`.
    The runs and turns are copies of one row each, inserted by one INSERT ... SELECT over a
    number series; the escalations, which vary, by bulk_create in batches."""
    from django.utils import timezone

    from demo.setup import demo_policy_version
    from escalations.models import Escalation
    from runs.models import Run, RunStatus, Turn

    now = timezone.now()
    run = Run(
        goal=MARK,
        status=RunStatus.WAITING,
        policy_version=demo_policy_version(),
        actor="scripted",
        guardian="scripted",
        tools=["read_order", "issue_refund"],
    )
    turn = Turn(index=3, state_hash="0" * 64, started_at=now)
    with transaction.atomic():
        # Each run its own uid (the decision log's identity of a run, unique).
        postgres = connection.vendor == "postgresql"
        uid = "gen_random_uuid()" if postgres else "lower(hex(randomblob(16)))"
        _insert_copies(run, *_series(rows), computed={"uid": uid})
        runs = f"{Run._meta.db_table} r WHERE r.goal = %s"
        _insert_copies(turn, runs, [MARK], computed={"run_id": "r.id"})
    pairs = Turn.objects.filter(run__goal=MARK).order_by("run_id").values_list("run_id", "id")
    pairs = list(pairs)
    for start in range(0, rows, BATCH):
        with transaction.atomic():
            Escalation.objects.bulk_create(
                _escalation(n, run_id, turn_id, now)
                for n, (run_id, turn_id) in enumerate(pairs[start : start + BATCH], start)
            )
    # Other reviewers at work: a handful of live claims, as on a busy day.
    held = Escalation.objects.filter(run__goal=MARK).order_by("urgency", "deadline", "id")
    for escalation, user in zip(held[: 2 * len(held_by) : 2], held_by, strict=False):
        Escalation.objects.filter(pk=escalation.pk).update(
            claimed_by=user, claimed_at=now, claim_expires_at=now + timedelta(minutes=15)
        )
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # As autovacuum leaves a table at rest: statistics, and a visibility map that lets
            # the counts per kind read the index alone.
            tables = (Run._meta.db_table, Turn._meta.db_table, Escalation._meta.db_table)
            cursor.execute(f"VACUUM ANALYZE {', '.join(tables)}")
        else:
            cursor.execute("ANALYZE")


def _series(rows: int) -> tuple[str, list]:
    """A FROM clause of `rows` rows, and its parameters."""
    if connection.vendor == "postgresql":
        return "generate_series(1, %s) AS s(n)", [rows]
    recursive = "WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < %s)"
    return f"({recursive} SELECT n FROM s) AS s", [rows]


def _insert_copies(template, source: str, params: list, *, computed: dict | None = None) -> None:
    """Insert a copy of the unsaved `template` per row of `source` (a FROM clause), with the
    columns in `computed` given as SQL over the source's rows instead."""
    model = type(template)
    computed = computed or {}
    columns, values, args = [], [], []
    for field in model._meta.local_concrete_fields:
        if field.primary_key:
            continue
        columns.append(connection.ops.quote_name(field.column))
        if field.column in computed:
            values.append(computed[field.column])
        else:
            values.append("%s")
            args.append(field.get_db_prep_save(field.pre_save(template, add=True), connection))
    table = connection.ops.quote_name(model._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(values)} FROM {source}",
            args + params,
        )


def _escalation(n: int, run_id: int, turn_id: int, now):
    from escalations.models import Escalation, EscalationKind

    slot = n % 20
    # Deadlines within the day, to the minute: many items share one (the keyset's ties).
    deadline = now + timedelta(minutes=30 + (n * 7919) % 1440)
    if slot < 8:
        tool = GATED_TOOLS[(n // 20) % len(GATED_TOOLS)]
        triggered = [{"source": "gate", "band": "fired", "outcome": "escalate", "value": None}]
        fields = {
            "kind": EscalationKind.GATED_STEP,
            "urgency": 0,
            "conditions": ",gate,",
            "tools": f",{tool},",
            "summary": f"gate: {tool} is irreversible",
            "reason": {"triggered": triggered, "held_calls": [0], "ambiguous_calls": []},
        }
    elif slot < 16:
        condition = UNCERTAIN[n % len(UNCERTAIN)] if slot < 14 else "integrity"
        value = 0.3 + (n % 17) / 100
        triggered = [
            {
                "source": condition,
                "band": "uncertain",
                "outcome": "escalate",
                "detail": f"{condition} is unsure",
                "value": value,
                "t_star": 0.4,
                "delta": 0.1,
            }
        ]
        fields = {
            "kind": EscalationKind.UNCERTAIN if slot < 14 else EscalationKind.INTEGRITY,
            "conditions": f",{condition},",
            "summary": f"{condition}: p={value:.2f} within the band",
            "reason": {"triggered": triggered, "held_calls": [], "ambiguous_calls": []},
        }
    elif slot < 18:
        fields = {
            "kind": EscalationKind.GUARDIAN_FAILURE,
            "conditions": ",risk,",
            "summary": "risk: malformed answer",
            "reason": {"triggered": [{"source": "risk", "band": "malformed"}]},
        }
    elif slot < 19:
        fields = {
            "kind": EscalationKind.AMBIGUOUS_CALL,
            "conditions": ",tool_error,",
            "tools": ",issue_refund,",
            "summary": "tool_error: AmbiguousCall",
            "reason": {"triggered": [{"source": "tool_error", "band": "fired"}]},
        }
    else:
        fields = {
            "kind": EscalationKind.REVIEW_LOOP,
            "conditions": ",review_loop,",
            "summary": "Coder/reviewer loop: round cap after 3 rounds",
            "reason": {"end_reason": "round_cap", "last_reasons": ["tests fail"], "rounds": 3},
        }
    return Escalation(run_id=run_id, turn_id=turn_id, deadline=deadline, **fields)


def delete_rows() -> int:
    """Delete this section's runs and everything on them; returns how many runs went."""
    return delete_marked_runs("goal", MARK)


def main() -> None:
    report = Report("pages")
    measure(report)
    report.finish()


if __name__ == "__main__":
    main()
