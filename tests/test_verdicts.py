"""A verdict, end to end on real runs: approvals bound to the exact action (hash, single use,
expiry, edited arguments), the quorum of two approvers, one verdict per escalation, only the
holder decides, bulk decisions, the reviewer's own risk class, and the history of an item."""

import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.core.management import call_command
from django.db import connections
from django.utils import timezone

from demo.setup import demo_policy_version
from escalations.claims import escalation_claim_next
from escalations.errors import EscalationError
from escalations.held_calls import escalation_held_calls
from escalations.models import (
    Approval,
    Escalation,
    EscalationEvent,
    EscalationKind,
    EscalationStatus,
    LabelledExample,
    Verdict,
)
from escalations.verdicts import AlreadyDecided, escalation_resolve, escalation_resolve_bulk
from guardian_core.engine.tools import action_hash, idempotency_key
from guardian_core.policy_validation import policy_version_problems
from policies.services import policy_version_create
from runs.log_triggers import log_purge
from runs.models import DemoSideEffect, RunStatus, ToolCall, ToolCallStatus, Turn
from runs.services import run_advance, run_start
from runs.sweeps import run_sweep_stalled
from tests.runs_helpers import drive, scripted_scenario, start

pytestmark = pytest.mark.django_db

REFUND = {"order_id": "ord_4472", "amount": 49.9}


def _waiting_refund(**kwargs):
    run = drive(start("refund_waits_for_approval", **kwargs))
    assert run.status == RunStatus.WAITING
    return run, run.escalations.get(status=EscalationStatus.OPEN)


def _resolve(escalation, user, **kwargs):
    return escalation_resolve(escalation_id=escalation.pk, reviewer=user, **kwargs)


def _refund_calls_done(run) -> int:
    return ToolCall.objects.filter(
        turn__run=run, tool="issue_refund", status=ToolCallStatus.DONE
    ).count()


def _feedback(run, index: int) -> list[str]:
    return [item["message"] for item in run.turns.get(index=index).feedback]


def _quorum(**quorum):
    """Make a policy version with this quorum the active one (before any run pins it)."""
    base = demo_policy_version()
    return policy_version_create(
        thresholds=base.thresholds,
        question_set=base.question_set,
        question_set_version=base.question_set_version,
        quorum=quorum,
        activate=True,
    )


def _claim(escalation, user, *, minutes: int = 15, ago: int = 2):
    now = timezone.now()
    Escalation.objects.filter(pk=escalation.pk).update(
        claimed_by=user,
        claimed_at=now - timedelta(minutes=ago),
        claim_expires_at=now + timedelta(minutes=minutes),
    )


# ---- the held calls a reviewer sees --------------------------------------------------------


def test_the_held_call_shows_the_tool_its_risk_and_the_exact_action_an_approval_binds_to():
    run, escalation = _waiting_refund()
    [held] = escalation_held_calls(escalation)
    assert (held.position, held.tool, held.arguments) == (0, "issue_refund", REFUND)
    assert held.description == "Refund money to the customer's card. Cannot be undone."
    assert held.schema["required"] == ["order_id", "amount"]
    assert (held.declared_risk, held.guardian_risk) == ("irreversible", "irreversible")
    # The key is the one the resumed turn (index 2) runs the refund under.
    key = idempotency_key(
        run_id=str(run.pk), turn_index=2, position=0, tool="issue_refund", arguments=REFUND
    )
    assert held.idempotency_key == key
    assert held.action_hash == action_hash("issue_refund", REFUND, key)
    assert (held.needs_quorum, held.approvals) == (False, [])


# ---- an approval is bound to the exact action ----------------------------------------------


