"""The invariants the database itself keeps, whatever code writes to it."""

import pytest
from django.db import IntegrityError, transaction

from escalations.models import EscalationStatus, LabelledExample
from guardian_core.models import PolicyVersion
from runs.models import RunStatus, Turn
from tests.factories import (
    make_decision,
    make_escalation,
    make_policy_version,
    make_run,
    make_tool_call,
    make_turn,
    retire_active_policy_version,
)

pytestmark = pytest.mark.django_db


def test_a_turn_index_cannot_be_recorded_twice_for_one_run():
    run = make_run()
    make_turn(run=run, index=0)
    with pytest.raises(IntegrityError):
        make_turn(run=run, index=0)


def test_the_same_turn_index_is_fine_in_another_run():
    first, second = make_turn(index=0), make_turn(index=0)  # a new run each time
    assert first.run_id != second.run_id
    assert Turn.objects.filter(index=0).count() == 2


def test_an_idempotency_key_is_unique_across_all_tool_calls():
    first = make_tool_call(idempotency_key="k" * 64)
    with pytest.raises(IntegrityError):
        make_tool_call(turn=make_turn(run=first.turn.run, index=1), idempotency_key="k" * 64)


def test_a_turn_has_at_most_one_decision():
    decision = make_decision()
    with pytest.raises(IntegrityError):
        make_decision(turn=decision.turn)


def test_a_decision_cannot_exist_without_a_turn():
    turn = make_turn()
    with pytest.raises(IntegrityError):
        make_decision(turn=turn, turn_id=None)


def test_a_decision_outcome_outside_the_five_is_refused():
    with pytest.raises(IntegrityError):
        make_decision(outcome="maybe")


def test_a_run_that_did_not_succeed_cannot_carry_an_answer():
    with pytest.raises(IntegrityError):
        make_run(status=RunStatus.FAILED, stop_reason="turn_cap", final_answer="best guess")


def test_a_policy_version_can_be_edited_until_a_run_uses_it():
    version = make_policy_version()
    version.thresholds = {"integrity": {"c_stop": 1, "c_cont": 4, "t_star": 0.2, "delta": 0.05}}
    version.save()
    version.refresh_from_db()
    assert version.thresholds["integrity"]["t_star"] == 0.2


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("thresholds", {"integrity": {"c_stop": 1, "c_cont": 1, "t_star": 0.5, "delta": 0.1}}),
        ("question_set", {"integrity": "A reworded question is a new model of the condition"}),
        ("question_set_version", "q-other"),
        ("number", 99999),
    ],
)
def test_a_policy_version_used_by_a_run_cannot_change(field, value):
    version = make_policy_version()
    make_run(policy_version=version)
    setattr(version, field, value)
    with pytest.raises(IntegrityError, match="used by a run"), transaction.atomic():
        version.save()
    version.refresh_from_db()
    assert getattr(version, field) != value


def test_a_used_policy_version_can_still_be_activated_or_retired():
    version = make_policy_version()
    make_run(policy_version=version)
    retire_active_policy_version()  # the shipped default: one is active at a time
    PolicyVersion.objects.filter(pk=version.pk).update(is_active=True, label="retired soon")
    PolicyVersion.objects.filter(pk=version.pk).update(is_active=False)
    version.refresh_from_db()
    assert (version.is_active, version.label) == (False, "retired soon")


def test_a_used_policy_version_cannot_be_deleted():
    from django.db.models import ProtectedError

    version = make_policy_version()
    make_run(policy_version=version)
    with pytest.raises(ProtectedError):
        version.delete()


def test_only_one_policy_version_is_active():
    active = make_policy_version(is_active=True)
    with pytest.raises(IntegrityError):
        PolicyVersion.objects.create(
            number=active.number + 1,
            thresholds=active.thresholds,
            question_set=active.question_set,
            question_set_version=active.question_set_version,
            is_active=True,
        )


def test_a_run_waits_on_one_open_escalation_at_a_time():
    escalation = make_escalation()
    with pytest.raises(IntegrityError):
        make_escalation(turn=escalation.turn)


def test_a_resolved_escalation_must_say_when_it_was_resolved():
    with pytest.raises(IntegrityError):
        make_escalation(status=EscalationStatus.APPROVED, resolved_at=None)


def test_a_labelled_example_probability_stays_within_zero_and_one():
    with pytest.raises(IntegrityError):
        LabelledExample.objects.create(
            condition="integrity",
            projection={"goal": "g"},
            probability=1.2,
            label=True,
            source="import",
            question_set_version="q1",
            model_version="local-1",
        )


def test_a_labelled_example_names_a_known_condition():
    with pytest.raises(IntegrityError):
        LabelledExample.objects.create(
            condition="vibes",
            projection={"goal": "g"},
            label=True,
            source="import",
            question_set_version="q1",
            model_version="local-1",
        )


def test_the_database_choices_match_the_engine_vocabulary():
    from guardian_core.engine import conditions, policy
    from runs.models import DecisionOutcome, RiskClass

    assert RiskClass.values == [c.value for c in conditions.RiskClass]
    assert sorted(DecisionOutcome.values) == sorted(o.value for o in policy.Outcome)
