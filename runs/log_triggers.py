"""The database triggers that keep the decision log append-only, and the purge that may still
delete a whole run.

On PostgreSQL a decision can be inserted and never updated; a decision, a verdict or a
labelled example can be deleted (or its table truncated) only inside `log_purge()` (an
operator's purge of a run, the bench's cleanup, Django's flush between tests). A verdict keeps
its content once written (only `resulting_outcome`, set right after the verdict by the same
transaction, may change while it is still empty), a labelled example keeps its content, and a
tool call's outcome (status, result, error, times) is final once it is done. A failed call is
not final: a reviewer may ask for it to run again under its key (runs/ports.py).

The purge door on PostgreSQL is the function guardian_purge_begin(reason, actor), owned by the
role that migrates (the tables' owner) and run with its rights (SECURITY DEFINER): it writes a
row to guardian_purge_log (when, the database user, the actor and reason given, the
transaction) and marks the current transaction as purging in guardian_purge_grant. Every
DELETE or TRUNCATE of a log table or of runs_run (a purge's work) writes what it took (ids, a
run's uid) to guardian_purge_rows under its transaction id, beside the purge log's row. The
app's role (GUARDIAN_DB_APP_ROLE, runs/db_roles.py) may call the function but has no right on
these tables, so it can neither purge without leaving its record nor forge or erase one; it
does not own the log's tables either, so it cannot disable or drop their triggers. The mark is the
transaction's id, so it holds for that transaction only and a rollback takes it (and the log
row) away with the deletes; guardian_purge_end() lifts it at the end of the block. A session
setting (the `guardian.purge` of old) would not do: any session may set any custom setting.

On SQLite (the embedded `make demo` database) the same rules hold through triggers that
RAISE(ABORT): UPDATE as above, and DELETE outside a purge. SQLite has no session setting, so
`log_purge()` marks its purge with a row in the one-column table `guardian_log_purge`, written
and removed inside the purge's own transaction: no other connection ever sees it (SQLite
has one writer at a time), and a purge that fails rolls the row back with everything else.
Whoever can write the SQLite file can do anything to it: there the triggers guard against
mistakes, not against the app's own process. The verdict rule names the verdict's columns
(SQLite cannot compare whole rows), read from the migration's state when the triggers are made.

A migration that rebuilds one of these tables on SQLite drops the table's triggers with it
(and a new verdict column needs the verdict trigger made again): call drop_log_triggers
before and create_log_triggers after, like runs/db_triggers.py for the policy trigger.
"""

import getpass
import os
from contextlib import contextmanager

from django.db import connection, transaction

REFUSED_MESSAGE = "the decision log is append-only"

