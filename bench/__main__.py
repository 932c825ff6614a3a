"""`make bench` (`python -m bench`): every benchmark in order, each printing medians and ratios,
all figures into one JSON file when BENCH_JSON names it (the file is rewritten by each run).

Sections, in this order (names as in BENCH_SKIP and as keys of the JSON):
    engine           the engine's pure functions, µs
    durable turn     one durable turn inline (run_advance) at turns 1-10 and at the end of a
                     BENCH_TURNS-turn run (default 500), and over all of it, ms and SQL
                     statements; on PostgreSQL its commits, rows written, WAL writes and syncs
                     (bench/pg_counts.py; BENCH_PG_COUNTS=off leaves them out)
    langgraph        the same loop in LangGraph + PostgresSaver on the same database, in two
                     modes: one invoke running every round (the loop, the in-slice turn's peer)
                     and one invoke per round (the slow mode), in blocks of 10 alternating with
                     Guardian's turns; ms, statements, commits, WAL writes and syncs per round,
                     and the ratios Guardian / LangGraph (PostgreSQL and the `bench` extra only)
    throughput       decided turns/s through 1 and 2 real Celery workers, and the fan-out ratio
    local guardian   the built-in guardian's answer() over all six conditions, ms
    task round trip  a task through a real worker, connection kept or closed per task, ms
    replay           decisions replayed per second over one generated run of BENCH_REPLAY_TURNS
                     turns (20 000), the median of BENCH_REPLAY_PASSES passes (bench/replay.py)
    shadow           a shadow trial's pass over a BENCH_SHADOW_TURNS-turn run: ms per decision at
                     the start and the end (bench/shadow.py)
    gate             the policy version's regression gate at 1 000, 10 000 and BENCH_GATE_ROWS
                     (100 000) labelled examples: ms per report, rows read (bench/gate.py)
    external step    what Guardian adds to each step of an agent loop that runs elsewhere: the
                     calls before and after a step at steps 1-10 and at the end of a
                     BENCH_EXTERNAL_STEPS-step run (500), server side and end to end through
                     the Python client to gunicorn on 127.0.0.1, and the first calls of
                     BENCH_EXTERNAL_FIRST (3) fresh gunicorn processes, ms
                     (bench/external_step.py)
    mcp gateway      what the MCP gateway adds to a read-only tool call: BENCH_MCP_CALLS (300)
                     calls with the SDK's client, directly to a test upstream and through
                     `manage.py mcp_gateway`, over stdio and Streamable HTTP, BENCH_MCP_PASSES
                     (3) passes; medians, p95 and the added latency; the first call of a fresh
                     gateway process (BENCH_MCP_FIRST_CALLS, 3), ms (bench/mcp_gateway.py)
    pages            the reviewers' queue at BENCH_QUEUE_ROWS open escalations (100 000): the
                     page, a filtered page, the next page, the live poll, "next", ms and SQL
                     statements (bench/queue_page.py); then the auditors' runs list at
                     BENCH_RUN_ROWS runs (100 000): the first page, filtered pages, pages by
                     cursor, searches of the goal, ms and SQL statements (bench/run_list_page.py)

Runs on the configured database and broker: the embedded default (SQLite and the filesystem
broker under GUARDIAN_VAR_DIR, migrated first) unless DATABASE_URL / CELERY_BROKER_URL say
otherwise. A section that fails prints its traceback and the others still run; the exit code
is then 1. Knobs (environment): BENCH_TURNS, BENCH_RUNS, BENCH_RUN_TURNS, BENCH_THROUGHPUT_PASSES,
BENCH_ENGINE_NUMBER, BENCH_LOCAL_ANSWERS, BENCH_ROUND_TRIPS, BENCH_QUEUE_ROWS, BENCH_RUN_ROWS,
BENCH_PAGE_REQUESTS,
BENCH_REPLAY_TURNS, BENCH_REPLAY_PASSES, BENCH_SHADOW_TURNS, BENCH_GATE_ROWS, BENCH_EXTERNAL_STEPS,
BENCH_EXTERNAL_FIRST, BENCH_PG_COUNTS, BENCH_MCP_CALLS, BENCH_MCP_PASSES, BENCH_MCP_BLOCK,
BENCH_MCP_FIRST_CALLS,
BENCH_SKIP (comma-separated section names; spaces or underscores).
"""

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402

from bench.report import Report  # noqa: E402

SECTIONS = (
    "engine",
    "durable turn",
    "langgraph",
    "throughput",
    "local guardian",
    "task round trip",
    "replay",
    "shadow",
    "gate",
    "external step",
    "mcp gateway",
    "pages",
)
NOT_BUILT: dict[str, str] = {}


def skipped_by_env() -> set[str]:
    names = {n.strip().replace("_", " ") for n in os.environ.get("BENCH_SKIP", "").split(",")}
    unknown = names - set(SECTIONS) - {""}
    if unknown:
        raise SystemExit(f"BENCH_SKIP: unknown section(s) {sorted(unknown)}; known: {SECTIONS}")
    return names & set(SECTIONS)


def write_meta() -> None:
    """Start BENCH_JSON afresh with what this run ran on, so two files can be compared."""
    path = os.environ.get("BENCH_JSON")
    if not path:
        return
    db = settings.DATABASES["default"]
    meta = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "database": f"{connection.vendor} {Path(str(db['NAME'])).name}",
        "broker": settings.CELERY_BROKER_URL.split(":", 1)[0],
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "knobs": {k: v for k, v in sorted(os.environ.items()) if k.startswith("BENCH_")},
    }
    Path(path).write_text(json.dumps({"meta": meta}, indent=2, sort_keys=True) + "\n")


