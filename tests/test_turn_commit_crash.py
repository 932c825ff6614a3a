"""PostgreSQL killed between the two commits of a write turn (the turn with its call started;
then the call's result with the decision): the call ran once, its "started" survived, and the
retried turn runs it again under the same key, which the tool dedupes, and decides the turn.

Runs on a throwaway PostgreSQL cluster of its own (soak/stack.py), never the suite's: it is
killed with `pg_ctl -m immediate` (every backend dies at once, crash recovery on start)."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg
import pytest

from soak.stack import REPO, Stack, pg_bin

pytestmark = [
    pytest.mark.postgresql(reason="kills and restarts a PostgreSQL server"),
    pytest.mark.skipif(
        pg_bin() is None or not (pg_bin() / "initdb").exists(),
        reason="needs PostgreSQL's server binaries (CI installs them)",
    ),
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _helper(env: dict, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tests.turn_crash_helper", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _wait_for(predicate, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_postgres_killed_between_a_write_turns_two_commits_runs_the_call_once(tmp_path):
    # Outside pytest's own temporary directory, which the postgres user may not enter.
    workdir = Path(tempfile.mkdtemp(prefix="guardian-turn-crash-"))
    workdir.chmod(0o755)
    stack = Stack(workdir=workdir / "stack", pg_port=_free_port(), redis_port=0, web_port=0)
    stack.postgres_init()
    stack.postgres_start()
    try:
        stack.postgres_setup()
        env = {
            **os.environ,
            "DATABASE_URL": stack.database_url,
            "CELERY_BROKER_URL": "filesystem://",  # nothing is published to the suite's Redis
            "GUARDIAN_VAR_DIR": str(tmp_path / "var"),
            "GUARDIAN_TURN_LEASE_SECONDS": "5",
        }
        migrated = subprocess.run(
            [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert migrated.returncode == 0, migrated.stderr[-3000:]
        started = _helper(env, "start")
        assert started.returncode == 0, started.stderr[-3000:]
        run_id = int(started.stdout.split()[-1])
        first = _helper(env, "advance", str(run_id))
        assert first.stdout.split()[-1] == "continued", first.stderr[-3000:]

        def query(sql: str) -> list[tuple]:
            with psycopg.connect(stack.database_url.replace("postgres://", "postgresql://")) as db:
                return db.execute(sql).fetchall()

        calls = (
            "SELECT c.status, c.result, d.id FROM runs_toolcall c JOIN runs_turn t "
            f"ON t.id = c.turn_id LEFT JOIN runs_decision d ON d.turn_id = t.id "
            f"WHERE t.run_id = {run_id} AND c.tool = 'slow_tag'"
        )
        tags = "SELECT count(*) FROM runs_demosideeffect WHERE tool = 'slow_tag'"
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests.turn_crash_helper", "advance", str(run_id)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # The first commit landed (the turn with its call started) and the tag is made:
            # the worker is inside the call, before the second commit.
            _wait_for(lambda: query(tags)[0][0] == 1, timeout=60, what="the tag to be made")
            assert query(calls) == [("started", None, None)]
            stack.postgres_restart_immediate()
            out, err = worker.communicate(timeout=60)
        finally:
            worker.kill()
        assert "continued" not in out, err[-3000:]  # its second commit could not land

        assert query(calls) == [("started", None, None)]  # survived the crash, undecided
        assert query(tags)[0][0] == 1
        time.sleep(5.5)  # the dead worker's lease runs out
        retried = _helper(env, "advance", str(run_id))
        assert retried.stdout.split()[-1] == "continued", retried.stderr[-3000:]

        [(status, result, decision)] = query(calls)
        assert (status, result) == ("done", "Order ord_4472 tagged.")
        assert decision is not None
        assert query(tags)[0][0] == 1  # run again under its key: the tool made no second tag
        verified = subprocess.run(
            [sys.executable, "manage.py", "verify_log", str(run_id)],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert verified.returncode == 0, verified.stdout[-2000:] + verified.stderr[-2000:]
    finally:
        stack.postgres_stop("immediate")
        shutil.rmtree(workdir, ignore_errors=True)