# The purge door's tables and functions. {schema} is the schema the migration runs in: every
# name is written with it and the SECURITY DEFINER functions search only pg_catalog (then
# pg_temp, last), so a table or function a session makes for itself (a temporary one) can
# never stand in for these.
_PG_PURGE_DOOR = """
CREATE TABLE IF NOT EXISTS {schema}.guardian_purge_log (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    txid bigint NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    db_user name NOT NULL,
    actor text NOT NULL,
    reason text NOT NULL,
    client_addr inet,
    backend_pid integer NOT NULL
);
CREATE INDEX IF NOT EXISTS guardian_purge_log_txid ON {schema}.guardian_purge_log (txid);
CREATE TABLE IF NOT EXISTS {schema}.guardian_purge_grant (txid bigint PRIMARY KEY);
-- What each purge took, statement by statement: the ids (and a run's uid) of the rows deleted,
-- or no count when a table was truncated whole. The purge log's row of the same txid says who.
CREATE TABLE IF NOT EXISTS {schema}.guardian_purge_rows (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    txid bigint NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp(),
    table_name name NOT NULL,
    row_count bigint,
    ids bigint[],
    uids uuid[]
);
CREATE INDEX IF NOT EXISTS guardian_purge_rows_txid ON {schema}.guardian_purge_rows (txid);
REVOKE ALL ON {schema}.guardian_purge_log, {schema}.guardian_purge_grant,
    {schema}.guardian_purge_rows FROM PUBLIC;

CREATE OR REPLACE FUNCTION {schema}.guardian_log_purging() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT EXISTS (
        SELECT 1 FROM {schema}.guardian_purge_grant WHERE txid = txid_current()
    );
$$;

CREATE OR REPLACE FUNCTION {schema}.guardian_purge_begin(reason text, actor text)
RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    tx bigint := txid_current();
BEGIN
    IF coalesce(btrim(reason), '') = '' OR coalesce(btrim(actor), '') = '' THEN
        RAISE EXCEPTION 'a purge names its reason and its actor'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- session_user: the role that logged in, whatever role it has SET since.
    INSERT INTO {schema}.guardian_purge_log
        (txid, db_user, actor, reason, client_addr, backend_pid)
        VALUES (tx, session_user, actor, reason, inet_client_addr(), pg_backend_pid());
    INSERT INTO {schema}.guardian_purge_grant (txid) VALUES (tx) ON CONFLICT (txid) DO NOTHING;
    -- True when this call opened the purge (not one inside a purge already open).
    RETURN FOUND;
END;
$$;

CREATE OR REPLACE FUNCTION {schema}.guardian_purge_end() RETURNS void
LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    DELETE FROM {schema}.guardian_purge_grant WHERE txid = txid_current();
$$;

-- After a DELETE (transition table `gone`) or a TRUNCATE of a log table or of runs_run.
CREATE OR REPLACE FUNCTION {schema}.guardian_purge_record() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        INSERT INTO {schema}.guardian_purge_rows (txid, table_name)
            VALUES (txid_current(), TG_TABLE_NAME);
    ELSIF TG_TABLE_NAME = 'runs_run' THEN
        INSERT INTO {schema}.guardian_purge_rows (txid, table_name, row_count, ids, uids)
            SELECT txid_current(), TG_TABLE_NAME, count(*), array_agg(id ORDER BY id),
                   array_agg(uid ORDER BY id)
            FROM gone HAVING count(*) > 0;
    ELSE
        INSERT INTO {schema}.guardian_purge_rows (txid, table_name, row_count, ids)
            SELECT txid_current(), TG_TABLE_NAME, count(*), array_agg(id ORDER BY id)
            FROM gone HAVING count(*) > 0;
    END IF;
    RETURN NULL;
END;
$$;
REVOKE ALL ON FUNCTION {schema}.guardian_purge_record() FROM PUBLIC;

REVOKE ALL ON FUNCTION {schema}.guardian_purge_begin(text, text) FROM PUBLIC;
REVOKE ALL ON FUNCTION {schema}.guardian_purge_end() FROM PUBLIC;

-- The purge log itself is never changed (its owner would have to drop this trigger first).
CREATE OR REPLACE FUNCTION {schema}.guardian_purge_log_final() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '{refused}: % of the purge log refused', TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$;
"""

# The purge door's functions the app's role may call (guardian_core/db_roles.py grants them).
PG_PURGE_FUNCTIONS = ("guardian_purge_begin(text, text)", "guardian_purge_end()")
# Tables only the door's functions write: the app's role gets no right on them.
PG_PURGE_TABLES = ("guardian_purge_log", "guardian_purge_grant", "guardian_purge_rows")
# The purge's record, kept when the door is undone by a migration back.
_PG_PURGE_RECORD_TABLES = ("guardian_purge_log", "guardian_purge_rows")

_PG_FUNCTIONS = """
CREATE OR REPLACE FUNCTION {schema}.guardian_log_refuse() RETURNS trigger AS $$
BEGIN
    IF TG_OP IN ('DELETE', 'TRUNCATE') AND {schema}.guardian_log_purging() THEN
        RETURN OLD;
    END IF;
    IF TG_OP = 'TRUNCATE' THEN
        RAISE EXCEPTION '{refused}: TRUNCATE of % refused', TG_TABLE_NAME
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RAISE EXCEPTION '{refused}: % of % (id %) refused', TG_OP, TG_TABLE_NAME, OLD.id
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION {schema}.guardian_verdict_final() RETURNS trigger AS $$
BEGIN
    IF (to_jsonb(NEW) - 'resulting_outcome') IS DISTINCT FROM (to_jsonb(OLD) - 'resulting_outcome')
        OR (OLD.resulting_outcome <> '' AND NEW.resulting_outcome IS DISTINCT FROM
            OLD.resulting_outcome)
    THEN
        RAISE EXCEPTION '{refused}: a verdict cannot change (id %)', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION {schema}.guardian_tool_call_final() RETURNS trigger AS $$
BEGIN
    IF OLD.status = 'done' AND (
        NEW.status IS DISTINCT FROM OLD.status
        OR NEW.result IS DISTINCT FROM OLD.result
        OR NEW.error IS DISTINCT FROM OLD.error
        OR NEW.arguments IS DISTINCT FROM OLD.arguments
        OR NEW.tool IS DISTINCT FROM OLD.tool
        OR NEW.started_at IS DISTINCT FROM OLD.started_at
        OR NEW.finished_at IS DISTINCT FROM OLD.finished_at
    ) THEN
        RAISE EXCEPTION '{refused}: a finished tool call cannot change (id %)', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
"""

