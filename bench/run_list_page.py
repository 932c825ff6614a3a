"""`make bench`: the auditors' runs list at BENCH_RUN_ROWS runs (default 100 000).

Fills the configured database with that many finished or waiting runs over some seven weeks,
one to four turns each with a decision and a tool call, escalations on about one run in
six, a mix of statuses, stop reasons, tools and two guardian model versions; VACUUM ANALYZE;
then times the server side of /runs/ through Django's test Client as a signed-in auditor (the
whole request: middleware, session, the view, the template), BENCH_PAGE_REQUESTS times each
(default 30, after one warm-up): the first page, filtered pages (by the run's own columns and
by what needs another table: tool used, escalated, last outcome, guardian model), pages by
cursor, and searches of the goal. Medians, and the SQL statements of one request. The rows
are deleted afterwards. Run alone: .venv/bin/python -m bench.run_list_page
"""

import html
import os
import re
import time
from collections.abc import Callable
from datetime import timedelta

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

# The queue section's way of filling (one INSERT ... SELECT per table) and of timing.
from bench.queue_page import _insert_copies, _series, _time  # noqa: E402
from bench.report import Report  # noqa: E402
from bench.rows import delete_marked_runs  # noqa: E402

ROWS = int(os.environ.get("BENCH_RUN_ROWS", "100000"))
MARK = "bench-run-list"  # the actor of every run this section makes, and deletes
TARGET_MS = 50.0  # issue 10: the list's server time at 100 000 runs, PostgreSQL
SPACING_SECONDS = 37  # between two runs' creation: 100 000 runs span some six weeks
OLD_MODEL, MODEL = "local-2025.4", "local-2026.1"


def measure(report: Report) -> dict[str, float]:
    """Report and return the median ms of each request ({label: ms})."""
    from django.test import Client
    from django.urls import reverse
    from django.utils import timezone

    call_command("migrate", verbosity=0)
    auditor = _auditor("bench-auditor")
    delete_rows()
    try:
        started = time.perf_counter()
        counts = fill(ROWS)
        report.add(
            "filling the runs",
            time.perf_counter() - started,
            "s",
            extra=", ".join(f"{n} {what}" for what, n in counts.items()),
        )
        settings.ALLOWED_HOSTS = [*settings.ALLOWED_HOSTS, "testserver"]
        client = Client(secure=settings.SECURE_SSL_REDIRECT)
        client.force_login(auditor)
        runs = reverse("runs:list")
        htmx = {"HX-Request": "true"}
        # Halfway down the list (three weeks back at 100 000 runs).
        halfway = timezone.localtime() - timedelta(seconds=ROWS * SPACING_SECONDS / 2)
        week = halfway.date() - timedelta(days=3)
        # The cursors are read before the timing: a request times one page only.
        second = _next_cursor(client, runs, {})
        deep = _cursor_halfway()
        requests: dict[str, Callable[[], object]] = {
            "runs list, first page": lambda: client.get(runs),
            "runs list, filtered (failed, escalation expired)": lambda: client.get(
                runs, {"status": "failed", "stop_reason": "escalation_expired"}
            ),
            "runs list, filtered (created in one week)": lambda: client.get(
                runs, {"since": week.isoformat(), "until": (week + timedelta(6)).isoformat()}
            ),
            "runs list, filtered (tool used: wire_transfer)": lambda: client.get(
                runs, {"tool": "wire_transfer"}
            ),
            "runs list, filtered (tool used, rare: delete_account)": lambda: client.get(
                runs, {"tool": "delete_account"}
            ),
            "runs list, filtered (escalated, last outcome escalate)": lambda: client.get(
                runs, {"escalated": "yes", "outcome": "escalate"}
            ),
            "runs list, filtered (older guardian model)": lambda: client.get(
                runs, {"model": OLD_MODEL}
            ),
            "runs list, results by htmx (never escalated)": lambda: client.get(
                runs, {"escalated": "no"}, headers=htmx
            ),
            "runs list, second page by cursor": lambda: client.get(runs, {"after": second}),
            "runs list, a page halfway down by cursor": lambda: client.get(runs, {"after": deep}),
            "runs list, search the goal (common: refund)": lambda: client.get(
                runs, {"q": "refund"}
            ),
            "runs list, search the goal (one run: ord_54321)": lambda: client.get(
                runs, {"q": f"ord_{min(54321, ROWS)}"}
            ),
        }
        medians = {label: _time(report, label, request) for label, request in requests.items()}
        page = medians["runs list, first page"]
        if connection.vendor == "postgresql" and ROWS >= 100_000:
            slowest = max(medians, key=medians.get)
            for label, verdict_on in (("first page", page), ("slowest", medians[slowest])):
                verdict = "within" if verdict_on <= TARGET_MS else "OVER"
                what = label if label == "first page" else f"slowest ({slowest})"
                report.note(f"{what} {verdict_on:.1f} ms: {verdict} the {TARGET_MS:.0f} ms target")
        return medians
    finally:
        delete_rows()


