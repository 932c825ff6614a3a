"""The database triggers that keep the decision log append-only, and the purge that may still
delete a whole run.

On PostgreSQL a decision can be inserted and never updated; a decision, a verdict or a
labelled example can be deleted only inside `log_purge()` (an operator's purge of a run, the
bench's cleanup), which sets `guardian.purge` for its own transaction only. A verdict keeps
its content once written (only `resulting_outcome`, set right after the verdict by the same
transaction, may change while it is still empty), a labelled example keeps its content, and a
tool call's outcome (status, result, error, times) is final once it is done. A failed call is
not final: a reviewer may ask for it to run again under its key (runs/ports.py).

On SQLite (local tools only) the same UPDATE refusals hold; DELETE is not refused there,
since SQLite has no session setting a purge could lift it with. A migration that rebuilds one
of these tables on SQLite drops the table's triggers with it: call drop_log_triggers before
and create_log_triggers after, like runs/db_triggers.py for the policy trigger.
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

_SQLITE_TRIGGERS = {
    "guardian_decision_append_only": f"""
CREATE TRIGGER guardian_decision_append_only BEFORE UPDATE ON runs_decision
BEGIN SELECT RAISE(ABORT, '{REFUSED_MESSAGE}'); END;""",
    "guardian_example_final": f"""
CREATE TRIGGER guardian_example_final BEFORE UPDATE ON escalations_labelledexample
BEGIN SELECT RAISE(ABORT, '{REFUSED_MESSAGE}'); END;""",
    "guardian_tool_call_final": f"""
CREATE TRIGGER guardian_tool_call_final BEFORE UPDATE ON runs_toolcall
FOR EACH ROW WHEN OLD.status = 'done' AND (NEW.status IS NOT OLD.status
    OR NEW.result IS NOT OLD.result OR NEW.error IS NOT OLD.error
    OR NEW.arguments IS NOT OLD.arguments OR NEW.tool IS NOT OLD.tool
    OR NEW.started_at IS NOT OLD.started_at OR NEW.finished_at IS NOT OLD.finished_at)
BEGIN SELECT RAISE(ABORT, '{REFUSED_MESSAGE}'); END;""",
}


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
        for sql in _SQLITE_TRIGGERS.values():
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
        for name in _SQLITE_TRIGGERS:
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name};", params=None)


@contextmanager
def log_purge():
    """A transaction in which the log's rows may be deleted (never updated): an operator's
    purge of a run, the bench's cleanup, a test that removes turns. SET LOCAL ends with the
    transaction, so nothing outside it is ever allowed to delete."""
    with transaction.atomic():
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL guardian.purge = 'on'")
        yield
        if connection.vendor == "postgresql":
            # Inside an outer transaction (a test) SET LOCAL would outlive this block; on an
            # error the rollback to the block's savepoint undoes it.
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL guardian.purge = 'off'")