def test_an_approved_refund_runs_once_under_the_approved_key_and_uses_its_approval(reviewer):
    run, escalation = _waiting_refund()
    [seen] = escalation_held_calls(escalation)
    _resolve(escalation, reviewer, decision="approve", seen_hashes={0: seen.action_hash})
    approval = Approval.objects.get()
    assert (approval.action_hash, approval.used_at) == (seen.action_hash, None)
    assert approval.expires_at > timezone.now() + timedelta(minutes=59)

    run = drive(run)
    assert run.status == RunStatus.SUCCEEDED
    assert list(DemoSideEffect.objects.values_list("idempotency_key", flat=True)) == [
        approval.idempotency_key
    ]
    approval.refresh_from_db()
    assert approval.used_at is not None
    assert approval.used_on_turn == run.turns.get(index=2)


def test_arguments_changed_after_approval_do_not_run_and_the_run_does_not_act(reviewer):
    run, escalation = _waiting_refund()
    _resolve(escalation, reviewer, decision="approve")
    # The worker replays the held turn's recorded proposal: change it after the approval.
    held_turn = run.turns.get(index=1)
    proposal = held_turn.proposal
    proposal["calls"][0]["arguments"]["amount"] = 4990.0
    Turn.objects.filter(pk=held_turn.pk).update(proposal=proposal)

    assert run_advance(run_id=run.pk) == "continued"
    assert DemoSideEffect.objects.count() == 0
    assert _refund_calls_done(run) == 0
    refund = ToolCall.objects.get(turn__run=run, turn__index=2)
    assert refund.status == ToolCallStatus.REJECTED  # not approved
    assert _feedback(run, 2) == [
        "Call 0 (issue_refund) was not approved: the call changed after approval."
    ]
    assert Approval.objects.get().used_at is None

    run = drive(run)
    assert DemoSideEffect.objects.count() == 0
    assert _refund_calls_done(run) == 0


def test_an_approval_edited_after_the_fact_counts_for_nothing(reviewer):
    run, escalation = _waiting_refund()
    _resolve(escalation, reviewer, decision="approve")
    # Its stored action no longer hashes to what it stores: tampered with.
    Approval.objects.update(arguments={"order_id": "ord_4472", "amount": 4990.0})
    Approval.objects.update(original_arguments=REFUND)
    run_advance(run_id=run.pk)
    assert DemoSideEffect.objects.count() == 0
    assert "the call changed after approval" in _feedback(run, 2)[0]


def test_an_expired_approval_runs_nothing_and_the_actor_is_told(reviewer):
    run, escalation = _waiting_refund()
    _resolve(escalation, reviewer, decision="approve")
    Approval.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    run_advance(run_id=run.pk)
    assert DemoSideEffect.objects.count() == 0
    [message] = _feedback(run, 2)
    assert message.startswith("Call 0 (issue_refund) was not approved: its approval expired at ")
    assert Approval.objects.get().used_at is None


def test_an_approval_is_single_use(reviewer):
    run, escalation = _waiting_refund()
    _resolve(escalation, reviewer, decision="approve")
    run_advance(run_id=run.pk)
    assert DemoSideEffect.objects.count() == 1
    # The step replayed from the held turn once more (its turn gone from the log): the
    # approval was used, so the refund does not run a second time under it.
    with log_purge():  # the log is append-only outside a purge
        Turn.objects.filter(run=run, index__gte=2).delete()
    run_advance(run_id=run.pk)
    assert DemoSideEffect.objects.count() == 1
    assert "its approval was already used" in _feedback(run, 2)[0]


def test_a_retried_turn_reuses_its_own_approval(reviewer):
    """A worker marked the approval used by turn 2 and died before the refund started: the
    retry of that same turn runs it, once, even though the approval has expired since."""
    run, escalation = _waiting_refund()
    _resolve(escalation, reviewer, decision="approve")
    turn = Turn.objects.create(
        run=run,
        index=2,
        state_hash="",
        started_at=timezone.now(),
        proposal=run.turns.get(index=1).proposal,
    )
    Approval.objects.update(
        used_at=timezone.now(), used_on_turn=turn, expires_at=timezone.now() - timedelta(minutes=1)
    )
    run = drive(run)
    assert run.status == RunStatus.SUCCEEDED
    assert DemoSideEffect.objects.count() == 1


