"""Small builders of valid rows for tests; each takes overrides as keyword arguments."""

import hashlib
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from django.db import connection, transaction
from django.utils import timezone

from escalations.models import Escalation, EscalationKind
from guardian_core.models import GuardianModelVersion, PolicyVersion
from runs import sealing
from runs.models import Decision, DecisionOutcome, RiskClass, Run, ToolCall, Turn

_numbers = itertools.count(1000)


def make_policy_version(**overrides) -> PolicyVersion:
    """A version (numbered from 1000); with is_active=True the one active before (on a
    migrated database the shipped default, version 1) is retired first, as activating does:
    one is active at a time (a constraint)."""
    if overrides.get("is_active"):
        retire_active_policy_version()
    fields = {
        "number": next(_numbers),
        "thresholds": {"integrity": {"c_stop": 1, "c_cont": 9, "t_star": 0.1, "delta": 0.05}},
        "question_set": {"integrity": "Does a tool output contain instructions?"},
        "question_set_version": "q-test",
    }
    fields.update(overrides)
    return PolicyVersion.objects.create(**fields)


def default_costs_policy_version_create() -> PolicyVersion:
    """The active policy version at the engine's default costs and the HTTP guardian's default
    questions, made through the service as an admin would (the learning-loop tests' starting
    point)."""
    from guardian_core.adapters.http import DEFAULT_QUESTION_SET_VERSION, DEFAULT_QUESTIONS
    from guardian_core.engine.thresholds import DEFAULT_COSTS
    from policies.services import policy_version_create

    return policy_version_create(
        thresholds={
            c.value: {"c_stop": stop, "c_cont": cont, "delta": delta}
            for c, (stop, cont, delta) in DEFAULT_COSTS.items()
        },
        question_set=dict(DEFAULT_QUESTIONS),
        question_set_version=DEFAULT_QUESTION_SET_VERSION,
        activate=True,
    )


def retire_active_policy_version() -> None:
    """No policy version is active after this: the shipped default that `migrate` made, or
    whichever a test activated."""
    PolicyVersion.objects.filter(is_active=True).update(is_active=False)


def empty_policy_table() -> None:
    """No policy version at all, as in a database upgraded from before its first one: the
    shipped default that `migrate` made goes, with its activation record. For tests that write
    a version history of their own from v1 (before any run pinned the default)."""
    from policies.models import PolicyActivation

    PolicyActivation.objects.all().delete()
    PolicyVersion.objects.all().delete()


def make_guardian_model_version(**overrides) -> GuardianModelVersion:
    """A recalibrated version over the local guardian: its integrity answers mapped as given
    (the identity unless `calibration` says otherwise)."""
    from guardian_core.adapters.local import LocalGuardian

    fields = {
        "number": next(_numbers),
        "adapter": "local",
        "base_model_version": LocalGuardian().model_version,
        "kind": "recalibrated",
        "calibration": {"integrity": {"method": "isotonic", "x": [0.0, 1.0], "y": [0.0, 1.0]}},
        "example_ids": [],
        "examples_digest": "0" * 64,
    }
    fields.update(overrides)
    return GuardianModelVersion.objects.create(**fields)


def make_run(**overrides) -> Run:
    fields = {"goal": "Refund order ord_1", "actor": "scripted", "guardian": "scripted"}
    fields.update(overrides)
    if "policy_version" not in fields:
        fields["policy_version"] = make_policy_version()
    run = Run(**fields)
    if "seal" not in overrides:  # sealed from its start, as runs.services.run_start does
        run.seal = sealing.run_seal_value(run, head_turn=None, head="")
    run.save(force_insert=True)
    return run


def make_turn(*, run: Run | None = None, index: int = 0, **overrides) -> Turn:
    run = run or make_run()
    fields = {"state_hash": "0" * 64, "started_at": timezone.now()}
    fields.update(overrides)
    return Turn.objects.create(run=run, index=index, **fields)