# (trigger, table, timing and events, function)
_PG_TRIGGERS = (
    ("guardian_decision_append_only", "runs_decision", "UPDATE OR DELETE", "guardian_log_refuse"),
    ("guardian_verdict_no_delete", "escalations_verdict", "DELETE", "guardian_log_refuse"),
    ("guardian_verdict_final", "escalations_verdict", "UPDATE", "guardian_verdict_final"),
    ("guardian_example_final", "escalations_labelledexample", "UPDATE OR DELETE",
     "guardian_log_refuse"),
    ("guardian_tool_call_final", "runs_toolcall", "UPDATE", "guardian_tool_call_final"),
)  # fmt: skip

# TRUNCATE fires no row trigger: a statement trigger asks the same question of it.
_PG_TRUNCATE_TRIGGERS = (
    ("guardian_decision_no_truncate", "runs_decision", "guardian_log_refuse"),
    ("guardian_verdict_no_truncate", "escalations_verdict", "guardian_log_refuse"),
    ("guardian_example_no_truncate", "escalations_labelledexample", "guardian_log_refuse"),
)
_PG_PURGE_LOG_TRIGGERS = (
    ("guardian_purge_log_final", "UPDATE OR DELETE", "ROW"),
    ("guardian_purge_log_no_truncate", "TRUNCATE", "STATEMENT"),
)
# The tables whose deleted rows the purge records: the log's three and the runs themselves.
_PG_PURGE_RECORDED = ("runs_decision", "escalations_verdict", "escalations_labelledexample",
                      "runs_run")  # fmt: skip

_PG_FUNCTION_NAMES = (
    "guardian_log_refuse()",
    "guardian_verdict_final()",
    "guardian_tool_call_final()",
    "guardian_log_purging()",
    *PG_PURGE_FUNCTIONS,
)

# One row while log_purge() runs on SQLite (see the module's docstring).
SQLITE_PURGE_TABLE = "guardian_log_purge"
_SQLITE_NOT_PURGING = f"NOT EXISTS (SELECT 1 FROM {SQLITE_PURGE_TABLE})"


def _sqlite_refuse(message: str = REFUSED_MESSAGE) -> str:
    return f"BEGIN SELECT RAISE(ABORT, '{message}'); END;"


_SQLITE_TRIGGERS = {
    "guardian_decision_append_only": f"""
CREATE TRIGGER guardian_decision_append_only BEFORE UPDATE ON runs_decision
{_sqlite_refuse()}""",
    "guardian_decision_no_delete": f"""
CREATE TRIGGER guardian_decision_no_delete BEFORE DELETE ON runs_decision
FOR EACH ROW WHEN {_SQLITE_NOT_PURGING}
{_sqlite_refuse()}""",
    "guardian_example_final": f"""
CREATE TRIGGER guardian_example_final BEFORE UPDATE ON escalations_labelledexample
{_sqlite_refuse()}""",
    "guardian_example_no_delete": f"""
CREATE TRIGGER guardian_example_no_delete BEFORE DELETE ON escalations_labelledexample
FOR EACH ROW WHEN {_SQLITE_NOT_PURGING}
{_sqlite_refuse()}""",
    "guardian_verdict_no_delete": f"""
CREATE TRIGGER guardian_verdict_no_delete BEFORE DELETE ON escalations_verdict
FOR EACH ROW WHEN {_SQLITE_NOT_PURGING}
{_sqlite_refuse()}""",
    "guardian_tool_call_final": f"""
CREATE TRIGGER guardian_tool_call_final BEFORE UPDATE ON runs_toolcall
FOR EACH ROW WHEN OLD.status = 'done' AND (NEW.status IS NOT OLD.status
    OR NEW.result IS NOT OLD.result OR NEW.error IS NOT OLD.error
    OR NEW.arguments IS NOT OLD.arguments OR NEW.tool IS NOT OLD.tool
    OR NEW.started_at IS NOT OLD.started_at OR NEW.finished_at IS NOT OLD.finished_at)
{_sqlite_refuse()}""",
}
_SQLITE_VERDICT_TRIGGER = "guardian_verdict_final"


