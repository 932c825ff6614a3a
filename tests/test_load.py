"""`make load` at a tiny size: the load tool (python -m load) starts the soak's stack (its own
PostgreSQL and Redis, gunicorn, two workers, beat), steps 3 outside loops for 3 s with a
reviewer answering their held steps, and reports every figure with no error; the same with one
loop sending a token that does not exist fails, naming the error.

Like the soak, it is about the production shape: it runs in the PostgreSQL suite and is skipped
on the embedded SQLite. Both runs go at once, each on free ports of its own."""

import json
import os
import subprocess
import sys

import pytest

from soak.stack import missing_servers
from tests.processes import REPO, child_env
from tests.test_soak import _free_ports

pytestmark = [
    pytest.mark.worker,
    pytest.mark.postgresql(
        reason="the load test runs the production shape (PostgreSQL, Redis, gunicorn, "
        "workers, beat); the embedded SQLite is not what it measures"
    ),
]


def _load(figures, *extra: str) -> subprocess.Popen:
    pg_port, redis_port, web_port, wait_port = _free_ports(4)
    return subprocess.Popen(
        [sys.executable, "-m", "load", "--loops", "3", "--seconds", "3", "--held", "0.3"]
        + ["--json", str(figures), "--pg-port", str(pg_port), "--redis-port", str(redis_port)]
        + ["--web-port", str(web_port), "--wait-port", str(wait_port), *extra],
        cwd=REPO,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_a_tiny_load_reports_every_figure_with_no_error_and_a_bad_token_fails_it(tmp_path):
    missing = missing_servers()
    if missing and not os.environ.get("CI"):
        pytest.skip(f"the load test needs {'; '.join(missing)}")
    good_json, bad_json = tmp_path / "good.json", tmp_path / "bad.json"
    good, bad = _load(good_json), _load(bad_json, "--bad-token")
    good_output, _ = good.communicate(timeout=240)
    bad_output, _ = bad.communicate(timeout=240)

    assert good.returncode == 0, good_output[-6000:]
    result = json.loads(good_json.read_text())
    assert result["errors"] == {"count": 0, "first": []}
    assert result["loops"] == 3
    assert result["steps"] > 0
    assert result["steps_per_s"] > 0
    for call in ("start", "propose", "results"):
        assert result["calls"][call]["count"] > 0
        assert 0 < result["calls"][call]["p50_ms"] <= result["calls"][call]["p99_ms"]
    assert result["queue_page"]["count"] > 0
    assert result["queue_page"]["p95_ms"] > 0
    assert result["cpu"]["per_step_ms"] > 0
    assert result["cpu"]["by_process_s"].keys() >= {"web", "postgres", "redis", "worker1"}
    assert 0 < result["server"]["pg_connections_peak"] <= result["server"]["pg_max_connections"]
    for line in ("steps", "queue page p95", "cpu per step", "errors          0", "PASSED"):
        assert line in good_output

    assert bad.returncode == 1, bad_output[-6000:]
    failed = json.loads(bad_json.read_text())
    assert failed["errors"]["count"] > 0
    assert any("loop 0: start" in line and "HTTP 40" in line for line in failed["errors"]["first"])
    assert "FAILED" in bad_output