class Runner:
    def __init__(self) -> None:
        self.skip = skipped_by_env()
        self.failed: list[str] = []

    def section(self, name: str, body: Callable[[Report], object]) -> object:
        """Run one section into its own Report; a failure is printed, recorded and survived."""
        report = Report(name)
        result = None
        started = time.perf_counter()
        try:
            if name in self.skip:
                report.skip("BENCH_SKIP names it")
            else:
                result = body(report)
        except (Exception, SystemExit) as exc:  # SystemExit: durable_turn's "the run must go on"
            traceback.print_exc()
            self.failed.append(name)
            report.fail(f"{type(exc).__name__}: {exc}")
        report.note(f"({time.perf_counter() - started:.1f} s)")
        report.finish()
        return result


def engine(report: Report) -> None:
    from bench import engine

    engine.measure(report)


def durable_and_langgraph(runner: Runner) -> None:
    """Guardian's durable turn, and LangGraph's rounds (both modes) in blocks between
    Guardian's blocks."""
    from bench import durable_turn, langgraph_round

    why_not = "BENCH_SKIP names it" if "langgraph" in runner.skip else langgraph_round.unavailable()
    if why_not or "durable turn" in runner.skip:
        runner.section("durable turn", durable_turn.measure)
        runner.section("langgraph", lambda r: langgraph_round.measure_alone(r, why_not))
        return
    with langgraph_round.Contenders(turns=durable_turn.TURNS) as contenders:
        guardian = runner.section(
            "durable turn", lambda r: durable_turn.measure(r, between=contenders.advance_to)
        )

        def compare(report: Report) -> None:
            if guardian is None:  # Guardian's section failed part-way: finish LangGraph alone
                contenders.advance_to(durable_turn.TURNS)
            else:
                report.note(
                    f"alternating with Guardian's turns in blocks of {durable_turn.BLOCK}, "
                    "same process, same database"
                )
            langgraph_round.report_rounds(report, contenders, guardian)

        runner.section("langgraph", compare)


def replay_in_its_own_process(report: Report) -> None:
    """bench/replay.py in a process of its own: the sections before it leave threads running
    (LangGraph's, the guardian's deadlines), and replay forks its workers only from a process
    with none (runs/replay_parallel.py). Its figures come back through a JSON file."""
    with tempfile.TemporaryDirectory() as tmp:
        figures_file = Path(tmp) / "replay.json"
        sys.stdout.flush()
        done = subprocess.run(
            [sys.executable, "-m", "bench.replay"],
            env={**os.environ, "BENCH_JSON": str(figures_file), "BENCH_CHILD": "1"},
            check=False,
        )
        if done.returncode:
            raise RuntimeError(f"bench.replay exited {done.returncode}")
        figures = json.loads(figures_file.read_text()).get("replay", {})
    for name, figure in figures.items():
        report.record(name, figure["value"], figure["unit"], extra=figure["note"])


def cancel_bench_runs() -> int:
    """Cancel the durable-turn section's run, left running at the end of its script, so that a
    worker on this database later (`make demo`'s, the sweeper's) does not go on advancing it."""
    from runs.models import Run, RunStatus
    from runs.services import run_cancel

    left = Run.objects.filter(
        status=RunStatus.RUNNING, config__scenario__name="bench-durable-turn"
    ).values_list("pk", flat=True)
    return sum(run_cancel(run_id=pk) for pk in list(left))


def main() -> int:
    turns = int(os.environ.get("BENCH_TURNS", "500"))
    if turns < 11:
        raise SystemExit("BENCH_TURNS must be at least 11 (the first window is turns 1-10)")
    db = settings.DATABASES["default"]
    print(
        f"Guardian bench: database {connection.vendor} {Path(str(db['NAME'])).name}, "
        f"broker {settings.CELERY_BROKER_URL.split(':', 1)[0]}, "
        f"{os.cpu_count()} CPUs, Python {platform.python_version()}; medians unless said"
    )
    write_meta()
    # The bench workers' logs, kept for a look after a failed pass; one run's worth at a time.
    shutil.rmtree(Path(settings.VAR_DIR) / "bench", ignore_errors=True)

    from bench import (
        external_step,
        gate,
        local_guardian,
        mcp_gateway,
        queue_page,
        run_list_page,
        shadow,
        task_roundtrip,
        throughput,
    )

    runner = Runner()
    runner.section("engine", engine)
    try:
        durable_and_langgraph(runner)
    finally:
        cancel_bench_runs()
    runner.section("throughput", throughput.measure)
    runner.section("local guardian", local_guardian.measure)
    runner.section("task round trip", task_roundtrip.measure)
    runner.section("replay", replay_in_its_own_process)
    runner.section("shadow", shadow.measure)
    runner.section("gate", gate.measure)
    runner.section("external step", external_step.measure)
    runner.section("mcp gateway", mcp_gateway.measure)
    for name, why in NOT_BUILT.items():
        runner.section(name, lambda r, why=why: r.skip(why))
    runner.section("pages", lambda r: (queue_page.measure(r), run_list_page.measure(r)))
    if runner.failed:
        print(f"FAILED sections: {', '.join(runner.failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
