"""`make bench`: what one durable turn costs at turn 10 and at turn 500 of the same run.

A run of the scripted actor and guardian (no model time) reading a different order each turn,
advanced inline with `run_advance` (lease claim, proposal, tool call, guardian, decision:
everything a worker does but the broker). Reports the median time and the SQL statements of
turns 1–10 and 490–499, and their ratio: a turn must cost the same at any run length.
Uses the configured database (migrated first). Run: .venv/bin/python -m bench.durable_turn
"""

import os
import statistics
import time
from collections.abc import Callable

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, reset_queries  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402

from bench.report import Report  # noqa: E402

TURNS = int(os.environ.get("BENCH_TURNS", "500"))
BLOCK = 10  # turns per block when alternating with another contender
WINDOWS = {"turns 1-10": range(1, 11), f"turns {TURNS - 10}-{TURNS - 1}": range(TURNS - 10, TURNS)}


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


def measure(report: Report, *, between: Callable[[int], None] | None = None) -> dict[str, float]:
    """Report and return the median milliseconds of a turn per window ({label: ms}).

    `between(done)`, when given, is called after every block of BLOCK turns, outside the timed
    turns: bench/__main__.py runs the LangGraph contender's rounds there, so the two contenders
    alternate in blocks on the same database instead of one running after the other."""
    from django.conf import settings

    from guardian_core.demo import demo_policy_version
    from runs.services import run_advance, run_start

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
    times: dict[int, float] = {}
    statements: dict[int, int] = {}
    for index in range(TURNS):
        # Odd turns run as a worker runs most turns of its time slice (the next turn is not
        # enqueued: the worker goes on itself); even turns also publish the next turn's task,
        # as the last turn of a slice does.
        publish = index % 2 == 0
        # The query log is bounded (9 000): a full one would count every turn as 0 statements.
        reset_queries()
        with CaptureQueriesContext(connection) as queries:
            start = time.perf_counter()
            outcome = run_advance(run_id=run.pk, enqueue_next=publish)
            times[index] = (time.perf_counter() - start) * 1000
        statements[index] = len(queries)
        if outcome != "continued":
            raise SystemExit(f"turn {index} ended {outcome!r}; the bench run must go on")
        if between is not None and ((index + 1) % BLOCK == 0 or index + 1 == TURNS):
            between(index + 1)
    vendor = connection.vendor
    medians = {}
    for label, window in WINDOWS.items():
        in_slice = [times[i] for i in window if i % 2]
        publishing = [times[i] for i in window if not i % 2]
        medians[label] = statistics.median(in_slice)
        medians[f"{label}, publishing"] = statistics.median(publishing)
        counts = sorted({statements[i] for i in window})
        report.add(
            f"durable turn, {label}",
            medians[label],
            "ms",
            extra=f"{'/'.join(map(str, counts))} SQL statements ({vendor})",
        )
        report.add(
            "  the same, publishing the next turn",
            medians[f"{label}, publishing"],
            "ms",
            extra="as the last turn of a worker's slice does",
        )
    first, last = (medians[label] for label in WINDOWS)
    report.ratio(f"turn {TURNS - 10} / turn 10", last / first)
    return medians


def main() -> None:
    report = Report("durable turn")
    measure(report)
    report.finish()


if __name__ == "__main__":
    main()
