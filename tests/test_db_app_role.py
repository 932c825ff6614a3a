"""The decision log against the app's own database role (PostgreSQL): the app runs as a role
that does not own the tables (GUARDIAN_DB_APP_ROLE, runs/db_roles.py), so it cannot switch the
log's triggers off, drop them or truncate past them, and its one way to delete the log is the
purge door, which records every purge where the app cannot write (runs/log_triggers.py).

The tests act as the role `guardian_app` (NOLOGIN, granted to the suite's login role by
.ci/services.sh) through SET ROLE, after granting it exactly what `migrate` grants."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction

from escalations.models import LabelledExample, Verdict
from escalations.verdicts import escalation_resolve
from runs.audit import run_purge
from runs.db_roles import app_role_grant, grant_app_role_after_migrate
from runs.log_triggers import log_purge
from runs.models import Decision, Run, RunStatus
from tests.factories import make_decision, make_escalation, make_turn
from tests.runs_helpers import drive, start

APP_ROLE = "guardian_app"

SQLITE_LACKS = (
    "database roles, grants and SECURITY DEFINER functions: SQLite has none (whoever may "
    "write the file may do anything to it)"
)
pytestmark = [
    pytest.mark.postgresql(reason=SQLITE_LACKS),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason=f"PostgreSQL only: {SQLITE_LACKS}"
    ),
    pytest.mark.django_db,
]


@pytest.fixture
def app_role():
    """The app's role, granted what `migrate` grants it, inside this test's transaction."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_has_role(current_user, oid, 'MEMBER') FROM pg_roles WHERE rolname = %s",
            [APP_ROLE],
        )
        row = cursor.fetchone()
    if row is None or not row[0]:
        pytest.fail(
            f"the role {APP_ROLE} is missing or not granted to this login: .ci/services.sh "
            f"makes it; on another cluster, as a superuser: CREATE ROLE {APP_ROLE} NOLOGIN; "
            f"GRANT {APP_ROLE} TO <the suite's login role>"
        )
    app_role_grant(connection, APP_ROLE)
    return APP_ROLE


def _as_app(*statements: tuple[str, list] | str) -> str:
    """Run the statements as the app's role in a savepoint: "allowed", or "refused: " and the
    database's message (the savepoint's rollback also ends the SET ROLE)."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET ROLE {APP_ROLE}")
            for statement in statements:
                sql, params = (statement, []) if isinstance(statement, str) else statement
                cursor.execute(sql, params)
            cursor.execute("RESET ROLE")
    except DatabaseError as exc:
        return f"refused: {exc}"
    return "allowed"


def _as_owner(*statements: str) -> str:
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            for sql in statements:
                cursor.execute(sql)
    except DatabaseError as exc:
        return f"refused: {exc}"
    return "allowed"


@pytest.fixture
def no_deferred_checks():
    """TRUNCATE refuses to run while the test's transaction holds deferred key checks."""
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
    yield
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")


@pytest.fixture
def log_rows(django_user_model):
    """One decision, one verdict and one labelled example, by table."""
    reviewer = django_user_model.objects.create(username="role-reviewer")
    turn = make_turn()
    decision = make_decision(turn=turn)
    verdict = Verdict.objects.create(
        escalation=make_escalation(turn=turn), decision="approve", reviewer=reviewer
    )
    example = LabelledExample.objects.create(
        condition="integrity",
        projection={"goal": "g"},
        label=True,
        source="human",
        question_set_version="q",
        model_version="m",
        verdict=verdict,
    )
    return {
        "runs_decision": decision.pk,
        "escalations_verdict": verdict.pk,
        "escalations_labelledexample": example.pk,
    }


def _purge_log() -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT db_user, actor, reason, txid = txid_current() "
            "FROM guardian_purge_log ORDER BY id"
        )
        return cursor.fetchall()


