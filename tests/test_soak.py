"""`make soak` at CI's size passes: the whole stack (its own PostgreSQL and Redis, gunicorn, two
workers, beat) under internal and external runs, worker SIGKILLs, a Redis and a PostgreSQL
restart, then every check of soak/checks.py, in a process of its own (python -m soak --ci).

The soak is about the production shape: it runs in the PostgreSQL suite and is skipped on the
embedded SQLite. It starts servers of its own on free ports, never the suite's (it restarts
them)."""

import json
import os
import socket
import subprocess
import sys

import pytest

from soak.stack import missing_servers
from tests.processes import REPO, child_env

pytestmark = [
    pytest.mark.worker,
    pytest.mark.postgresql(
        reason="the soak runs the production shape (PostgreSQL, Redis, gunicorn, workers, "
        "beat) and restarts its servers; the embedded SQLite has no server to restart"
    ),
]


def _free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    try:
        for probe in sockets:
            probe.bind(("127.0.0.1", 0))
        return [probe.getsockname()[1] for probe in sockets]
    finally:
        for probe in sockets:
            probe.close()


def test_the_soak_at_ci_size_passes_every_check_and_prints_its_figures(tmp_path):
    missing = missing_servers()
    if missing and not os.environ.get("CI"):
        pytest.skip(f"the soak needs {'; '.join(missing)}")
    pg_port, redis_port, web_port = _free_ports(3)
    figures = tmp_path / "soak.json"
    done = subprocess.run(
        [sys.executable, "-m", "soak", "--ci", "--json", str(figures)]
        + ["--pg-port", str(pg_port), "--redis-port", str(redis_port)]
        + ["--web-port", str(web_port)],
        cwd=REPO,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    result = json.loads(figures.read_text())
    failed = [check for check in result["checks"] if not check["passed"]]
    assert failed == [], failed
    # Every kind of run and every kind of fault happened, and the stack came back from each.
    assert result["runs"]["internal"] > 0
    assert result["runs"]["external"] > 0
    kinds = sorted({fault["kind"] for fault in result["faults"]})
    assert kinds == ["kill", "postgres", "redis"]
    assert result["recoveries"] == len(result["faults"])
    assert result["verdicts"]["given"] > 0
    for line in ("runs", "turns internal", "faults", "PASSED"):
        assert line in output
