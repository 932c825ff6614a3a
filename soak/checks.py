"""What the soak checks once the faults stop, and the figures it prints: every run ended, no
tool call ran twice, every approved call ran with the arguments approved, every chain intact
(verify_log --all), every decided turn replays identically (replay --all), and the metrics
agree with the database (when /metrics exists).

Each check returns a Check: its name, whether it passed, and what it found.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass

import httpx

from soak.load import Ledger, db_retry
from soak.stack import REPO

TERMINAL = ("succeeded", "failed", "cancelled")


@dataclass
class Check:
    name: str
    passed: bool
    detail: str = ""
    skipped: bool = False
    warning: bool = False  # passed, but something to look at


def unfinished(run_ids: list[int], *, ignore: frozenset[int] = frozenset()) -> dict[int, str]:
    """{run id: status} of the runs not ended (but those in `ignore`)."""
    from runs.models import Run

    return dict(
        db_retry(
            lambda: list(
                Run.objects.filter(pk__in=run_ids)
                .exclude(pk__in=ignore)
                .exclude(status__in=TERMINAL)
                .values_list("pk", "status")
            )
        )
    )


def orphans(ledger: Ledger) -> frozenset[int]:
    """External runs no caller knows: made by a start whose answer was lost (a 503 while
    PostgreSQL restarted, after the commit), then started again by the client's retry. They
    never get a step, and nothing ends them: run start is not idempotent, and the sweeper only
    sweeps an external run's handed-out calls. Reported apart (a gap of Guardian's, not of the
    soak's callers)."""
    from runs.models import Run

    with ledger.lock:
        known = set(ledger.run_ids["external"])
    return frozenset(
        db_retry(
            lambda: list(
                Run.objects.filter(actor="external", turns__isnull=True)
                .exclude(pk__in=known)
                .values_list("pk", flat=True)
            )
        )
    )


def runs_ended(run_ids: list[int], expected: int, ledger: Ledger) -> Check:
    lost_ones = orphans(ledger)
    left = unfinished(run_ids, ignore=lost_ones)
    started = len(run_ids) - len(lost_ones)
    passed = not left and started >= expected
    detail = f"{started} runs started of {expected}; {len(left)} not ended"
    if left:
        detail += f": {dict(list(left.items())[:20])}"
    return Check("no run lost or stuck", passed, detail)


def orphan_runs(ledger: Ledger) -> Check:
    """A warning, not a failure: see orphans()."""
    found = sorted(orphans(ledger))
    detail = (
        f"{len(found)} external runs made by a start whose answer was lost and then retried: "
        f"{found[:20]} (no caller knows them; run start is not idempotent and nothing sweeps "
        "an external run with no step)"
        if found
        else "none"
    )
    return Check("no orphan external run", True, detail, warning=bool(found))


def no_call_twice(ledger: Ledger) -> Check:
    from runs.models import DemoSideEffect

    internal = Counter(
        db_retry(lambda: list(DemoSideEffect.objects.values_list("idempotency_key", flat=True)))
    )
    external = Counter(key for _, key, _, _ in ledger.external_ran)
    twice = {k: n for k, n in (internal + external).items() if n > 1}
    blank = sum(1 for _, key, _, _ in ledger.external_ran if not key)
    detail = (
        f"{sum(internal.values())} side effects of internal runs, {sum(external.values())} "
        f"calls run by external loops; {len(twice)} run more than once"
    )
    if twice:
        detail += f": {dict(list(twice.items())[:10])}"
    if blank:
        detail += f"; {blank} handed out with no idempotency key"
    return Check("no tool call run twice", not twice and not blank, detail)