def _sqlite_verdict_trigger(apps) -> str:
    """The verdict rule for SQLite: no column but resulting_outcome changes, and that one only
    while it is still empty. The columns are the verdict's in the migration's state."""
    verdict = apps.get_model("escalations", "Verdict")
    columns = sorted(
        field.column
        for field in verdict._meta.concrete_fields
        if field.column != "resulting_outcome"
    )
    changed = " OR ".join(f'NEW."{column}" IS NOT OLD."{column}"' for column in columns)
    return f"""
CREATE TRIGGER {_SQLITE_VERDICT_TRIGGER} BEFORE UPDATE ON escalations_verdict
FOR EACH ROW WHEN {changed}
    OR (OLD.resulting_outcome <> '' AND NEW.resulting_outcome IS NOT OLD.resulting_outcome)
{_sqlite_refuse(f"{REFUSED_MESSAGE}: a verdict cannot change")}"""


def pg_schema(connection) -> str:
    """The schema the migrations write in, quoted for SQL."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT quote_ident(current_schema())")
        return cursor.fetchone()[0]


def _pg_sql(template: str, schema: str) -> str:
    return template.replace("{schema}", schema).replace("{refused}", REFUSED_MESSAGE)


def create_pg_purge_door(schema_editor) -> None:
    """The purge door and the TRUNCATE triggers (PostgreSQL): made again as a whole, so this
    may run over an older database (migration 0017) or after create_log_triggers."""
    schema = pg_schema(schema_editor.connection)
    schema_editor.execute(_pg_sql(_PG_PURGE_DOOR, schema), params=None)
    schema_editor.execute(_pg_sql(_PG_FUNCTIONS, schema), params=None)
    for name, table, function in _PG_TRUNCATE_TRIGGERS:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {name} ON {schema}.{table};", params=None)
        schema_editor.execute(
            f"CREATE TRIGGER {name} BEFORE TRUNCATE ON {schema}.{table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {schema}.{function}();",
            params=None,
        )
    for record_table, (name, events, level) in (
        (record_table, trigger)
        for record_table in _PG_PURGE_RECORD_TABLES
        for trigger in _PG_PURGE_LOG_TRIGGERS
    ):
        table = f"{schema}.{record_table}"
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table};", params=None)
        schema_editor.execute(
            f"CREATE TRIGGER {name} BEFORE {events} ON {table} "
            f"FOR EACH {level} EXECUTE FUNCTION {schema}.guardian_purge_log_final();",
            params=None,
        )
    for table in _PG_PURGE_RECORDED:
        for name, sql in _pg_record_triggers(schema, table):
            schema_editor.execute(
                f"DROP TRIGGER IF EXISTS {name} ON {schema}.{table};", params=None
            )
            schema_editor.execute(sql, params=None)


def _pg_record_triggers(schema: str, table: str) -> list[tuple[str, str]]:
    """The two triggers that record what a purge took from `table`: (name, CREATE TRIGGER)."""
    record = f"EXECUTE FUNCTION {schema}.guardian_purge_record()"
    return [
        (
            f"guardian_purge_record_{table}",
            f"CREATE TRIGGER guardian_purge_record_{table} AFTER DELETE ON {schema}.{table} "
            f"REFERENCING OLD TABLE AS gone FOR EACH STATEMENT {record};",
        ),
        (
            f"guardian_purge_record_truncate_{table}",
            f"CREATE TRIGGER guardian_purge_record_truncate_{table} AFTER TRUNCATE ON "
            f"{schema}.{table} FOR EACH STATEMENT {record};",
        ),
    ]


def drop_pg_purge_door(schema_editor) -> None:
    """Undo create_pg_purge_door but for the purge's record (guardian_purge_log and
    guardian_purge_rows, with the triggers that keep them final): it is the record of what
    was deleted, and making the door again (CREATE ... IF NOT EXISTS) writes on after it."""
    schema = pg_schema(schema_editor.connection)
    for name, table, _function in _PG_TRUNCATE_TRIGGERS:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {name} ON {schema}.{table};", params=None)
    for table in _PG_PURGE_RECORDED:
        for name, _sql in _pg_record_triggers(schema, table):
            schema_editor.execute(
                f"DROP TRIGGER IF EXISTS {name} ON {schema}.{table};", params=None
            )
    schema_editor.execute(f"DROP TABLE IF EXISTS {schema}.guardian_purge_grant;", params=None)
    for function in (*PG_PURGE_FUNCTIONS, "guardian_purge_record()"):
        schema_editor.execute(f"DROP FUNCTION IF EXISTS {schema}.{function};", params=None)


def create_log_triggers(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        create_pg_purge_door(schema_editor)
        schema = pg_schema(schema_editor.connection)
        for name, table, events, function in _PG_TRIGGERS:
            schema_editor.execute(
                f"CREATE TRIGGER {name} BEFORE {events} ON {schema}.{table} "
                f"FOR EACH ROW EXECUTE FUNCTION {schema}.{function}();",
                params=None,
            )
    elif vendor == "sqlite":
        schema_editor.execute(
            f"CREATE TABLE IF NOT EXISTS {SQLITE_PURGE_TABLE} (id integer PRIMARY KEY)",
            params=None,
        )
        for sql in (*_SQLITE_TRIGGERS.values(), _sqlite_verdict_trigger(apps)):
            schema_editor.execute(sql, params=None)
    else:
        raise NotImplementedError(f"no decision log triggers for {vendor}")


def drop_log_triggers(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema = pg_schema(schema_editor.connection)
        for name, table, _events, _function in _PG_TRIGGERS:
            schema_editor.execute(
                f"DROP TRIGGER IF EXISTS {name} ON {schema}.{table};", params=None
            )
        drop_pg_purge_door(schema_editor)
        for function in _PG_FUNCTION_NAMES:
            schema_editor.execute(f"DROP FUNCTION IF EXISTS {schema}.{function};", params=None)
    else:
        for name in (*_SQLITE_TRIGGERS, _SQLITE_VERDICT_TRIGGER):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name};", params=None)


def default_purge_actor() -> str:
    """Who asks for a purge when the caller does not say: the operating-system user and the
    process, which the database cannot know (it records its own user beside this)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's bare uid)
        user = f"uid {os.getuid()}"
    return f"{user} (pid {os.getpid()})"