def test_a_call_that_changed_since_the_page_was_opened_is_not_approved(reviewer):
    run, escalation = _waiting_refund()
    [seen] = escalation_held_calls(escalation)
    ToolCall.objects.filter(turn__run=run, turn__index=1).update(
        arguments={"order_id": "ord_4472", "amount": 4990.0}
    )
    with pytest.raises(EscalationError) as refused:
        _resolve(escalation, reviewer, decision="approve", seen_hashes={"0": seen.action_hash})
    assert refused.value.problems == [
        "call 0 (issue_refund) changed since you opened it; look at it again"
    ]
    assert not Approval.objects.exists()
    assert Escalation.objects.get(pk=escalation.pk).status == EscalationStatus.OPEN


# ---- edited arguments ----------------------------------------------------------------------


def test_edited_arguments_run_with_the_edited_values_and_the_original_is_kept(reviewer):
    run, escalation = _waiting_refund()
    edited = {"order_id": "ord_4472", "amount": 20.0}
    _resolve(escalation, reviewer, decision="approve", edited_arguments={0: edited})
    approval = Approval.objects.get()
    assert (approval.arguments, approval.original_arguments, approval.modified) == (
        edited,
        REFUND,
        True,
    )
    run = drive(run)
    assert run.status == RunStatus.SUCCEEDED
    assert list(DemoSideEffect.objects.values_list("payload", flat=True)) == [edited]
    ran = ToolCall.objects.get(turn__run=run, turn__index=2)
    assert (ran.arguments, ran.status) == (edited, ToolCallStatus.DONE)
    assert ran.idempotency_key == approval.idempotency_key
    # The held call stays on record as proposed.
    assert ToolCall.objects.get(turn__run=run, turn__index=1).arguments == REFUND


def test_an_invalid_edit_names_every_problem_and_records_nothing(reviewer):
    run, escalation = _waiting_refund()
    with pytest.raises(EscalationError) as refused:
        _resolve(
            escalation,
            reviewer,
            decision="approve",
            edited_arguments={0: {"amount": -5, "note": "x"}},
        )
    problems = refused.value.problems
    assert len(problems) == 3, problems
    assert all(p.startswith("arguments of call 0 (issue_refund): ") for p in problems)
    text = " | ".join(problems)
    assert "order_id" in text
    assert "amount" in text
    assert "note" in text
    assert str(refused.value) == "; ".join(problems)
    assert not Approval.objects.exists()
    assert Escalation.objects.get(pk=escalation.pk).status == EscalationStatus.OPEN


def test_arguments_are_edited_only_to_approve(reviewer):
    run, escalation = _waiting_refund()
    with pytest.raises(EscalationError, match="edited only to approve"):
        _resolve(escalation, reviewer, decision="reject", reason="no", edited_arguments={0: REFUND})


# ---- quorum --------------------------------------------------------------------------------


def test_a_quorum_call_needs_two_distinct_approvers(reviewer, other_reviewer):
    _quorum(tools=["issue_refund"])
    run, escalation = _waiting_refund()
    assert escalation_held_calls(escalation)[0].needs_quorum
    _claim(escalation, reviewer)

    assert _resolve(escalation, reviewer, decision="approve") is None
    escalation.refresh_from_db()
    assert (escalation.status, escalation.claimed_by) == (EscalationStatus.OPEN, None)
    event = escalation.events.get(kind="approved_one")
    assert event.actor == reviewer
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING
    assert run_advance(run_id=run.pk) == "skipped"
    assert DemoSideEffect.objects.count() == 0

    with pytest.raises(EscalationError, match="second, different approver"):
        _resolve(escalation, reviewer, decision="approve")

    verdict = _resolve(escalation, other_reviewer, decision="approve")
    assert verdict.reviewer == other_reviewer
    assert Approval.objects.filter(escalation=escalation).count() == 2
    run = drive(run)
    assert run.status == RunStatus.SUCCEEDED
    assert DemoSideEffect.objects.count() == 1
    assert not Approval.objects.filter(used_at__isnull=True).exists()


