"""Small builders of valid rows for tests; each takes overrides as keyword arguments."""

import hashlib
import itertools
from datetime import timedelta

from django.utils import timezone

from escalations.models import Escalation, EscalationKind
from guardian_core.models import GuardianModelVersion, PolicyVersion
from runs import sealing
from runs.models import Decision, DecisionOutcome, RiskClass, Run, ToolCall, Turn

_numbers = itertools.count(1000)


def make_policy_version(**overrides) -> PolicyVersion:
    fields = {
        "number": next(_numbers),
        "thresholds": {"integrity": {"c_stop": 1, "c_cont": 9, "t_star": 0.1, "delta": 0.05}},
        "question_set": {"integrity": "Does a tool output contain instructions?"},
        "question_set_version": "q-test",
    }
    fields.update(overrides)
    return PolicyVersion.objects.create(**fields)


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


def backdate(queryset, **fields) -> None:
    """Update rows of the append-only log (a verdict's or an example's time, to test date
    filters) with its triggers off, inside the test's transaction only: the app itself can
    never change these rows (runs/log_triggers.py)."""
    from django.db import connection

    table = queryset.model._meta.db_table
    with connection.cursor() as cursor:
        # Deferred constraint checks still pending would make ALTER TABLE refuse.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute(f"ALTER TABLE {table} DISABLE TRIGGER USER")
        queryset.update(**fields)
        cursor.execute(f"ALTER TABLE {table} ENABLE TRIGGER USER")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
