"""`make bench` runs end to end on a fresh clone's embedded default: a tiny configuration of the
real entry point, in a process of its own, so the bench cannot silently break again (it once
failed with `no such table: runs_run` because nothing migrated)."""

import json
import sqlite3
import subprocess
import sys

import pytest

from tests.processes import REPO, child_env

TINY = {
    "BENCH_TURNS": "12",
    "BENCH_ENGINE_NUMBER": "5",
    "BENCH_RUNS": "2",
    "BENCH_RUN_TURNS": "3",
    "BENCH_LOCAL_ANSWERS": "3",
    "BENCH_ROUND_TRIPS": "3",
    "BENCH_THROUGHPUT_TIMEOUT": "60",
    "BENCH_THROUGHPUT_PASSES": "1",
    "BENCH_QUEUE_ROWS": "300",
    "BENCH_RUN_ROWS": "300",
    "BENCH_PAGE_REQUESTS": "3",
    "BENCH_REPLAY_TURNS": "200",
    "BENCH_REPLAY_PASSES": "1",
    "BENCH_GATE_ROWS": "300",
    "BENCH_EXTERNAL_STEPS": "20",
}
MEASURED = (
    "engine",
    "durable turn",
    "throughput",
    "local guardian",
    "task round trip",
    "replay",
    "gate",
    "external step",
    "pages",
)


@pytest.mark.worker
def test_make_bench_runs_every_section_on_a_fresh_embedded_default(tmp_path):
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "bench"],
        cwd=REPO,
        # A fresh clone: no database yet, no servers, the embedded SQLite file and broker.
        env=child_env(
            GUARDIAN_VAR_DIR=str(tmp_path / "var"),
            DATABASE_URL=None,
            CELERY_BROKER_URL=None,
            CELERY_RESULT_BACKEND=None,
            BENCH_SKIP=None,
            BENCH_JSON=str(out),
            **TINY,
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())
    assert figures["meta"]["database"].startswith("sqlite")
    assert figures["meta"]["broker"] == "filesystem"
    for section in MEASURED:
        values = figures[section]
        assert "error" not in values, (section, values)
        assert "skipped" not in values, (section, values)
        assert values, section
        assert all(f["value"] > 0 for f in values.values()), (section, values)
    assert set(figures["throughput"]) == {
        "turns/s, 1 worker",
        "turns/s, 2 workers",
        "fan-out, 2 workers / 1 worker",
    }
    # LangGraph runs on PostgreSQL only, and says so.
    assert "needs PostgreSQL" in figures["langgraph"]["skipped"]
    assert figures["replay"]["decisions replayed per second"]["value"] > 0
    # The queue page answered, and every row the section made is gone again.
    assert figures["pages"]["queue page, first page"]["note"].endswith("HTTP 200")
    assert figures["pages"]["live poll, nothing changed"]["note"].endswith("HTTP 204")
    assert figures["pages"]["runs list, first page"]["note"].endswith("HTTP 200")
    with sqlite3.connect(tmp_path / "var" / "guardian.sqlite3") as db:
        left = db.execute("SELECT count(*) FROM runs_run WHERE goal = 'bench: queue page'")
        assert left.fetchone() == (0,)
        left = db.execute("SELECT count(*) FROM runs_run WHERE actor = 'bench-run-list'")
        assert left.fetchone() == (0,)
    assert "skipped: needs PostgreSQL" in result.stdout