def test_next_hands_a_quorum_item_to_the_second_approver_not_back_to_the_first(
    reviewer, other_reviewer
):
    _quorum(tools=["issue_refund"])
    _, escalation = _waiting_refund()
    _claim(escalation, reviewer)
    assert _resolve(escalation, reviewer, decision="approve") is None

    assert escalation_claim_next(reviewer=reviewer).status == "empty"
    claim = escalation_claim_next(reviewer=other_reviewer)
    assert (claim.status, claim.escalation.pk) == ("claimed", escalation.pk)


def test_a_lapsed_first_approval_does_not_count_and_is_given_anew(
    reviewer, other_reviewer, django_user_model
):
    _quorum(tools=["issue_refund"])
    run, escalation = _waiting_refund()
    assert _resolve(escalation, reviewer, decision="approve") is None
    Approval.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    # Alone with a lapsed partner: still a first approval.
    assert _resolve(escalation, other_reviewer, decision="approve") is None
    third = django_user_model.objects.create_user("third_reviewer")
    third.groups.set(Group.objects.filter(name="reviewer"))
    assert _resolve(escalation, third, decision="approve") is not None
    run = drive(run)
    # The lapsed approval of the first reviewer is neither needed nor in the way.
    assert (run.status, DemoSideEffect.objects.count()) == (RunStatus.SUCCEEDED, 1)
    assert Approval.objects.filter(used_at__isnull=True).get().reviewer == reviewer


def test_a_reviewer_whose_approval_lapsed_may_approve_again(reviewer, other_reviewer):
    _quorum(tools=["issue_refund"])
    run, escalation = _waiting_refund()
    _resolve(escalation, reviewer, decision="approve")
    Approval.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    assert _resolve(escalation, other_reviewer, decision="approve") is None
    assert _resolve(escalation, reviewer, decision="approve") is not None
    assert Approval.objects.count() == 2
    run = drive(run)
    assert DemoSideEffect.objects.count() == 1


def test_under_a_quorum_one_rejection_rejects(reviewer, other_reviewer):
    _quorum(tools=["issue_refund"])
    run, escalation = _waiting_refund()
    assert _resolve(escalation, reviewer, decision="approve") is None
    verdict = _resolve(escalation, other_reviewer, decision="reject", reason="Insured parcel")
    assert verdict.decision == "reject"
    run = drive(run)
    assert DemoSideEffect.objects.count() == 0
    assert run.status == RunStatus.FAILED


def test_two_approvers_must_approve_the_same_action(reviewer, other_reviewer):
    _quorum(tools=["issue_refund"])
    run, escalation = _waiting_refund()
    _resolve(escalation, reviewer, decision="approve")
    with pytest.raises(EscalationError, match="reviewer approved it with other arguments"):
        _resolve(
            escalation,
            other_reviewer,
            decision="approve",
            edited_arguments={0: {"order_id": "ord_4472", "amount": 1.0}},
        )


def test_a_regulated_quorum_covers_a_call_the_guardian_classes_regulated(reviewer, other_reviewer):
    _quorum(regulated=True)
    scenario = scripted_scenario("refund_waits_for_approval")
    scripted = {key: value for key, value in scenario.items() if key != "expect"}
    scripted["guardian"]["risk"]["issue_refund"] = {
        "read_only": 0.0,
        "reversible_write": 0.0,
        "irreversible": 0.1,
        "regulated": 0.9,
    }
    run = run_start(
        goal=scenario["goal"],
        tools=scenario["tools"],
        actor="scripted",
        guardian="scripted",
        budgets=scenario["budgets"],
        config={"scenario": scripted},
    )
    run = drive(run)
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    [held] = escalation_held_calls(escalation)
    assert (held.risk_class, held.needs_quorum) == ("regulated", True)
    assert _resolve(escalation, reviewer, decision="approve") is None
    assert _resolve(escalation, other_reviewer, decision="approve") is not None