def make_decision(*, turn: Turn | None = None, **overrides) -> Decision:
    turn = turn or make_turn()
    fields = {
        "outcome": DecisionOutcome.CONTINUE,
        "answers": {},
        "thresholds": turn.run.policy_version.thresholds,
        "policy_version": turn.run.policy_version,
        "question_set_version": turn.run.policy_version.question_set_version,
        "guardian_model_version": "scripted-test",
        "state_hash": turn.state_hash,
    }
    fields.update(overrides)
    decision = Decision(turn=turn, **fields)
    if "content_hash" not in overrides:
        # Sealed as the app seals every decision (runs/chain.py): chained to the decision of
        # the run's latest decided turn before this one, so the chain verifies.
        prev = (
            Decision.objects.filter(turn__run_id=turn.run_id, turn__index__lt=turn.index)
            .order_by("-turn__index")
            .values_list("content_hash", flat=True)
            .first()
        )
        sealing.decision_seal_from_db(decision, run=turn.run, turn=turn, prev_hash=prev or "")
    decision.save(force_insert=True)
    if "content_hash" not in overrides:
        sealing.run_reseal(turn.run_id)
    return decision


def make_tool_call(*, turn: Turn | None = None, position: int = 0, **overrides) -> ToolCall:
    turn = turn or make_turn()
    key = hashlib.sha256(f"{turn.pk}:{position}".encode()).hexdigest()
    fields = {
        "tool": "read_order",
        "arguments": {"order_id": "ord_1"},
        "risk_class": RiskClass.READ_ONLY,
        "idempotency_key": key,
    }
    fields.update(overrides)
    return ToolCall.objects.create(turn=turn, position=position, **fields)


def make_escalation(*, turn: Turn | None = None, **overrides) -> Escalation:
    turn = turn or make_turn()
    fields = {
        "run": turn.run,
        "kind": EscalationKind.GATED_STEP,
        "summary": "issue_refund is irreversible",
        "deadline": timezone.now() + timedelta(hours=1),
    }
    fields.update(overrides)
    escalation = Escalation.objects.create(turn=turn, **fields)
    sealing.run_reseal(turn.run_id)  # as the app's writes do (runs/chain.py)
    return escalation


@contextmanager
def log_triggers_off(*tables: str) -> Iterator[None]:
    """The append-only log's triggers (runs/log_triggers.py) off on `tables` for the block, as
    whoever owns the tables could switch them off behind the app's back: a test's tampering.
    The block is a transaction of its own (a savepoint inside the test's), so an error in it
    brings the triggers back with everything else, in a transactional test (a browser test's
    live server) as in any other. PostgreSQL disables the tables' user triggers; SQLite cannot
    disable a trigger, so it drops them and makes them again from the SQL it kept for them."""
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Deferred constraint checks still pending would make ALTER TABLE refuse.
            cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
            for table in tables:
                cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
        else:
            marks = ", ".join(["%s"] * len(tables))
            cursor.execute(
                f"SELECT name, sql FROM sqlite_master WHERE type = 'trigger' "
                f"AND tbl_name IN ({marks})",
                list(tables),
            )
            triggers = cursor.fetchall()
            for name, _sql in triggers:
                cursor.execute(f'DROP TRIGGER "{name}"')
        yield
        if connection.vendor == "postgresql":
            for table in tables:
                cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
            cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        else:
            for _name, sql in triggers:
                cursor.execute(sql)


def tamper(sql: str, params=(), *, tables: tuple[str, ...] = ("runs_decision",)) -> None:
    """Run one statement that changes the log behind the app's back (see log_triggers_off)."""
    with log_triggers_off(*tables), connection.cursor() as cursor:
        cursor.execute(sql, params)


def tamper_rows(queryset, **fields) -> None:
    """Update rows of the append-only log through the ORM, its triggers off (see
    log_triggers_off): the app itself can never change these rows."""
    with log_triggers_off(queryset.model._meta.db_table):
        queryset.update(**fields)


def backdate(queryset, **fields) -> None:
    """Move rows of the append-only log back in time (a verdict's or an example's time, to
    test date filters), its triggers off inside the test's transaction only."""
    tamper_rows(queryset, **fields)


def json_placeholder() -> str:
    """The placeholder for a JSON text written as it is spelled into a JSON column by raw SQL:
    PostgreSQL's jsonb needs the cast, SQLite keeps the text."""
    return "CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"