def _purge_rows() -> dict[str, list[int]]:
    """The ids each table lost in this transaction's purges."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name, ids FROM guardian_purge_rows WHERE txid = txid_current() "
            "ORDER BY id"
        )
        taken: dict[str, list[int]] = {}
        for table, ids in cursor.fetchall():
            taken.setdefault(table, []).extend(ids or [])
        return taken


LOG_TABLES = ["runs_decision", "escalations_verdict", "escalations_labelledexample"]


@pytest.mark.parametrize("table", LOG_TABLES)
def test_the_old_purge_setting_lets_the_app_role_delete_nothing(app_role, log_rows, table):
    answer = _as_app(
        "SET LOCAL guardian.purge = 'on'",
        (f"DELETE FROM {table} WHERE id = %s", [log_rows[table]]),
    )
    assert answer.startswith("refused: the decision log is append-only"), answer


@pytest.mark.parametrize("table", LOG_TABLES)
def test_the_app_role_cannot_switch_the_log_triggers_off(app_role, log_rows, table):
    trigger = {
        "runs_decision": "guardian_decision_append_only",
        "escalations_verdict": "guardian_verdict_no_delete",
        "escalations_labelledexample": "guardian_example_final",
    }[table]
    for sql in (
        f"ALTER TABLE {table} DISABLE TRIGGER USER",
        f"ALTER TABLE {table} DISABLE TRIGGER {trigger}",
        f"DROP TRIGGER {trigger} ON {table}",
    ):
        answer = _as_app(sql)
        # "of table" for ALTER TABLE, "of relation" for DROP TRIGGER
        assert answer.startswith("refused: must be owner of "), (sql, answer)
        assert answer.endswith(f" {table}"), (sql, answer)
    answer = _as_app(f"TRUNCATE {table} CASCADE")
    assert answer.startswith("refused: permission denied for table"), answer
    # Replication mode skips every ordinary trigger; only a superuser may enter it.
    answer = _as_app("SET session_replication_role = replica")
    assert answer.startswith("refused: permission denied to set parameter"), answer
    answer = _as_app(
        "CREATE OR REPLACE FUNCTION guardian_log_purging() RETURNS boolean "
        "AS 'SELECT true' LANGUAGE sql"
    )
    assert answer.startswith("refused: "), answer
    assert "must be owner" in answer or "permission denied" in answer, answer


@pytest.mark.parametrize("table", LOG_TABLES)
def test_truncate_is_refused_outside_a_purge_even_for_the_owner(
    log_rows, no_deferred_checks, table
):
    answer = _as_owner(f"TRUNCATE {table} CASCADE")
    assert answer.startswith(
        f"refused: the decision log is append-only: TRUNCATE of {table} refused"
    ), answer


@pytest.mark.parametrize(
    "sql",
    [
        "INSERT INTO guardian_purge_grant (txid) VALUES (txid_current())",
        "INSERT INTO guardian_purge_log (txid, db_user, actor, reason, backend_pid) "
        "VALUES (txid_current(), 'x', 'x', 'x', 1)",
        "UPDATE guardian_purge_log SET reason = 'nothing to see'",
        "DELETE FROM guardian_purge_log",
        "DELETE FROM guardian_purge_grant",
        "SELECT * FROM guardian_purge_log",
        "INSERT INTO guardian_purge_rows (txid, table_name) VALUES (1, 'runs_run')",
        "DELETE FROM guardian_purge_rows",
    ],
)
def test_the_app_role_cannot_touch_the_purge_door_tables(app_role, sql):
    answer = _as_app(sql)
    assert answer.startswith("refused: permission denied for table guardian_purge_"), answer


def test_a_temporary_table_cannot_stand_in_for_the_purge_grant(app_role, log_rows):
    """A guard of the functions' search_path (the app role may make temporary tables)."""
    answer = _as_app(
        "CREATE TEMP TABLE guardian_purge_grant (txid bigint)",
        "INSERT INTO guardian_purge_grant VALUES (txid_current())",
        ("DELETE FROM runs_decision WHERE id = %s", [log_rows["runs_decision"]]),
    )
    assert answer.startswith("refused: the decision log is append-only"), answer


