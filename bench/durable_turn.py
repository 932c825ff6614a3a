"""`make bench`: what one durable turn costs at turn 10 and at turn 500 of the same run.

A run of the scripted actor and guardian (no model time) reading a different order each turn,
advanced inline as a worker's slices advance it (runs/services.py RunSlice: everything a worker
does but the broker), in slices of SLICE turns: the first claims the lease, the middle ones
("in-slice") read the run under the lease they kept, the last publishes the next turn and gives
the lease back. Reports the median time and the SQL statements of turns 1–10 and 490–499, and
their ratio: a turn must cost the same at any run length. On PostgreSQL also what each turn
costs the server: commits, rows written, WAL writes and syncs (bench/pg_counts.py), by kind.
Then WRITE_TURNS turns of a run whose every call is a reversible write (a tool that writes
nothing itself, so only Guardian's own records are counted): the write turn's median.
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
from guardian_core.engine.conditions import RiskClass  # noqa: E402
from guardian_core.engine.tools import Tool  # noqa: E402

TURNS = int(os.environ.get("BENCH_TURNS", "500"))
WRITE_TURNS = int(os.environ.get("BENCH_WRITE_TURNS", "100"))
BLOCK = 10  # turns per block when alternating with another contender
SLICE = 5  # turns per worker slice: one claiming, three in-slice, one publishing
WINDOWS = {"turns 1-10": range(1, 11), f"turns {TURNS - 10}-{TURNS - 1}": range(TURNS - 10, TURNS)}
# Every turn of the run: 250 in-slice turns against the windows' 5, so on a busy machine the
# ratio of two contenders taking turns in blocks moves less than the windows' do.
WHOLE = {f"all {TURNS} turns": range(TURNS)}


def scenario(turns: int, tool: str = "read_order") -> dict:
    def arguments(i: int) -> dict:
        order = f"ord_{i:05d}"
        return {"order_id": order} if tool == "read_order" else {"order_id": order, "note": "ok"}

    steps = [
        {"calls": [{"tool": tool, "arguments": arguments(i)}], "tokens": 1}
        for i in range(turns + 5)
    ]
    return {
        "name": "bench-durable-turn",
        "goal": "Read every order, one a turn." if tool == "read_order" else "Note every order.",
        "tools": [tool],
        "actor": {"turns": steps},
        "guardian": {"model_version": "scripted-bench"},
    }


def _note_order(arguments: dict, *, idempotency_key: str) -> str:
    return f"noted {arguments['order_id']}"


# The write turns' tool: a reversible write that writes nothing itself (its own side effect
# would cost the same in any loop), so the turn's cost is Guardian's records alone.
NOTE_ORDER = Tool(
    name="bench_note_order",
    description="Note an order (bench: writes nothing itself).",
    schema={
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "note": {"type": "string"}},
        "required": ["order_id", "note"],
    },
    risk_class=RiskClass.REVERSIBLE_WRITE,
    func=_note_order,
)


def kind(index: int) -> str:
    """Which turn of its worker's slice turn `index` is."""
    place = index % SLICE
    return "claiming" if place == 0 else "publishing" if place == SLICE - 1 else "in-slice"


@dataclass
class Figures:
    """Guardian's figures per window label (in-slice turns) and `label + ", publishing"`."""

    medians: dict[str, float] = field(default_factory=dict)  # ms
    write_median: float | None = None  # ms, an in-slice turn of the write run
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
    settings.GUARDIAN_TOOLS = [*settings.GUARDIAN_TOOLS, "bench.durable_turn.NOTE_ORDER"]
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
        figures = _turns(report, run.pk, between, tally)
        figures.write_median = _write_turns(report)
        return figures
    finally:
        if observer is not None:
            observer.close()


def _write_turns(report: Report) -> float:
    """WRITE_TURNS turns of a run whose every call is a reversible write, in slices as above:
    the median of its in-slice turns, ms."""
    from runs.services import RunSlice, run_start

    run = run_start(
        goal="Note every order.",
        tools=[NOTE_ORDER.name],
        actor="scripted",
        guardian="scripted",
        budgets={"max_turns": WRITE_TURNS + 5},
        config={"scenario": scenario(WRITE_TURNS, NOTE_ORDER.name)},
    )
    turns = RunSlice(run.pk)
    times = []
    for index in range(WRITE_TURNS):
        start = time.perf_counter()
        outcome = turns.advance(last=kind(index) == "publishing")
        elapsed = (time.perf_counter() - start) * 1000
        if outcome != "continued":
            raise SystemExit(f"write turn {index} ended {outcome!r}; the bench run must go on")
        if kind(index) == "in-slice":
            times.append(elapsed)
    median = statistics.median(times)
    report.add(
        f"durable write turn, in-slice, {WRITE_TURNS} turns",
        median,
        "ms",
        extra="a reversible write: started flushed before it runs, result with the decision",
    )
    return median


def _turns(
    report: Report,
    run_id: int,
    between: Callable[[int], None] | None,
    tally: pg_counts.Tally | None,
) -> Figures:
    from runs.services import RunSlice

    times: dict[int, float] = {}
    statements: dict[int, int] = {}
    turns = RunSlice(run_id)
    for index in range(TURNS):
        # In slices of SLICE turns (kind()): most turns go on under the lease the turn before
        # kept; the last of a slice also publishes the next turn's task and gives the lease
        # back, and the next slice's first turn claims it again.
        publish = kind(index) == "publishing"
        # The query log is bounded (9 000): a full one would count every turn as 0 statements.
        reset_queries()
        if tally is not None:
            tally.before(index)
        with CaptureQueriesContext(connection) as queries:
            start = time.perf_counter()
            outcome = turns.advance(last=publish)
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
            label: [i for i in window if kind(i) == "in-slice"],
            f"{label}, publishing": [i for i in window if kind(i) == "publishing"],
            f"{label}, claiming": [i for i in window if kind(i) == "claiming"],
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
        report.add(
            f"  claiming the lease, {label}",
            figures.medians[f"{label}, claiming"],
            "ms",
            extra="as the first turn of a worker's slice does",
        )
        for key, name in (
            (label, "in-slice"),
            (f"{label}, publishing", "publishing"),
            (f"{label}, claiming", "claiming"),
        ):
            if key in figures.counts:
                pg_counts.add_counts(
                    report,
                    f"  {name} turn, {label}",
                    figures.counts[key],
                    statements=figures.statements[key],
                )
    for label, window in WHOLE.items():
        figures.medians[label] = statistics.median(
            times[i] for i in window if kind(i) == "in-slice"
        )
        figures.medians[f"{label}, publishing"] = statistics.median(
            times[i] for i in window if kind(i) == "publishing"
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
