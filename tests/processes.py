"""Run Guardian's own commands in child processes, with a chosen environment."""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def child_env(**overrides: str | None) -> dict[str, str]:
    """This process's environment with `overrides` applied; a None value unsets the variable.

    The child reads no .env file (unless GUARDIAN_ENV_FILE is among the overrides): this
    process already took the developer's .env in, and a variable a test unsets stays unset.
    It draws no turn for audit unless told (as conftest's settings: a worker drawing 2 % of
    the turns would add escalations a test counts now and then)."""
    env = {"GUARDIAN_AUDIT_SAMPLE_SHARE": "0", **os.environ, "GUARDIAN_ENV_FILE": ""}
    for name, value in overrides.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_manage(*args: str, timeout: float = 60, **env: str | None) -> subprocess.CompletedProcess:
    """`python manage.py ARGS` in the repository, output captured as text."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


CELERY = str(Path(sys.executable).parent / "celery")


def worker_command(app: str) -> list[str]:
    """The command line of one solo-pool Celery worker of `app` (tests and the bench)."""
    return [
        CELERY,
        "--app",
        app,
        "worker",
        "--pool",
        "solo",
        "--loglevel",
        "INFO",
        "--without-heartbeat",
        "--without-gossip",
        "--without-mingle",
    ]


def start_worker(*, queue: str | None = None, **env: str | None) -> subprocess.Popen:
    """A real Celery worker process (solo pool: a task runs in the process a test may kill)."""
    command = worker_command("guardian_core.celery")
    if queue:
        command += ["--queues", queue, "--hostname", f"{queue}@%h"]
    # Its output goes to a file, not a pipe: nobody reads a pipe while the worker runs, and a
    # full one would stall a worker that has logged a few hundred tasks.
    log = tempfile.TemporaryFile(mode="w+", encoding="utf-8")  # noqa: SIM115 - closed by stop_worker
    worker = subprocess.Popen(
        command, cwd=REPO, env=child_env(**env), stdout=log, stderr=subprocess.STDOUT, text=True
    )
    _LOGS[worker.pid] = log
    return worker


_LOGS: dict[int, "tempfile._TemporaryFileWrapper"] = {}


def stop_worker(worker: subprocess.Popen) -> str:
    """Stop a worker (politely, then not) and return everything it printed."""
    if worker.poll() is None:
        worker.terminate()
    try:
        worker.wait(timeout=20)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
    log = _LOGS.pop(worker.pid, None)
    if log is None:
        return ""
    with log:
        log.seek(0)
        return log.read()
