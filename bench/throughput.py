"""`make bench`: decided turns per second through 1 and then 2 real Celery workers.

BENCH_RUNS runs (default 20) of BENCH_RUN_TURNS turns each (default 25) are started at once:
the scripted actor reads a different order every turn (so no exact-repeat stop) under a calm
scripted guardian that says the goal is reached on the last turn. Each worker is one process
(solo pool, concurrency 1) on a private queue. The clock runs from just before the first run is
started (its first turn is enqueued when it commits) until every run has finished; turns/s is
the decided turns over that time. BENCH_THROUGHPUT_PASSES passes per worker count (default 3),
alternating; the median pass is reported. The fan-out ratio is 2 workers' turns/s over 1's.
Uses the configured database and broker. Run alone: .venv/bin/python -m bench.throughput
"""

import os
import statistics
import time
import uuid
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from django.core.management import call_command  # noqa: E402

from bench.report import Report  # noqa: E402
from bench.workers import route_to, start_workers, stop_workers  # noqa: E402

RUNS = int(os.environ.get("BENCH_RUNS", "20"))
RUN_TURNS = int(os.environ.get("BENCH_RUN_TURNS", "25"))
WORKERS = (1, 2)
PASSES = int(os.environ.get("BENCH_THROUGHPUT_PASSES", "3"))  # per worker count
TIMEOUT_SECONDS = float(os.environ.get("BENCH_THROUGHPUT_TIMEOUT", "300"))


def scenario(number: int, turns: int) -> dict:
    """A run that reads `turns` different orders and is told on the last that it is done."""
    steps = [
        {
            "calls": [{"tool": "read_order", "arguments": {"order_id": f"ord_{number}_{i:04d}"}}],
            "message": "All orders read." if i == turns - 1 else "",
            "tokens": 1,
        }
        for i in range(turns)
    ]
    answers = [{} for _ in range(turns - 1)] + [{"goal_reached": 0.97}]
    return {
        "name": "bench-throughput",
        "goal": "Read every order, one a turn.",
        "tools": ["read_order"],
        "actor": {"turns": steps},
        "guardian": {"model_version": "scripted-bench", "turns": answers},
    }


def one_pass(workers: int, *, logs: Path) -> tuple[float, int, dict[str, int]]:
    """(seconds, decided turns, runs per final status) for RUNS runs through `workers`."""
    from runs.models import Decision, Run, RunStatus
    from runs.services import run_start

    queue = f"bench-{uuid.uuid4().hex[:8]}"
    route_to(queue)
    # The workers may run scripted adapters whatever DEBUG says: this is a bench run.
    processes = start_workers(workers, queue=queue, logs=logs, GUARDIAN_ALLOW_SCRIPTED_ADAPTERS="1")
    try:
        start = time.perf_counter()
        ids = [
            run_start(
                goal="Read every order, one a turn.",
                tools=["read_order"],
                actor="scripted",
                guardian="scripted",
                budgets={"max_turns": RUN_TURNS + 5},
                config={"scenario": scenario(n, RUN_TURNS)},
            ).pk
            for n in range(RUNS)
        ]
        active = Run.objects.filter(pk__in=ids, status__in=[RunStatus.PENDING, RunStatus.RUNNING])
        while active.exists():
            if time.perf_counter() - start > TIMEOUT_SECONDS:
                raise RuntimeError(f"runs not finished after {TIMEOUT_SECONDS:.0f} s (see {logs})")
            for process, log in processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a bench worker died:\n{log.read_text()[-3000:]}")
            time.sleep(0.02)
        seconds = time.perf_counter() - start
    finally:
        stop_workers(processes)
    decided = Decision.objects.filter(turn__run_id__in=ids).count()
    statuses: dict[str, int] = {}
    for status in Run.objects.filter(pk__in=ids).values_list("status", flat=True):
        statuses[status] = statuses.get(status, 0) + 1
    return seconds, decided, statuses


def measure(report: Report) -> dict[int, float]:
    """Report turns/s per worker count and the fan-out ratio; returns {workers: turns/s}."""
    from django.conf import settings
    from django.db import connection

    from demo.setup import demo_policy_version

    call_command("migrate", verbosity=0)
    demo_policy_version()
    settings.GUARDIAN_ALLOW_SCRIPTED_ADAPTERS = True
    broker = settings.CELERY_BROKER_URL.split(":", 1)[0]
    report.note(
        f"{RUNS} runs × {RUN_TURNS} turns, broker {broker}, database {connection.vendor}, "
        "one process per worker"
    )
    # The workers' logs stay behind for a look when a pass goes wrong (`make bench` clears them).
    logs = Path(settings.VAR_DIR) / "bench"
    # Passes alternate 1, 2, 2, 1, 1, 2, ... so that a machine that gets busier or quieter during
    # the bench weighs on both worker counts alike; each count's median pass is reported.
    order = [w for n in range(PASSES) for w in (WORKERS if n % 2 == 0 else WORKERS[::-1])]
    passes: dict[int, list[float]] = {w: [] for w in WORKERS}
    for workers in order:
        seconds, decided, statuses = one_pass(workers, logs=logs)
        expected = RUNS * RUN_TURNS
        if decided != expected or statuses != {"succeeded": RUNS}:
            raise RuntimeError(
                f"{workers} worker(s): {decided} turns decided (expected {expected}), "
                f"runs {statuses}: the bench runs must all succeed"
            )
        passes[workers].append(decided / seconds)
    rates: dict[int, float] = {}
    for workers, results in passes.items():
        rates[workers] = statistics.median(results)
        each = ", ".join(f"{rate:.0f}" for rate in results)
        report.add(
            f"turns/s, {workers} worker{'s' if workers > 1 else ''}",
            rates[workers],
            "/s",
            extra=f"median of {len(results)} passes ({each}), {RUNS * RUN_TURNS} turns each",
        )
    report.ratio("fan-out, 2 workers / 1 worker", rates[2] / rates[1])
    return rates


def main() -> None:
    report = Report("throughput")
    measure(report)
    report.finish()


if __name__ == "__main__":
    main()
