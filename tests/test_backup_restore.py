"""A backup taken while a real worker advances runs (some held for a person), restored into a
fresh database: the log verifies and replays identically there, every escalation open at the
backup is still open and a person can decide it, and every run caught mid-turn is swept and
finished by a worker started on the restored database (its task message was in the broker,
which no backup holds). On PostgreSQL (pg_dump / pg_restore) and SQLite (online backup)."""

import sqlite3
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from demo.setup import demo_policy_version
from escalations.models import Escalation, EscalationStatus
from guardian_core.celery import app as celery_app
from runs.backup import PG_CUSTOM_MAGIC, SQLITE_MAGIC, BackupError, pg_tool
from runs.models import Decision, Run, RunStatus
from runs.services import run_start
from tests.processes import run_manage, start_worker, stop_worker

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

LEASE_SECONDS = 5
REFUND = {"order_id": "ord_4472", "amount": 49.9}
IRREVERSIBLE = {"read_only": 0, "reversible_write": 0, "irreversible": 1.0, "regulated": 0}
# Held for a person at its second turn (an irreversible refund), then done once approved.
HELD = {
    "name": "held_refund",
    "goal": "Refund order ord_4472.",
    "acceptance_criteria": ["Refund issued"],
    "tools": ["read_order", "issue_refund"],
    "actor": {
        "turns": [
            {"calls": [{"tool": "read_order", "arguments": {"order_id": "ord_4472"}}]},
            {"calls": [{"tool": "issue_refund", "arguments": REFUND}]},
            {"calls": [], "message": "Refunded ord_4472."},
        ]
    },
    "guardian": {"risk": {"issue_refund": IRREVERSIBLE}, "turns": [{}, {}, {"goal_reached": 0.97}]},
}  # fmt: skip
# Never held: a few slow reads, so a worker is inside one of its turns when the backup runs.
SLOW = {
    "name": "slow_reads",
    "goal": "Check the courier's report on ord_4472.",
    "acceptance_criteria": ["Report read"],
    "tools": ["read_order", "slow_lookup"],
    "actor": {
        "turns": [
            {"calls": [{"tool": "read_order", "arguments": {"order_id": "ord_4472"}}]},
            {"calls": [{"tool": "slow_lookup", "arguments": {"topic": "courier", "seconds": 1.5}}]},
            {"calls": [{"tool": "slow_lookup", "arguments": {"topic": "damage", "seconds": 1.5}}]},
            {"calls": [{"tool": "slow_lookup", "arguments": {"topic": "photos", "seconds": 1.5}}]},
            {"calls": [], "message": "The courier confirmed the damage."},
        ]
    },
    "guardian": {"turns": [{}, {}, {}, {}, {"goal_reached": 0.97}]},
}  # fmt: skip

# Every escalation the test leaves open, decided by the reviewers' service in one process.
DECIDE_REST = """
from django.contrib.auth import get_user_model
from escalations.models import Escalation
from escalations.verdicts import escalation_resolve
reviewer = get_user_model().objects.get(username={username!r})
for pk in Escalation.objects.filter(status="open").values_list("pk", flat=True):
    escalation_resolve(escalation_id=pk, reviewer=reviewer, decision="approve")
"""
SWEEP = "from runs.sweeps import run_sweep_stalled; print(run_sweep_stalled())"