def test_a_regulated_quorum_leaves_an_irreversible_call_to_one_approver(reviewer):
    _quorum(regulated=True)
    run, escalation = _waiting_refund()
    assert _resolve(escalation, reviewer, decision="approve") is not None


def test_the_command_says_an_approval_waits_for_a_second_approver(reviewer, capsys):
    _quorum(tools=["issue_refund"])
    run, escalation = _waiting_refund()
    call_command("resolve_escalation", str(escalation.pk), "--approve", "--reviewer", "reviewer")
    assert "needs a second, different approver" in capsys.readouterr().out


# ---- one verdict per escalation; only the holder decides -----------------------------------


def test_a_second_verdict_is_refused_as_already_decided(reviewer, other_reviewer):
    run, escalation = _waiting_refund()
    _resolve(escalation, reviewer, decision="approve")
    with pytest.raises(AlreadyDecided, match=r"already decided by reviewer at .* \(approve\)"):
        _resolve(escalation, other_reviewer, decision="reject", reason="too late")
    assert Verdict.objects.count() == 1
    assert Approval.objects.count() == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql(
    reason="two writers at the same moment: SQLite serialises every writer, so there is no race"
)
def test_a_double_submit_at_the_same_moment_gives_one_verdict(reviewer):
    run, escalation = _waiting_refund()
    barrier = threading.Barrier(2)
    outcomes: list[object] = []

    def submit():
        barrier.wait()
        try:
            outcomes.append(_resolve(escalation, reviewer, decision="approve"))
        except EscalationError as exc:
            outcomes.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(type(o).__name__ for o in outcomes) == ["AlreadyDecided", "Verdict"]
    assert Verdict.objects.count() == 1
    assert Approval.objects.count() == 1


def test_only_the_holder_decides(reviewer, other_reviewer):
    run, escalation = _waiting_refund()
    _claim(escalation, other_reviewer)
    with pytest.raises(EscalationError) as refused:
        _resolve(escalation, reviewer, decision="approve")
    [problem] = refused.value.problems
    assert problem.startswith("claim: other_reviewer holds this escalation since ")
    assert not Approval.objects.exists()
    verdict = _resolve(escalation, other_reviewer, decision="approve")
    assert verdict.seconds_to_decide == pytest.approx(120, abs=30)  # from their claim


def test_a_lapsed_claim_holds_nothing(reviewer, other_reviewer):
    run, escalation = _waiting_refund()
    _claim(escalation, other_reviewer, minutes=-1, ago=20)
    assert _resolve(escalation, reviewer, decision="approve") is not None


def test_a_verdict_is_written_into_the_items_history_and_releases_it(reviewer):
    run, escalation = _waiting_refund()
    _claim(escalation, reviewer)
    _resolve(escalation, reviewer, decision="reject", reason="Insured parcel")
    escalation.refresh_from_db()
    assert escalation.claimed_by is None
    event = escalation.events.get(kind="decided")
    assert (event.actor, event.note) == (reviewer, "reject: Insured parcel")


def test_an_expired_escalation_says_in_its_history_that_nothing_ran(reviewer):
    run, escalation = _waiting_refund()
    Escalation.objects.filter(pk=escalation.pk).update(
        deadline=timezone.now() - timedelta(minutes=1)
    )
    run_sweep_stalled()
    event = EscalationEvent.objects.get(escalation=escalation)
    assert (event.kind, event.note) == ("expired", "deadline passed unanswered; nothing ran")
    with pytest.raises(AlreadyDecided, match="expired unanswered"):
        _resolve(escalation, reviewer, decision="approve")
    assert DemoSideEffect.objects.count() == 0


def test_an_unknown_escalation_is_a_clear_error(reviewer):
    with pytest.raises(EscalationError, match="no such escalation"):
        escalation_resolve(escalation_id=999999, reviewer=reviewer, decision="approve")


# ---- the reviewer's own risk class ---------------------------------------------------------


