"""`make bench` runs end to end on a fresh clone's embedded default: a tiny configuration of the
real entry point, in a process of its own, so the bench cannot silently break again (it once
failed with `no such table: runs_run` because nothing migrated). On PostgreSQL, the durable
turn against LangGraph's two modes, with what each round costs the server."""

import json
import sqlite3
import subprocess
import sys

import pytest
from django.conf import settings
from django.db import connection

from guardian_core.celery import app as celery_app
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
    "BENCH_EXTERNAL_FIRST": "1",
    "BENCH_MCP_CALLS": "20",
    "BENCH_MCP_PASSES": "1",
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
    "mcp gateway",
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
        timeout=300,
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


ONLY_THE_TURN = (
    "engine,throughput,local guardian,task round trip,replay,shadow,gate,external step,"
    "mcp gateway,pages"
)


@pytest.mark.skipif(
    connection.vendor != "postgresql", reason="LangGraph's PostgresSaver and pg_stat_* need it"
)
@pytest.mark.django_db(transaction=True)
def test_bench_compares_the_turn_with_langgraph_looping_and_per_invoke_with_server_counts(
    tmp_path,
):
    pytest.importorskip("langgraph.checkpoint.postgres", reason="the bench extra is not installed")
    db = settings.DATABASES["default"]
    out = tmp_path / "bench.json"
    result = subprocess.run(
        [sys.executable, "-m", "bench"],
        cwd=REPO,
        env=child_env(
            # This test's database, not the one DATABASE_URL names.
            DATABASE_URL=f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}"
            f"/{db['NAME']}",
            GUARDIAN_VAR_DIR=str(tmp_path / "var"),
            BENCH_SKIP=ONLY_THE_TURN,
            BENCH_JSON=str(out),
            BENCH_TURNS="12",
        ),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    # The durable turn's publishing turns left tasks for a worker that is not there.
    with celery_app.connection_for_write() as broker:
        celery_app.control.purge(connection=broker)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    figures = json.loads(out.read_text())
    guardian, langgraph = figures["durable turn"], figures["langgraph"]
    assert "error" not in guardian, guardian
    assert "error" not in langgraph, langgraph
    # Both LangGraph modes are timed, per window, and both ratios are given.
    for window in ("turns 1-10", "turns 2-11"):
        for name in (
            f"LangGraph loop (one invoke), {window}",
            f"LangGraph one invoke per round, {window}",
            f"Guardian in-slice / LangGraph loop, {window}",
            f"Guardian in-slice / LangGraph per-invoke, {window}",
            f"  Guardian publishing / LangGraph per-invoke, {window}",
        ):
            assert langgraph[name]["value"] > 0, name
        # What each round costs the server, from PostgreSQL's own counters.
        for section, name in (
            (guardian, f"  in-slice turn, {window}"),
            (guardian, f"  publishing turn, {window}"),
            (langgraph, f"  loop round, {window}"),
            (langgraph, f"  per-invoke round, {window}"),
        ):
            assert section[name]["unit"] == "commits", name
            assert section[name]["value"] >= 1, (name, section[name])
            assert section[f"{name}: statements"]["value"] >= 1, name
            assert section[f"{name}: rows written"]["value"] >= 1, name
            assert section[f"{name}: WAL writes"]["value"] >= 0, name
            assert section[f"{name}: WAL syncs"]["value"] >= 0, name
    assert "durability=sync, the slow mode" in result.stdout
    assert "per round, turns 1-10: Guardian in-slice " in result.stdout
    assert "LangGraph loop " in result.stdout.split("per round, turns 1-10: ", 1)[1]
    assert "synchronous_commit" in result.stdout
    # The checkpointers' schemas are gone again.
    with connection.cursor() as cursor:
        cursor.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'bench_langgraph%'")
        assert cursor.fetchall() == []
