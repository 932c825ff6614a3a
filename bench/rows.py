"""Deleting a bench section's runs, and everything on them, in plain SQL."""

from django.db import connection


def delete_marked_runs(column: str, mark: str) -> int:
    """Delete the runs whose `column` is `mark` with their turns, calls, decisions, escalations
    and all that hangs on those, in plain SQL (the ORM's cascade would load every row first);
    returns how many runs went."""
    from escalations.models import (
        Approval,
        Escalation,
        EscalationEvent,
        LabelledExample,
        NotificationDelivery,
        Verdict,
    )
    from runs.log_triggers import log_purge
    from runs.models import Decision, Run, ToolCall, Turn

    if column not in ("goal", "actor"):
        raise ValueError(f"runs are marked by goal or actor, not {column!r}")
    runs = f"SELECT id FROM {Run._meta.db_table} WHERE {column} = %s"
    escalations = f"SELECT id FROM {Escalation._meta.db_table} WHERE run_id IN ({runs})"
    turns = f"SELECT id FROM {Turn._meta.db_table} WHERE run_id IN ({runs})"
    verdicts = f"SELECT id FROM {Verdict._meta.db_table} WHERE escalation_id IN ({escalations})"
    statements = [
        (LabelledExample, f"verdict_id IN ({verdicts})"),
        (Verdict, f"escalation_id IN ({escalations})"),
        (EscalationEvent, f"escalation_id IN ({escalations})"),
        (NotificationDelivery, f"escalation_id IN ({escalations})"),
        (Approval, f"escalation_id IN ({escalations})"),
        (Escalation, f"run_id IN ({runs})"),
        (Decision, f"turn_id IN ({turns})"),
        (ToolCall, f"turn_id IN ({turns})"),
        (Turn, f"run_id IN ({runs})"),
    ]
    # The log's triggers refuse these deletes outside a purge (runs/log_triggers.py).
    with (
        log_purge(reason=f"bench cleanup: runs whose {column} is {mark}", actor="make bench"),
        connection.cursor() as cursor,
    ):
        for model, where in statements:
            cursor.execute(f"DELETE FROM {model._meta.db_table} WHERE {where}", [mark])
        cursor.execute(f"DELETE FROM {Run._meta.db_table} WHERE {column} = %s", [mark])
        return cursor.rowcount