def test_the_app_role_purges_a_run_through_the_door_and_the_purge_is_logged(app_role, log_rows):
    run_id = Decision.objects.get(pk=log_rows["runs_decision"]).turn.run_id
    other = make_decision()
    before = _purge_log()
    with connection.cursor() as cursor:
        cursor.execute(f"SET ROLE {APP_ROLE}")
        purged = run_purge(run_id=run_id, reason="a customer's erasure request", actor="ops-7")
        cursor.execute("RESET ROLE")
    assert purged is True
    assert not Run.objects.filter(pk=run_id).exists()
    assert not Verdict.objects.filter(pk=log_rows["escalations_verdict"]).exists()
    assert not LabelledExample.objects.exists()
    with connection.cursor() as cursor:
        cursor.execute("SELECT session_user")
        login = cursor.fetchone()[0]
    # Who (the database's login and the actor named), why, and in this transaction.
    assert _purge_log() == [*before, (login, "ops-7", "a customer's erasure request", True)]
    # What it took: every row of the log and the run itself, by id (and the run's uid).
    taken = _purge_rows()
    assert log_rows["runs_decision"] in taken["runs_decision"]
    assert taken["escalations_verdict"] == [log_rows["escalations_verdict"]]
    assert taken["escalations_labelledexample"] == [log_rows["escalations_labelledexample"]]
    assert taken["runs_run"] == [run_id]
    # The door closed with the purge.
    answer = _as_app(("DELETE FROM runs_decision WHERE id = %s", [other.pk]))
    assert answer.startswith("refused: the decision log is append-only"), answer


def test_a_purge_must_say_why_and_for_whom(app_role):
    for reason, actor in (("", "ops"), ("why", " "), (None, "ops")):
        answer = _as_app(("SELECT guardian_purge_begin(%s::text, %s::text)", [reason, actor]))
        assert answer.startswith("refused: a purge names its reason and its actor"), answer


def test_a_failed_purge_leaves_no_grant_and_no_log_row(app_role, log_rows):
    before = _purge_log()

    def half_a_purge():
        with log_purge(reason="half a purge", actor="test"):
            LabelledExample.objects.all().delete()
            raise RuntimeError("the purge fails half way")

    with pytest.raises(RuntimeError):
        half_a_purge()
    assert LabelledExample.objects.exists()
    assert _purge_log() == before
    answer = _as_app(("DELETE FROM runs_decision WHERE id = %s", [log_rows["runs_decision"]]))
    assert answer.startswith("refused: the decision log is append-only"), answer


def test_the_purge_log_is_final_even_for_the_owner():
    with log_purge(reason="a purge to leave a row", actor="test"):
        Run.objects.filter(pk=make_turn().run_id).delete()
    for sql in (
        "UPDATE guardian_purge_log SET reason = 'nothing to see'",
        "DELETE FROM guardian_purge_log",
        "TRUNCATE guardian_purge_log",
        "UPDATE guardian_purge_rows SET ids = '{}'",
        "DELETE FROM guardian_purge_rows",
        "TRUNCATE guardian_purge_rows",
    ):
        answer = _as_owner(sql)
        assert answer.startswith("refused: the decision log is append-only: "), (sql, answer)
        assert "of the purge log refused" in answer


def test_flush_empties_the_log_inside_a_logged_purge(log_rows, no_deferred_checks):
    before = _purge_log()
    call_command("flush", interactive=False, inhibit_post_migrate=True, verbosity=0)
    assert not Decision.objects.exists()
    assert not LabelledExample.objects.exists()
    # One purge, in this transaction (runs/management/commands/flush.py names it).
    after = _purge_log()
    assert after[: len(before)] == before
    assert [now for _user, _actor, _reason, now in after[len(before) :]] == [True]
    # Truncated whole: recorded by table, with no count.
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT table_name FROM guardian_purge_rows WHERE txid = txid_current() "
            "AND row_count IS NULL ORDER BY table_name"
        )
        truncated = [table for (table,) in cursor.fetchall()]
    assert truncated == sorted([*LOG_TABLES, "runs_run"])