@contextmanager
def log_purge(*, reason: str = "unnamed purge", actor: str = ""):
    """A transaction in which the log's rows may be deleted (never updated): an operator's
    purge of a run, the bench's cleanup, a test that removes turns. `reason` and `actor` (who
    asked; default: the OS user and process) go into PostgreSQL's guardian_purge_log with the
    database user. The permission ends at the block's end (or with its rollback) on PostgreSQL
    and on SQLite alike; nothing outside a purge may ever delete."""
    with transaction.atomic():
        vendor = connection.vendor
        marked = False
        with connection.cursor() as cursor:
            if vendor == "postgresql":
                # Unqualified: the app's role may not create in the schema (db_roles.py refuses
                # one that could) and pg_temp is never searched for functions.
                cursor.execute(
                    "SELECT guardian_purge_begin(%s::text, %s::text)",
                    [reason, actor or default_purge_actor()],
                )
                marked = cursor.fetchone()[0]
            elif vendor == "sqlite":
                # A purge inside a purge leaves the outer one's mark in place.
                cursor.execute(f"INSERT OR IGNORE INTO {SQLITE_PURGE_TABLE} (id) VALUES (1)")
                marked = cursor.rowcount == 1
        yield
        if marked:
            with connection.cursor() as cursor:
                if vendor == "postgresql":
                    # Inside an outer transaction (a test) the mark would outlive this block;
                    # on an error the rollback to the block's savepoint undoes it.
                    cursor.execute("SELECT guardian_purge_end()")
                else:
                    cursor.execute(f"DELETE FROM {SQLITE_PURGE_TABLE}")