def database_url(settings_dict: dict, *, name: str | None = None) -> str:
    if settings_dict["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{name or settings_dict['NAME']}"
    return (
        f"postgres://{settings_dict['USER']}:{settings_dict['PASSWORD']}@"
        f"{settings_dict['HOST']}:{settings_dict['PORT']}/{name or settings_dict['NAME']}"
    )


@pytest.fixture
def restored_database(tmp_path):
    """A fresh, empty database to restore into (PostgreSQL: made and dropped here), and the
    variables its processes run with (SQLite: their own var directory, hence broker)."""
    db = settings.DATABASES["default"]
    if connection.vendor == "sqlite":
        var = tmp_path / "restored_var"
        var.mkdir()
        yield {"DATABASE_URL": database_url(db, name=str(tmp_path / "restored.sqlite3")),
               "GUARDIAN_VAR_DIR": str(var)}  # fmt: skip
        return
    name = f"{db['NAME']}_restore"
    with connection.cursor() as cursor:
        cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cursor.execute(f'CREATE DATABASE "{name}"')
    try:
        yield {"DATABASE_URL": database_url(db, name=name)}
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def purge_broker() -> None:
    with celery_app.connection_for_write() as broker:
        celery_app.control.purge(connection=broker)


def wait_for(predicate, *, timeout: float, what: str, poll: float = 0.2, tick=None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tick:
            tick()
        if predicate():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def manage_ok(*args: str, env: dict, timeout: float = 120) -> str:
    done = run_manage(*args, timeout=timeout, **env)
    assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


def restored_query(env: dict, sql: str) -> list[tuple]:
    """Rows of `sql` read straight from the restored database (no Django process to start)."""
    url = env["DATABASE_URL"]
    if url.startswith("sqlite:"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"), timeout=20)) as db:
            return db.execute(sql).fetchall()
    with psycopg.connect(url, autocommit=True) as db:
        return db.execute(sql).fetchall()


def aware(moment) -> datetime | None:
    """A stored time as an aware datetime (SQLite keeps UTC text, PostgreSQL a timestamptz)."""
    if moment is None or isinstance(moment, datetime):
        return moment
    return datetime.fromisoformat(moment).replace(tzinfo=UTC)


def restored_runs(env: dict) -> dict[int, tuple[str, datetime | None]]:
    rows = restored_query(env, "SELECT id, status, lease_expires_at FROM runs_run")
    return {pk: (status, aware(lease)) for pk, status, lease in rows}


def restored_open(env: dict) -> set[int]:
    rows = restored_query(env, "SELECT id FROM escalations_escalation WHERE status = 'open'")
    return {pk for (pk,) in rows}


def start(scenario: dict) -> Run:
    return run_start(
        goal=scenario["goal"],
        acceptance_criteria=scenario["acceptance_criteria"],
        tools=scenario["tools"],
        actor="scripted",
        guardian="scripted",
        config={"scenario": scenario},
    )


def statuses() -> dict[int, str]:
    return dict(Run.objects.values_list("pk", "status"))


def open_escalations() -> set[int]:
    return set(Escalation.objects.filter(status=EscalationStatus.OPEN).values_list("pk", flat=True))


def test_a_backup_taken_while_runs_advance_restores_whole_and_carries_on(
    reviewer, restored_database, tmp_path
):
    purge_broker()
    demo_policy_version()
    source_env = {
        "DATABASE_URL": database_url(settings.DATABASES["default"]),
        "GUARDIAN_DEADLINE_SECONDS": "0.5",
        "GUARDIAN_TURN_LEASE_SECONDS": str(LEASE_SECONDS),
    }
    worker = start_worker(**source_env)
    backup = tmp_path / ("guardian.dump" if connection.vendor == "postgresql" else "backup.sqlite3")
    try:
        held = [start(HELD) for _ in range(3)]
        slow = [start(SLOW) for _ in range(3)]
        wait_for(
            lambda: all(statuses()[run.pk] == RunStatus.WAITING for run in held),
            timeout=90,
            what="the three refunds held for a person",
        )
        wait_for(
            lambda: any(
                statuses()[run.pk] == RunStatus.RUNNING
                and Run.objects.filter(pk=run.pk, turns__decision__isnull=False).exists()
                for run in slow
            ),
            timeout=60,
            what="a slow run midway",
        )
        open_before = open_escalations()
        decisions_before = Decision.objects.count()
        manage_ok("backup", str(backup), env=source_env)
        running_after = [pk for pk, status in statuses().items() if status == RunStatus.RUNNING]
        backup_done = datetime.now().astimezone()
        # The worker goes on after the backup: the copy is of a moment, not of the end.
        wait_for(
            lambda: Decision.objects.count() > decisions_before,
            timeout=30,
            what="the worker to decide another turn",
        )
    finally:
        log = stop_worker(worker)
    assert len(open_before) >= 3, log[-2000:]
    assert running_after, "no run was still advancing when the backup ended"

    env = {**restored_database, "GUARDIAN_TURN_LEASE_SECONDS": str(LEASE_SECONDS)}
    restored = manage_ok("restore", str(backup), env=env)
    assert "restored" in restored
    # A second restore over it is refused: the database is no longer empty.
    again = run_manage("restore", str(backup), **env)
    assert again.returncode != 0
    assert "not empty" in again.stderr

    verified = manage_ok("verify_log", "--all", env=env)
    assert "every chain intact" in verified
    replayed = manage_ok("replay", "--all", "--quiet", env=env)
    assert " 0 different" in replayed, replayed
    ((first_decision,),) = restored_query(env, "SELECT min(id) FROM runs_decision")
    with pytest.raises(Exception, match="append-only"):  # the log's triggers came back
        restored_query(
            env, f"UPDATE runs_decision SET outcome = 'stop' WHERE id = {first_decision}"
        )
    runs = restored_runs(env)
    opened = restored_open(env)
    assert opened >= open_before, "an escalation open at the backup was lost"
    (decisions,) = restored_query(env, "SELECT count(*) FROM runs_decision")[0]
    assert decisions >= decisions_before
    for run in held:
        assert runs[run.pk][0] == RunStatus.WAITING
    # No run is half-done without a way on: each one running holds a lease that ends (then
    # the sweeper takes it) or none (the sweeper takes it once it is stale).
    caught = {pk: lease for pk, (status, lease) in runs.items() if status == RunStatus.RUNNING}
    assert caught, "the backup caught no run mid-way"
    for pk, lease in caught.items():
        assert lease is None or lease <= backup_done + timedelta(seconds=LEASE_SECONDS + 1), pk

    if connection.vendor == "postgresql":
        purge_broker()  # the source's task messages: the restored runs must not need them
    restored_worker = start_worker(**env, GUARDIAN_DEADLINE_SECONDS="0.5")
    try:
        sweep_env = {**env, "GUARDIAN_STALLED_AFTER_SECONDS": "1"}
        swept = [0.0]

        def sweep() -> None:
            """The beat's sweeper, every few seconds, as a process on the restored database."""
            if time.monotonic() - swept[0] >= 5:
                manage_ok("shell", "-c", SWEEP, env=sweep_env)
                swept[0] = time.monotonic()

        wait_for(
            lambda: all(status != RunStatus.RUNNING for status, _ in restored_runs(env).values()),
            timeout=120,
            poll=0.5,
            what="the sweeper and the restored worker to finish every run caught mid-way",
            tick=sweep,
        )
        # Every escalation still open is decided by a person, through the service: the first
        # by the operator's command, the others in one process.
        first, *_others = sorted(opened)
        manage_ok("resolve_escalation", str(first), "--approve", "--reviewer", reviewer.username,
                  env=env)  # fmt: skip
        manage_ok("shell", "-c", DECIDE_REST.format(username=reviewer.username), env=env)
        wait_for(
            lambda: (
                not restored_open(env)
                and all(
                    status in (RunStatus.SUCCEEDED, RunStatus.FAILED)
                    for status, _ in restored_runs(env).values()
                )
            ),
            timeout=120,
            poll=0.5,
            what="the approved runs to end",
            tick=sweep,
        )
    finally:
        restored_log = stop_worker(restored_worker)
    final = restored_runs(env)
    for pk in [*(run.pk for run in held), *caught]:
        assert final[pk][0] == RunStatus.SUCCEEDED, restored_log[-3000:]
    assert "every chain intact" in manage_ok("verify_log", "--all", env=env)
    assert " 0 different" in manage_ok("replay", "--all", "--quiet", env=env)


def test_restore_refuses_a_backup_of_the_other_kind_of_database(tmp_path):
    other = tmp_path / "other"
    other.write_bytes(SQLITE_MAGIC if connection.vendor == "postgresql" else PG_CUSTOM_MAGIC)
    with pytest.raises(CommandError, match="restores into the same kind of database"):
        call_command("restore", str(other))


def test_backup_never_overwrites_a_file(tmp_path):
    existing = tmp_path / "kept"
    existing.write_text("an older backup")
    with pytest.raises(CommandError, match="exists already"):
        call_command("backup", str(existing))
    assert existing.read_text() == "an older backup"


def test_a_missing_pg_client_is_named_with_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr("runs.backup.PG_BIN_GLOB", str(tmp_path / "none" / "*" / "bin"))
    with pytest.raises(BackupError, match="pg_dump was not found on PATH nor under .*postgresql"):
        pg_tool("pg_dump")
    with pytest.raises(BackupError, match="no executable pg_restore in"):
        pg_tool("pg_restore", bin_dir=str(tmp_path))


TRIGGERS_AND_RIGHTS = """
SELECT (SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'guardian%' AND NOT tgisinternal),
       (SELECT bool_and(prosecdef) FROM pg_proc WHERE proname IN ('guardian_purge_begin',
            'guardian_purge_end', 'guardian_purge_record', 'guardian_log_purging')),
       has_table_privilege('{role}', 'runs_decision', 'SELECT, INSERT'),
       has_table_privilege('{role}', 'runs_decision', 'TRUNCATE'),
       has_table_privilege('{role}', 'guardian_purge_log', 'SELECT'),
       has_function_privilege('{role}', 'guardian_purge_begin(text, text)', 'EXECUTE')
"""


@pytest.mark.postgresql(reason="roles, grants and definer functions are PostgreSQL's")
def test_a_postgresql_restore_keeps_the_triggers_and_grants_the_app_role_as_migrate_does(
    restored_database, tmp_path
):
    role = "guardian_app"
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
        if cursor.fetchone() is None:
            pytest.skip(f"no role {role} in this cluster (.ci/services.sh makes it)")
        cursor.execute(TRIGGERS_AND_RIGHTS.format(role=role))
        triggers, definer = cursor.fetchone()[:2]
    backup = tmp_path / "guardian.dump"
    manage_ok(
        "backup", str(backup), env={"DATABASE_URL": database_url(settings.DATABASES["default"])}
    )
    restored = manage_ok(
        "restore", str(backup), env={**restored_database, "GUARDIAN_DB_APP_ROLE": role}
    )
    assert f"the app's role {role} granted its rights" in restored
    sql = TRIGGERS_AND_RIGHTS.format(role=role)
    (row,) = restored_query(restored_database, sql)
    assert row == (triggers, definer, True, False, False, True)
    assert triggers >= 10
    assert definer is True
