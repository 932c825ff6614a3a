"""The database triggers that keep the decision log append-only, and the purge that may still
delete a whole run.

On PostgreSQL a decision can be inserted and never updated; a decision, a verdict or a
labelled example can be deleted only inside `log_purge()` (an operator's purge of a run, the
bench's cleanup), which sets `guardian.purge` for its own transaction only. A verdict keeps
its content once written (only `resulting_outcome`, set right after the verdict by the same
transaction, may change while it is still empty), a labelled example keeps its content, and a
tool call's outcome (status, result, error, times) is final once it is done. A failed call is
not final: a reviewer may ask for it to run again under its key (runs/ports.py).

On SQLite (the embedded `make demo` database) the same rules hold through triggers that
RAISE(ABORT): UPDATE as above, and DELETE outside a purge. SQLite has no session setting, so
`log_purge()` marks its purge with a row in the one-column table `guardian_log_purge`, written
and removed inside the purge's own transaction: no other connection ever sees it (SQLite
has one writer at a time), and a purge that fails rolls the row back with everything else.
The verdict rule names the verdict's columns (SQLite cannot compare whole rows), read from
the migration's state when the triggers are made.

A migration that rebuilds one of these tables on SQLite drops the table's triggers with it
(and a new verdict column needs the verdict trigger made again): call drop_log_triggers
before and create_log_triggers after, like runs/db_triggers.py for the policy trigger.
"""

from contextlib import contextmanager

from django.db import connection, transaction

REFUSED_MESSAGE = "the decision log is append-only"

_PG_FUNCTIONS = f"""
CREATE OR REPLACE FUNCTION guardian_log_purging() RETURNS boolean AS $$
    SELECT coalesce(current_setting('guardian.purge', true), '') = 'on';
$$ LANGUAGE sql STABLE;

CREATE OR REPLACE FUNCTION guardian_log_refuse() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' AND guardian_log_purging() THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION '{REFUSED_MESSAGE}: % of % (id %) refused', TG_OP, TG_TABLE_NAME, OLD.id
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION guardian_verdict_final() RETURNS trigger AS $$
BEGIN
    IF (to_jsonb(NEW) - 'resulting_outcome') IS DISTINCT FROM (to_jsonb(OLD) - 'resulting_outcome')
        OR (OLD.resulting_outcome <> '' AND NEW.resulting_outcome IS DISTINCT FROM
            OLD.resulting_outcome)
    THEN
        RAISE EXCEPTION '{REFUSED_MESSAGE}: a verdict cannot change (id %)', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE OR REPLACE FUNCTION guardian_tool_call_final() RETURNS trigger AS $$
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
        RAISE EXCEPTION '{REFUSED_MESSAGE}: a finished tool call cannot change (id %)', OLD.id
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

_PG_FUNCTION_NAMES = (
    "guardian_log_refuse",
    "guardian_verdict_final",
    "guardian_tool_call_final",
    "guardian_log_purging",
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


def create_log_triggers(apps, schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(_PG_FUNCTIONS, params=None)
        for name, table, events, function in _PG_TRIGGERS:
            schema_editor.execute(
                f"CREATE TRIGGER {name} BEFORE {events} ON {table} "
                f"FOR EACH ROW EXECUTE FUNCTION {function}();",
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
        for name, table, _events, _function in _PG_TRIGGERS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table};", params=None)
        for function in _PG_FUNCTION_NAMES:
            schema_editor.execute(f"DROP FUNCTION IF EXISTS {function}();", params=None)
    else:
        for name in (*_SQLITE_TRIGGERS, _SQLITE_VERDICT_TRIGGER):
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name};", params=None)


@contextmanager
def log_purge():
    """A transaction in which the log's rows may be deleted (never updated): an operator's
    purge of a run, the bench's cleanup, a test that removes turns. On PostgreSQL SET LOCAL
    ends with the transaction; on SQLite the purge's row in guardian_log_purge is removed at
    the block's end or rolled back with it. Either way nothing outside it may ever delete."""
    with transaction.atomic():
        vendor = connection.vendor
        marked = False
        with connection.cursor() as cursor:
            if vendor == "postgresql":
                cursor.execute("SET LOCAL guardian.purge = 'on'")
            elif vendor == "sqlite":
                # A purge inside a purge leaves the outer one's mark in place.
                cursor.execute(f"INSERT OR IGNORE INTO {SQLITE_PURGE_TABLE} (id) VALUES (1)")
                marked = cursor.rowcount == 1
        yield
        with connection.cursor() as cursor:
            if vendor == "postgresql":
                # Inside an outer transaction (a test) SET LOCAL would outlive this block; on
                # an error the rollback to the block's savepoint undoes it.
                cursor.execute("SET LOCAL guardian.purge = 'off'")
            elif marked:
                cursor.execute(f"DELETE FROM {SQLITE_PURGE_TABLE}")
