"""`make bench`: the round trip of a task through a real worker, with the worker's database
connection kept across tasks (DATABASE_CONN_MAX_AGE=600, the default) and closed after each (0).

The task is advance_run for a run that does not exist: one conditional UPDATE and no turn, the
cheapest thing a worker does with the database. Uses the configured database and broker (the
embedded default unless DATABASE_URL / CELERY_BROKER_URL say otherwise) and starts its own
worker on a private queue. BENCH_ROUND_TRIPS tasks per setting (default 200).
Run alone: .venv/bin/python -m bench.task_roundtrip
"""

import os
import statistics
import time
import uuid
from functools import partial
from pathlib import Path

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402

from bench.report import Report  # noqa: E402
from bench.workers import start_workers, stop_workers  # noqa: E402
from runs.tasks import advance_run  # noqa: E402

ROUND_TRIPS = int(os.environ.get("BENCH_ROUND_TRIPS", "200"))


def round_trips(conn_max_age: str) -> list[float]:
    """Milliseconds of each round trip through a fresh worker with this CONN_MAX_AGE."""
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    logs = Path(settings.VAR_DIR) / "bench"
    workers = start_workers(1, queue=queue, logs=logs, DATABASE_CONN_MAX_AGE=conn_max_age)
    try:
        send = partial(advance_run.apply_async, args=[-1], queue=queue, ignore_result=False)
        send().get(timeout=60)  # warm up
        times = []
        for _ in range(ROUND_TRIPS):
            start = time.perf_counter()
            # The turn task stores no result by default: asked for here, so get() waits for it.
            answer = send().get(timeout=60, interval=0.005)
            times.append((time.perf_counter() - start) * 1000)
            if answer != "skipped":  # no round trip happened: do not report one
                raise RuntimeError(f"advance_run(-1) answered {answer!r}, not 'skipped'")
        return times
    finally:
        stop_workers(workers)


def measure(report: Report) -> dict[str, float]:
    """Report and return the median ms of a round trip per setting, and their ratio."""
    # The worker's one UPDATE needs the runs table: a fresh clone has no database yet.
    call_command("migrate", verbosity=0)
    broker = settings.CELERY_BROKER_URL.split(":", 1)[0]
    database = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    report.note(f"{ROUND_TRIPS} tasks per setting, broker {broker}, database {database}")
    results = {age: round_trips(age) for age in ("600", "0")}
    medians = {}
    for age, times in results.items():
        label = "kept (CONN_MAX_AGE=600)" if age != "0" else "closed each task (0)"
        p90 = statistics.quantiles(times, n=10)[-1]
        medians[label] = statistics.median(times)
        report.add(f"connection {label}", medians[label], "ms", extra=f"p90 {p90:.2f} ms")
    first, last = medians.values()
    report.ratio("closed each task / kept", last / first)
    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        report.note("the embedded filesystem broker polls its folder every 0.1 s: most of it")
    return medians


def main() -> None:
    report = Report("task round trip")
    measure(report)
    report.finish()


if __name__ == "__main__":
    main()
