"""`make bench`: the round trip of a task through a real worker, with the worker's database
connection kept across tasks (DATABASE_CONN_MAX_AGE=600, the default) and closed after each (0).

The task is advance_run for a run that does not exist: one conditional UPDATE and no turn, the
cheapest thing a worker does with the database. Uses the configured database and broker (the
embedded default unless DATABASE_URL / CELERY_BROKER_URL say otherwise) and starts its own
worker on a private queue. Run: .venv/bin/python -m bench.task_roundtrip
"""

import os
import statistics
import time
import uuid

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "guardian_core.settings")
django.setup()

from runs.tasks import advance_run  # noqa: E402
from tests.processes import start_worker, stop_worker  # noqa: E402

ROUND_TRIPS = int(os.environ.get("BENCH_ROUND_TRIPS", "200"))


def measure(conn_max_age: str) -> list[float]:
    queue = f"bench-{uuid.uuid4().hex[:8]}"
    worker = start_worker(queue=queue, DATABASE_CONN_MAX_AGE=conn_max_age)
    try:
        advance_run.apply_async(args=[-1], queue=queue).get(timeout=60)  # warm up
        times = []
        for _ in range(ROUND_TRIPS):
            start = time.perf_counter()
            advance_run.apply_async(args=[-1], queue=queue).get(timeout=30, interval=0.005)
            times.append((time.perf_counter() - start) * 1000)
        return times
    finally:
        stop_worker(worker)


def main() -> None:
    from django.conf import settings

    print(
        f"task round trip, {ROUND_TRIPS} tasks, broker {settings.CELERY_BROKER_URL.split(':')[0]},"
        f" database {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}"
    )
    results = {age: measure(age) for age in ("600", "0")}
    for age, times in results.items():
        label = "kept (CONN_MAX_AGE=600)" if age != "0" else "closed each task (0)"
        p90 = statistics.quantiles(times, n=10)[-1]
        median = statistics.median(times)
        print(f"  connection {label:<26} median {median:6.2f} ms   p90 {p90:6.2f} ms")
    ratio = statistics.median(results["0"]) / statistics.median(results["600"])
    print(f"  closing the connection every task is {ratio:.2f}× slower (median)")
    if settings.CELERY_BROKER_URL.startswith("filesystem://"):
        print("  (the embedded filesystem broker polls its folder every 0.1 s: that is most of it)")


if __name__ == "__main__":
    main()