def approved_as_approved(ledger: Ledger) -> Check:
    """Per run, the refunds that ran are exactly the calls the reviewer approved there, each
    with the arguments approved (edited or as shown): none unapproved, none lost, none changed."""
    from runs.models import DemoSideEffect, ToolCall

    def internal() -> list[tuple[int, dict]]:
        payloads = dict(
            DemoSideEffect.objects.filter(tool="issue_refund").values_list(
                "idempotency_key", "payload"
            )
        )
        runs = dict(
            ToolCall.objects.filter(idempotency_key__in=list(payloads)).values_list(
                "idempotency_key", "turn__run_id"
            )
        )
        return [(runs.get(key, 0), payload) for key, payload in payloads.items()]

    ran: dict[int, list[dict]] = {}
    for run_id, arguments in db_retry(internal) + [
        (run_id, args) for run_id, _, tool, args in ledger.external_ran if tool == "refund_order"
    ]:
        ran.setdefault(run_id, []).append(arguments)

    def canonical(calls: list[dict]) -> list[str]:
        return sorted(json.dumps(call, sort_keys=True) for call in calls)

    wrong = {
        run_id: {"approved": ledger.approved.get(run_id, []), "ran": ran.get(run_id, [])}
        for run_id in set(ran) | set(ledger.approved)
        if canonical(ran.get(run_id, [])) != canonical(ledger.approved.get(run_id, []))
    }
    refunds = sum(len(calls) for calls in ran.values())
    approved = sum(len(calls) for calls in ledger.approved.values())
    detail = (
        f"{refunds} refunds ran, {approved} approved ({ledger.edited} verdicts edited the "
        f"amount); {len(wrong)} runs where they differ"
    )
    if wrong:
        detail += f": {dict(list(wrong.items())[:5])}"
    return Check("no approved call run with other arguments", not wrong, detail)


def manage(env: dict[str, str], *args: str, timeout: float = 600) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, (done.stdout + done.stderr).strip()


def chains_intact(env: dict[str, str]) -> Check:
    code, out = manage(env, "verify_log", "--all")
    last = out.splitlines()[-1] if out else ""
    return Check("every chain intact (verify_log --all)", code == 0, last)


def replays_identical(env: dict[str, str]) -> Check:
    code, out = manage(env, "replay", "--all", "--quiet")
    lines = [line for line in out.splitlines() if "replayed" in line or "MISMATCH" in line]
    return Check(
        "every decided turn replays identically (replay --all)",
        code == 0,
        "; ".join(lines[:5]) or out[-500:],
    )


def metrics_consistent(web_url: str, token: str = "") -> Check:
    """The hook for /metrics (issue 26 item 1, built elsewhere): when it answers, its runs by
    status must be the database's. SOAK-METRICS: extend with the other series once they land."""
    name = "metrics consistent with the database"
    try:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        answer = httpx.get(f"{web_url}/metrics", timeout=10, headers=headers)
    except httpx.HTTPError as exc:
        return Check(name, False, f"/metrics did not answer: {exc}")
    if answer.status_code in (401, 403, 404):
        return Check(name, True, f"skipped: /metrics answers {answer.status_code}", skipped=True)
    if answer.status_code != 200:
        return Check(name, False, f"/metrics answered {answer.status_code}")
    from runs.models import Run

    counts = Counter(db_retry(lambda: list(Run.objects.values_list("status", flat=True))))
    problems, seen = [], 0
    for line in answer.text.splitlines():
        if line.startswith("guardian_runs") and "status=" in line and not line.startswith("#"):
            status = line.split('status="', 1)[1].split('"', 1)[0]
            value = float(line.rsplit(" ", 1)[1])
            seen += 1
            if value != counts.get(status, 0):
                problems.append(f"{status}: metric {value:g}, database {counts.get(status, 0)}")
    if not seen:
        problems.append("no guardian_runs{status=...} series in /metrics")
    return Check(name, not problems, "; ".join(problems) or f"runs by status agree ({seen} series)")


def wait_until_ended(run_ids: list[int], grace: float, ledger: Ledger) -> float:
    """Seconds until every run ended (or the grace ran out: then `grace`), orphans aside."""
    started = time.monotonic()
    while time.monotonic() - started < grace:
        if not unfinished(run_ids, ignore=orphans(ledger)):
            break
        time.sleep(2.0)
    return time.monotonic() - started


def turn_figures(run_ids: dict[str, list[int]]) -> dict[str, dict[str, float]]:
    """Decided turns and p50/p99 turn time (ms, start to decision) per run kind."""
    from runs.models import Turn

    figures = {}
    for kind, ids in run_ids.items():
        rows = db_retry(
            lambda ids=ids: list(
                Turn.objects.filter(run_id__in=ids, finished_at__isnull=False).values_list(
                    "started_at", "finished_at"
                )
            )
        )
        ms = sorted((end - start).total_seconds() * 1000 for start, end in rows)
        figures[kind] = {
            "turns": len(ms),
            "p50_ms": statistics.median(ms) if ms else 0.0,
            "p99_ms": ms[min(len(ms) - 1, int(len(ms) * 0.99))] if ms else 0.0,
        }
    return figures


def run_statuses(run_ids: list[int]) -> dict[str, int]:
    from runs.models import Run

    return dict(
        Counter(
            db_retry(
                lambda: list(Run.objects.filter(pk__in=run_ids).values_list("status", flat=True))
            )
        )
    )
