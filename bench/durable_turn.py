"""`make bench`: what one durable turn costs at turn 10 and at turn 500 of the same run.

A run of the scripted actor and guardian (no model time) reading a different order each turn,
advanced inline with `run_advance` (lease claim, proposal, tool call, guardian, decision:
everything a worker does but the broker). Reports the median time and the SQL statements of
turns 1–10 and 490–499, and their ratio: a turn must cost the same at any run length. On
PostgreSQL also what each turn costs the server: commits, rows written, WAL writes and syncs
(bench/pg_counts.py), the in-slice turns apart from the publishing ones.
Uses the configured database (migrated first). Run: .venv/bin/python -m bench.durable_turn
"""

import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, reset_queries  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from bench import pg_counts  # noqa: E402
from bench.report import Report  # noqa: E402

TURNS = int(os.environ.get("BENCH_TURNS", "500"))
BLOCK = 10  # turns per block when alternating with another contender
WINDOWS = {"turns 1-10": range(1, 11), f"turns {TURNS - 10}-{TURNS - 1}": range(TURNS - 10, TURNS)}
# Every turn of the run: 250 in-slice turns against the windows' 5, so on a busy machine the
# ratio of two contenders taking turns in blocks moves less than the windows' do.
WHOLE = {f"all {TURNS} turns": range(TURNS)}


def scenario(turns: int) -> dict:
    steps = [
        {"calls": [{"tool": "read_order", "arguments": {"order_id": f"ord_{i:05d}"}}], "tokens": 1}
        for i in range(turns + 5)
    ]
    return {
        "name": "bench-durable-turn",
        "goal": "Read every order, one a turn.",
        "tools": ["read_order"],
        "actor": {"turns": steps},
        "guardian": {"model_version": "scripted-bench"},
    }


@dataclass
class Figures:
    """Guardian's figures per window label (in-slice turns) and `label + ", publishing"`."""

    medians: dict[str, float] = field(default_factory=dict)  # ms
    statements: dict[str, list[int]] = field(default_factory=dict)  # per turn of the window
    counts: dict[str, pg_counts.Counts] = field(default_factory=dict)  # PostgreSQL only


def measure(report: Report, *, between: Callable[[int], None] | None = None) -> Figures:
    """Report and return the median milliseconds of a turn per window, with its statements
    and (PostgreSQL) its commits, rows written and WAL writes and syncs.

    `between(done)`, when given, is called after every block of BLOCK turns, outside the timed
    turns: bench/__main__.py runs the LangGraph contenders' rounds there, so the contenders
    alternate in blocks on the same database instead of one running after the other."""
    from django.conf import settings

    from demo.setup import demo_policy_version
    from runs.services import run_start

    call_command("migrate", verbosity=0)
    demo_policy_version()
    settings.GUARDIAN_ALLOW_SCRIPTED_ADAPTERS = True
    run = run_start(
        goal="Read every order, one a turn.",
        tools=["read_order"],
        actor="scripted",
        guardian="scripted",
        budgets={"max_turns": TURNS + 5},
        config={"scenario": scenario(TURNS)},
    )
    observer = pg_counts.observer()
    tally = None
    if observer is not None:
        counted = {i for window in WINDOWS.values() for i in window}
        tally = pg_counts.Tally(observer, pg_counts.flush_django, counted)
        report.note(observer.settings_note(pg_counts.django_setting))
    try:
        return _turns(report, run.pk, between, tally)
    finally:
        if observer is not None:
            observer.close()


def _turns(
    report: Report,
    run_id: int,
    between: Callable[[int], None] | None,
    tally: pg_counts.Tally | None,
) -> Figures:
    from runs.services import run_advance

    times: dict[int, float] = {}
    statements: dict[int, int] = {}
    for index in range(TURNS):
        # Odd turns run as a worker runs most turns of its time slice (the next turn is not
        # enqueued: the worker goes on itself); even turns also publish the next turn's task,
        # as the last turn of a slice does.
        publish = index % 2 == 0
        # The query log is bounded (9 000): a full one would count every turn as 0 statements.
        reset_queries()
        if tally is not None:
            tally.before(index)
        with CaptureQueriesContext(connection) as queries:
            start = time.perf_counter()
            outcome = run_advance(run_id=run_id, enqueue_next=publish)
            times[index] = (time.perf_counter() - start) * 1000
        statements[index] = len(queries)
        if tally is not None:
            tally.after(index)
        if outcome != "continued":
            raise SystemExit(f"turn {index} ended {outcome!r}; the bench run must go on")
        if between is not None and ((index + 1) % BLOCK == 0 or index + 1 == TURNS):
            if tally is not None:
                tally.settle()
            between(index + 1)
    vendor = connection.vendor
    figures = Figures()
    for label, window in WINDOWS.items():
        kinds = {
            label: [i for i in window if i % 2],
            f"{label}, publishing": [i for i in window if not i % 2],
        }
        for key, turns in kinds.items():
            figures.medians[key] = statistics.median(times[i] for i in turns)
            figures.statements[key] = [statements[i] for i in turns]
            if tally is not None:
                figures.counts[key] = tally.median(turns)
        seen = sorted({statements[i] for i in window})
        report.add(
            f"durable turn, {label}",
            figures.medians[label],
            "ms",
            extra=f"{'/'.join(map(str, seen))} SQL statements ({vendor})",
        )
        report.add(
            f"  publishing the next turn, {label}",
            figures.medians[f"{label}, publishing"],
            "ms",
            extra="as the last turn of a worker's slice does",
        )
        for key, name in ((label, "in-slice"), (f"{label}, publishing", "publishing")):
            if key in figures.counts:
                pg_counts.add_counts(
                    report,
                    f"  {name} turn, {label}",
                    figures.counts[key],
                    statements=figures.statements[key],
                )
    for label, turns in WHOLE.items():
        figures.medians[label] = statistics.median(times[i] for i in turns if i % 2)
        figures.medians[f"{label}, publishing"] = statistics.median(
            times[i] for i in turns if not i % 2
        )
        report.add(f"durable turn, {label}", figures.medians[label], "ms", extra="in-slice")
        report.add(
            f"  publishing the next turn, {label}",
            figures.medians[f"{label}, publishing"],
            "ms",
        )
    first, last = (figures.medians[label] for label in WINDOWS)
    report.ratio(f"turn {TURNS - 10} / turn 10", last / first)
    return figures


def main() -> None:
    report = Report("durable turn")
    measure(report)
    report.finish()


if __name__ == "__main__":
    main()
