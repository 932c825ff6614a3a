"""Real Celery worker processes for the bench: one process each (solo pool, concurrency 1), on
a private queue, logging to a file (a pipe nobody reads would fill and stall a busy worker)."""

import subprocess
import time
from pathlib import Path

from tests.processes import REPO, child_env, worker_command

READY_SECONDS = 60


def route_to(queue: str) -> None:
    """Send this process's turn tasks to `queue` (what bench/celery_app.py does in a worker)."""
    import bench.celery_app

    bench.celery_app.queue = queue
    # Celery builds its router once, at the first send: one built before bench.celery_app set
    # the route (an earlier section started a run) would not know it. Build it again.
    amqp = bench.celery_app.app.amqp
    amqp.flush_routes()
    vars(amqp).pop("router", None)


def start_workers(count: int, *, queue: str, logs: Path, **env: str | None) -> list:
    """`count` worker processes consuming `queue`, returned once every one says it is ready."""
    logs.mkdir(parents=True, exist_ok=True)
    workers = []
    for n in range(1, count + 1):
        log = logs / f"{queue}-{n}.log"
        command = [
            *worker_command("bench.celery_app"),
            "--queues",
            queue,
            "--hostname",
            f"{queue}-{n}@%h",
        ]
        with log.open("w") as out:
            process = subprocess.Popen(
                command,
                cwd=REPO,
                env=child_env(BENCH_QUEUE=queue, **env),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        workers.append((process, log))
    deadline = time.monotonic() + READY_SECONDS
    for process, log in workers:
        while " ready." not in log.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                stop_workers(workers)
                raise RuntimeError(f"a bench worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
    return workers


STOP_GRACE_SECONDS = 2.0


def stop_workers(workers: list) -> None:
    """Stop the workers: politely, then, after a short grace, not. The bench stops them once
    its tasks are done, so nothing is in flight; a warm shutdown on the filesystem broker takes
    seconds, which a tiny bench run would spend mostly waiting."""
    for process, _ in workers:
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_GRACE_SECONDS
    for process, _ in workers:
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