def test_the_app_role_runs_a_whole_escalated_run(app_role, reviewer):
    """The grants are enough for the app's own work: a run that waits for a reviewer, is
    approved and ends, every write made as the app's role."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET ROLE {APP_ROLE}")
        run = drive(start("refund_waits_for_approval"))
        escalation_resolve(
            escalation_id=run.escalations.get().pk, reviewer=reviewer, decision="approve"
        )
        run = drive(run)
        cursor.execute("SELECT current_user")
        assert cursor.fetchone()[0] == APP_ROLE
        cursor.execute("RESET ROLE")
    assert run.status == RunStatus.SUCCEEDED


def test_migrate_grants_the_app_role_exactly_its_rights(settings):
    from django.apps import apps

    settings.GUARDIAN_DB_APP_ROLE = APP_ROLE
    grant_app_role_after_migrate(list(apps.get_app_configs())[-1], using="default")
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT privilege, has_table_privilege(%s, 'runs_decision', privilege) "
            "FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE', 'TRUNCATE', 'TRIGGER', "
            "'REFERENCES']) AS privilege",
            [APP_ROLE],
        )
        rights = dict(cursor.fetchall())
        cursor.execute(
            "SELECT has_function_privilege(%s, 'guardian_purge_begin(text, text)', 'EXECUTE'), "
            "has_table_privilege(%s, 'guardian_purge_log', 'SELECT'), "
            "has_table_privilege(%s, 'django_migrations', 'INSERT')",
            [APP_ROLE] * 3,
        )
        door, read_log, write_migrations = cursor.fetchone()
    assert rights == {
        "SELECT": True,
        "INSERT": True,
        "UPDATE": True,
        "DELETE": True,
        "TRUNCATE": False,
        "TRIGGER": False,
        "REFERENCES": False,
    }
    assert (door, read_log, write_migrations) == (True, False, False)


@pytest.mark.parametrize(
    ("role", "problem"),
    [
        ("no_such_role_h3a", "no such role"),
        ("postgres", "superuser"),
        (None, "the role that migrates"),
    ],
)
def test_migrate_refuses_an_app_role_that_could_undo_the_log(role, problem):
    if role is None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_user")
            role = cursor.fetchone()[0]
    with pytest.raises(ImproperlyConfigured, match=problem):
        app_role_grant(connection, role)


def test_migration_0017_undone_puts_the_setting_back_and_keeps_the_purge_log(log_rows):
    from importlib import import_module

    from django.apps import apps

    migration = import_module("runs.migrations.0017_log_purge_by_definer_function")
    with log_purge(reason="a purge before the migration is undone", actor="test"):
        pass
    logged = _purge_log()
    delete = ("DELETE FROM runs_decision WHERE id = %s", log_rows["runs_decision"])
    with connection.schema_editor() as editor:
        migration.backwards(apps, editor)
    assert _purge_log() == logged
    assert _as_owner_with_setting(*delete) == "allowed"  # as before 0017
    with connection.schema_editor() as editor:
        migration.forwards(apps, editor)
    assert _purge_log() == logged
    other = make_decision()
    answer = _as_owner_with_setting("DELETE FROM runs_decision WHERE id = %s", other.pk)
    assert answer.startswith("refused: the decision log is append-only"), answer


def _as_owner_with_setting(sql: str, pk: int) -> str:
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SET LOCAL guardian.purge = 'on'")
            cursor.execute(sql, [pk])
    except DatabaseError as exc:
        return f"refused: {exc}"
    return "allowed"