def test_the_risk_example_is_labelled_with_the_reviewers_own_class(reviewer):
    run, escalation = _waiting_refund()
    verdict = _resolve(escalation, reviewer, decision="approve", risk_labels={0: "regulated"})
    assert verdict.risk_labels == {"0": "regulated"}
    example = LabelledExample.objects.get(condition="risk")
    assert (example.label, example.labelled_by) == ("regulated", reviewer)


def test_without_a_class_of_their_own_the_label_is_the_class_the_call_was_held_at(reviewer):
    run, escalation = _waiting_refund()
    verdict = _resolve(escalation, reviewer, decision="reject", reason="no")
    assert verdict.risk_labels == {}
    assert LabelledExample.objects.get(condition="risk").label == "irreversible"


def test_a_risk_class_that_is_no_class_is_refused(reviewer):
    run, escalation = _waiting_refund()
    with pytest.raises(EscalationError, match="risk_labels: call 0 \\(issue_refund\\): one of"):
        _resolve(escalation, reviewer, decision="approve", risk_labels={0: "dangerous"})


# ---- bulk ----------------------------------------------------------------------------------


def test_bulk_gives_each_item_its_own_verdict_and_reports_the_ones_that_fail(
    reviewer, other_reviewer
):
    runs = [_waiting_refund() for _ in range(4)]
    (first_run, first), (_, second), (_, held), (_, decided) = runs
    injected = drive(start("injected_instruction")).escalations.get()
    assert injected.kind == EscalationKind.INTEGRITY
    _claim(held, other_reviewer)
    _resolve(decided, other_reviewer, decision="approve")

    ids = [first.pk, second.pk, held.pk, decided.pk, injected.pk]
    results = escalation_resolve_bulk(escalation_ids=ids, reviewer=reviewer, decision="approve")
    by_id = {pk: (verdict, problem) for pk, verdict, problem in results}
    assert [pk for pk, _, _ in results] == ids
    for pk in (first.pk, second.pk):
        verdict, problem = by_id[pk]
        assert (verdict.escalation_id, verdict.reviewer, problem) == (pk, reviewer, "")
    assert "other_reviewer holds this escalation" in by_id[held.pk][1]
    assert "already decided by other_reviewer" in by_id[decided.pk][1]
    assert "is not like the first selected" in by_id[injected.pk][1]
    assert all(by_id[pk][0] is None for pk in (held.pk, decided.pk, injected.pk))
    # Each approval is bound to its own run's call.
    hashes = set(
        Approval.objects.filter(escalation__in=[first, second]).values_list(
            "action_hash", flat=True
        )
    )
    assert len(hashes) == 2
    first_run = drive(first_run)
    assert first_run.status == RunStatus.SUCCEEDED


def test_bulk_rejects_with_one_reason_for_each(reviewer):
    (_, one), (_, two) = _waiting_refund(), _waiting_refund()
    results = escalation_resolve_bulk(
        escalation_ids=[one.pk, two.pk], reviewer=reviewer, decision="reject", reason="Insured"
    )
    assert [(v.decision, v.reason, p) for _, v, p in results] == [
        ("reject", "Insured", ""),
        ("reject", "Insured", ""),
    ]


# ---- the quorum in a policy version --------------------------------------------------------


def test_a_policy_versions_quorum_is_validated_naming_every_problem():
    base = demo_policy_version()
    problems = policy_version_problems(
        thresholds=base.thresholds,
        question_set=base.question_set,
        question_set_version=base.question_set_version,
        quorum={"regulated": "yes", "tools": ["issue_refund", 3, "issue_refund"], "all": True},
    )
    assert problems == [
        "quorum.all: unknown key (allowed: regulated, tools)",
        "quorum.regulated: must be true or false, got 'yes'",
        "quorum.tools[1]: must be a tool name, got 3",
        "quorum.tools: names a tool more than once",
    ]
    assert (
        policy_version_problems(
            thresholds=base.thresholds,
            question_set=base.question_set,
            question_set_version=base.question_set_version,
            quorum={"regulated": True, "tools": ["issue_refund"]},
        )
        == []
    )