def _next_cursor(client, url: str, params: dict) -> str:
    """The `after` of the next-page link of a page of the list."""
    body = client.get(url, params).content.decode()
    found = re.search(r'<a rel="next" href="[^"]*(?:\?|&amp;)after=([^"&]+)', body)
    if found is None:
        raise SystemExit(f"the runs list {params} has no next page")
    return html.unescape(found.group(1))


def _cursor_halfway() -> str:
    """The cursor of a page halfway down the list, as its next-page link would carry it."""
    from runs.models import Run
    from runs.selectors import _run_cursor_at

    newest_first = Run.objects.filter(actor=MARK).order_by("-created_at", "-id")
    return _run_cursor_at(*newest_first.values_list("created_at", "id")[ROWS // 2])


def _auditor(username: str):
    """An auditor nobody can sign in as (the bench signs in with force_login)."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group

    user, created = get_user_model().objects.get_or_create(username=username)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    user.groups.add(Group.objects.get(name="auditor"))
    return user


def fill(rows: int) -> dict[str, int]:
    """`rows` runs and their turns, decisions, tool calls and escalations, each table filled by
    one INSERT ... SELECT whose varying columns are SQL over the run's number or id."""
    from django.utils import timezone

    from demo.setup import demo_policy_version
    from escalations.models import Escalation, EscalationKind
    from runs.models import Decision, Run, RunStatus, ToolCall, Turn

    now = timezone.now()
    postgres = connection.vendor == "postgresql"
    stamp = f"'{now.isoformat()}'" if postgres else f"'{now:%Y-%m-%d %H:%M:%S}'"

    def ago(seconds: str) -> str:
        if postgres:
            return f"({stamp}::timestamptz - ({seconds}) * interval '1 second')"
        return f"datetime({stamp}, '-' || ({seconds}) || ' seconds')"

    uid = "gen_random_uuid()" if postgres else "lower(hex(randomblob(16)))"
    # In the SQL below, %% is the modulo operator: the statements carry parameters.
    run = Run(
        goal="",
        status=RunStatus.SUCCEEDED,
        policy_version=demo_policy_version(),
        actor=MARK,
        guardian="scripted",
        tools=["read_order", "issue_refund", "send_email", "wire_transfer"],
    )
    goal = (
        "CASE s.n %% 4 WHEN 0 THEN 'Refund order ord_' || s.n "
        "WHEN 1 THEN 'Email the customer of order ord_' || s.n "
        "WHEN 2 THEN 'Find the parcel of order ord_' || s.n "
        "ELSE 'Cancel subscription sub_' || s.n END"
    )
    # One run in twenty waits on a reviewer; the others ended, most with success.
    status = (
        "CASE WHEN s.n %% 20 < 12 THEN 'succeeded' WHEN s.n %% 20 < 17 THEN 'failed' "
        "WHEN s.n %% 20 < 19 THEN 'cancelled' ELSE 'waiting' END"
    )
    stop_reason = (
        "CASE WHEN s.n %% 20 < 12 THEN 'goal_reached' WHEN s.n %% 20 < 17 THEN "
        "(CASE s.n %% 5 WHEN 0 THEN 'infeasible' WHEN 1 THEN 'turn_cap' "
        "WHEN 2 THEN 'escalation_expired' WHEN 3 THEN 'rejected_by_reviewer' "
        "ELSE 'stagnation' END) WHEN s.n %% 20 < 19 THEN 'cancelled' ELSE '' END"
    )
    when = ago(f"s.n * {SPACING_SECONDS}")
    runs = f"{Run._meta.db_table} r"
    mine = f"r.actor = '{MARK}'"
    turns = f"{Turn._meta.db_table} t JOIN {runs} ON r.id = t.run_id"
    with transaction.atomic():
        source, params = _series(rows)
        _insert_copies(
            run,
            source,
            params,
            computed={
                "uid": uid,
                "goal": goal,
                "status": status,
                "stop_reason": stop_reason,
                "created_at": when,
                "updated_at": when,
            },
        )
        # One to four turns a run (its id modulo 4, plus one).
        indexes = "(SELECT 0 AS i UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3) x"
        _insert_copies(
            Turn(index=0, state_hash="0" * 64, started_at=now),
            f"{runs} JOIN {indexes} ON x.i <= r.id %% 4 WHERE {mine}",
            [],
            computed={"run_id": "r.id", "index": "x.i"},
        )
        last = 't."index" = r.id %% 4'
        outcome = (
            f"CASE WHEN NOT ({last}) THEN (CASE WHEN t.id %% 7 = 0 THEN 'replan' ELSE 'continue' "
            "END) WHEN r.status = 'succeeded' THEN 'stop_success' WHEN r.status = 'waiting' "
            "OR r.stop_reason IN ('escalation_expired', 'rejected_by_reviewer') THEN 'escalate' "
            "WHEN r.status = 'failed' THEN 'stop_failure' ELSE 'continue' END"
        )
        policy = run.policy_version
        _insert_copies(
            Decision(
                outcome="continue",
                answers={"goal_reached": 0.1, "infeasible": 0.05, "drift": 0.2},
                thresholds=policy.thresholds,
                policy_version=policy,
                question_set_version=policy.question_set_version,
                guardian_model_version=MODEL,
                state_hash="0" * 64,
            ),
            f"{turns} WHERE {mine}",
            [],
            computed={
                "turn_id": "t.id",
                "outcome": outcome,
                # An older model on one run in fifty: a rare value of the model filter.
                "guardian_model_version": (
                    f"CASE WHEN r.id %% 50 = 0 THEN '{OLD_MODEL}' ELSE '{MODEL}' END"
                ),
            },
        )
        tool = (
            "CASE WHEN t.id %% 997 = 0 THEN 'delete_account' WHEN t.id %% 10 < 5 THEN 'read_order' "
            "WHEN t.id %% 10 < 8 THEN 'issue_refund' WHEN t.id %% 10 < 9 THEN 'send_email' "
            "ELSE 'wire_transfer' END"
        )
        _insert_copies(
            ToolCall(
                position=0,
                arguments={"order_id": "ord_1"},
                risk_class="read_only",
                status="done",
                result="ok",
            ),
            f"{turns} WHERE {mine}",
            [],
            computed={"turn_id": "t.id", "tool": tool, "idempotency_key": "NULL"},
        )
        # An escalation on the last turn of each waiting run (open), each run stopped by one
        # (closed), and one succeeded run in ten (a gated step a reviewer approved).
        escalated = (
            "r.status = 'waiting' OR r.stop_reason IN ('escalation_expired', "
            "'rejected_by_reviewer') OR (r.status = 'succeeded' AND r.id %% 10 = 0)"
        )
        escalation_status = (
            "CASE WHEN r.status = 'waiting' THEN 'open' WHEN r.stop_reason = "
            "'escalation_expired' THEN 'expired' WHEN r.status = 'failed' THEN 'rejected' "
            "ELSE 'approved' END"
        )
        resolved = f"CASE WHEN r.status = 'waiting' THEN NULL ELSE {ago('r.id %% 1000')} END"
        _insert_copies(
            Escalation(
                kind=EscalationKind.GATED_STEP,
                summary="gate: issue_refund is irreversible",
                urgency=0,
                conditions=",gate,",
                tools=",issue_refund,",
                deadline=now + timedelta(hours=2),
                reason={"held_calls": [0]},
            ),
            f"{turns} WHERE {mine} AND {last} AND ({escalated})",
            [],
            computed={
                "run_id": "r.id",
                "turn_id": "t.id",
                "status": escalation_status,
                "resolved_at": resolved,
            },
        )
    tables = [m._meta.db_table for m in (Run, Turn, Decision, ToolCall, Escalation)]
    with connection.cursor() as cursor:
        if postgres:
            # As autovacuum leaves tables at rest: statistics and a visibility map.
            cursor.execute(f"VACUUM ANALYZE {', '.join(tables)}")
        else:
            cursor.execute("ANALYZE")
    counts = {
        "runs": Run.objects.filter(actor=MARK).count(),
        "turns": Turn.objects.filter(run__actor=MARK).count(),
        "escalations": Escalation.objects.filter(run__actor=MARK).count(),
    }
    return counts


def delete_rows() -> int:
    """Delete this section's runs and everything on them; returns how many runs went."""
    return delete_marked_runs("actor", MARK)


def main() -> None:
    report = Report("pages")
    measure(report)
    report.finish()


if __name__ == "__main__":
    main()
