"""Writes on escalations: a person's verdict, the labelled examples it becomes, and the run's
next move. Every way of resolving (command, admin, the reviewers' queue) calls escalation_resolve.
"""

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from escalations.models import (
    Escalation,
    EscalationKind,
    EscalationStatus,
    ExampleSource,
    LabelledExample,
    Verdict,
    VerdictDecision,
)
from guardian_core.db import retry_on_conflict
from guardian_core.engine.conditions import (
    DRIFT_SCORES,
    Condition,
    RiskClass,
    compared_probability,
    parse_answer,
)
from guardian_core.engine.policy import Outcome, decide, history_needed
from runs import mapping
from runs.models import Run, RunStatus, ToolCall, ToolCallStatus
from runs.queue import enqueue_after_commit


class EscalationError(ValueError):
    """The verdict cannot be applied; the message names every problem."""


def escalation_resolve(
    *,
    escalation_id: int,
    reviewer: AbstractBaseUser,
    decision: str,
    reason: str = "",
    answer: dict | None = None,
    approved_calls: list[int] | None = None,
    rerun: bool = False,
) -> Verdict:
    """Record a person's verdict on an open escalation and move its run on.

    approve: exactly the approved calls of the held step run (all held calls by default);
      for an ambiguous call, it is recorded as having gone through; for a coder/reviewer loop,
      the coder's last code is accepted as the run's answer.
    reject: the actor is told which calls were rejected and why, and proposes again; for an
      ambiguous call, it is recorded as not done and the run stops, unless `rerun` asks for
      it to run again under its own idempotency key; any other escalation rejected stops
      the run.
    answer: {condition: label} for the conditions the guardian was unsure of; the policy
      decides again with the human answers.
    """
    return retry_on_conflict(
        lambda: _resolve(escalation_id, reviewer, decision, reason, answer, approved_calls, rerun)
    )


def _resolve(escalation_id, reviewer, decision, reason, answer, approved_calls, rerun) -> Verdict:
    run_id = Escalation.objects.values_list("run_id", flat=True).get(pk=escalation_id)
    with transaction.atomic():
        # Locks are taken in one order everywhere: the run, then its escalation (run_cancel,
        # the turn's outcome and the sweeper do the same), so a verdict racing a cancel
        # waits instead of deadlocking.
        Run.objects.select_for_update().filter(pk=run_id).first()
        escalation = (
            Escalation.objects.select_for_update(of=("self",))
            .select_related("run__policy_version", "turn__decision")
            .get(pk=escalation_id)
        )
        problems = _problems(escalation, reviewer, decision, reason, answer, approved_calls)
        if rerun and not (
            decision == VerdictDecision.REJECT and escalation.kind == EscalationKind.AMBIGUOUS_CALL
        ):
            problems.append("rerun: only an ambiguous call that did not go through can run again")
        if problems:
            raise EscalationError("; ".join(problems))
        held = list(escalation.reason.get("held_calls", []))
        verdict = Verdict.objects.create(
            escalation=escalation,
            decision=decision,
            reason=reason.strip(),
            answer=answer,
            approved_calls=sorted(held if approved_calls is None else approved_calls)
            if decision == VerdictDecision.APPROVE
            else [],
            rerun=rerun,
            reviewer=reviewer,
        )
        _labelled_examples(escalation, verdict)
        outcome = _move_run(escalation, verdict)
        verdict.resulting_outcome = outcome
        verdict.save(update_fields=["resulting_outcome"])
        escalation.status = {
            VerdictDecision.APPROVE: EscalationStatus.APPROVED,
            VerdictDecision.REJECT: EscalationStatus.REJECTED,
            VerdictDecision.ANSWER: EscalationStatus.ANSWERED,
        }[decision]
        escalation.resolved_at = timezone.now()
        escalation.save(update_fields=["status", "resolved_at"])
    return verdict


def uncertain_conditions(escalation: Escalation) -> list[str]:
    """The conditions a person may answer for this escalation."""
    return [
        reason["source"]
        for reason in escalation.reason.get("triggered", [])
        if reason["source"] in {c.value for c in Condition}
    ]


def _problems(escalation, reviewer, decision, reason, answer, approved_calls) -> list[str]:
    problems = []
    if escalation.status != EscalationStatus.OPEN:
        return [f"escalation {escalation.pk} is already {escalation.status}"]
    if not reviewer.has_perm("escalations.review_escalation"):
        problems.append(f"reviewer: {reviewer} may not review escalations")
    if decision not in VerdictDecision.values:
        return [*problems, f"decision: must be one of {', '.join(VerdictDecision.values)}"]
    kind = escalation.kind
    held = set(escalation.reason.get("held_calls", []))
    if decision == VerdictDecision.APPROVE:
        approvable = (
            EscalationKind.GATED_STEP,
            EscalationKind.AMBIGUOUS_CALL,
            EscalationKind.REVIEW_LOOP,
        )
        if kind not in approvable:
            problems.append(
                "decision: only a held step, an ambiguous call or a coder/reviewer loop "
                "can be approved"
            )
        if kind == EscalationKind.REVIEW_LOOP and not escalation.reason.get("last_code"):
            problems.append("decision: the coder produced no code to approve")
        unknown = sorted(set(approved_calls or []) - held)
        if unknown:
            problems.append(f"approved_calls: {unknown} are not held calls of this step")
    if decision == VerdictDecision.REJECT and not reason.strip():
        problems.append("reason: a rejection needs a reason the actor can act on")
    if decision == VerdictDecision.ANSWER:
        allowed = set(uncertain_conditions(escalation))
        if not allowed:
            problems.append("answer: this escalation asks no question; approve or reject it")
        elif not isinstance(answer, dict) or not answer:
            problems.append(f"answer: give a label for {', '.join(sorted(allowed))}")
        else:
            for condition, label in answer.items():
                if condition not in allowed:
                    problems.append(f"answer.{condition}: not asked here ({sorted(allowed)})")
                elif _label_problem(condition, label):
                    problems.append(f"answer.{condition}: {_label_problem(condition, label)}")
            missing = sorted(allowed - set(answer))
            if missing:
                problems.append(f"answer: no label for {', '.join(missing)}")
    return problems


def _label_problem(condition: str, label: object) -> str | None:
    if condition == Condition.RISK:
        return None if label in RiskClass.values else f"one of {', '.join(RiskClass.values)}"
    if condition == Condition.DRIFT:
        ok = isinstance(label, int) and not isinstance(label, bool) and label in DRIFT_SCORES
        return None if ok else "a drift score from 0 to 4"
    return None if isinstance(label, bool) else "true or false"


def _as_probability(condition: str, label: object) -> object:
    """A person's label as a certain answer: p = 1 or 0, or a one-hot distribution."""
    if condition == Condition.RISK:
        return {value: 1.0 if value == label else 0.0 for value in RiskClass.values}
    if condition == Condition.DRIFT:
        return {str(score): 1.0 if score == label else 0.0 for score in DRIFT_SCORES}
    return 1.0 if label else 0.0


def _labelled_examples(escalation: Escalation, verdict: Verdict) -> None:
    turn = escalation.turn
    decision = turn.decision
    common = {
        "source": ExampleSource.HUMAN,
        "question_set_version": decision.question_set_version,
        "model_version": decision.guardian_model_version,
        "policy_version": escalation.run.policy_version,
        "verdict": verdict,
        "labelled_by": verdict.reviewer,
    }
    if escalation.kind == EscalationKind.GATED_STEP:
        # The reviewer saw each held call with its class; the class is the label either way.
        # The example holds the projection the guardian judged that call on.
        shown = turn.risk_projections or []
        for call in turn.tool_calls.filter(position__in=escalation.reason.get("held_calls", [])):
            raw = (decision.risk_answers or [None] * (call.position + 1))[call.position]
            LabelledExample.objects.create(
                condition=Condition.RISK,
                projection=shown[call.position] if call.position < len(shown) else {},
                probability=compared_probability(Condition.RISK, parse_answer(Condition.RISK, raw)),
                label=call.risk_class,
                **common,
            )
    for condition, label in (verdict.answer or {}).items():
        raw = decision.answers.get(condition)
        LabelledExample.objects.create(
            condition=condition,
            projection=turn.projection,
            probability=compared_probability(
                Condition(condition), parse_answer(Condition(condition), raw)
            ),
            label=label,
            **common,
        )


def _move_run(escalation: Escalation, verdict: Verdict) -> str:
    """Set the run's status after the verdict; returns the outcome it leads to."""

    run = escalation.run
    if run.status != RunStatus.WAITING:
        return run.status
    kind, decision = escalation.kind, verdict.decision
    if kind == EscalationKind.AMBIGUOUS_CALL:
        ambiguous = ToolCall.objects.filter(
            turn=escalation.turn,
            position__in=escalation.reason.get("ambiguous_calls", []),
            status=ToolCallStatus.AMBIGUOUS,
        )
        note = f" by {verdict.reviewer}" + (f": {verdict.reason}" if verdict.reason else "")
        if decision == VerdictDecision.APPROVE:
            # It went through: done, with the reviewer's word standing in for the output.
            ambiguous.update(
                status=ToolCallStatus.DONE,
                result=f"Confirmed done{note}.",
                finished_at=timezone.now(),
            )
            return _continue(run, enqueue_after_commit)
        ambiguous.update(status=ToolCallStatus.FAILED, error=f"Did not go through, said{note}.")
        if verdict.rerun:
            return _continue(run, enqueue_after_commit)
        return _stop(run, RunStatus.FAILED, "ambiguous_call_not_done")
    if kind == EscalationKind.GATED_STEP:
        return _continue(run, enqueue_after_commit)
    if kind == EscalationKind.REVIEW_LOOP and decision == VerdictDecision.APPROVE:
        run.final_answer = escalation.reason["last_code"]
        return _stop(run, RunStatus.SUCCEEDED, "approved_by_reviewer")
    if decision == VerdictDecision.REJECT:
        return _stop(run, RunStatus.FAILED, "rejected_by_reviewer")
    outcome = _decide_with_human_answers(escalation, verdict.answer or {})
    if outcome in (Outcome.CONTINUE, Outcome.REPLAN):
        return _continue(run, enqueue_after_commit, outcome)
    if outcome == Outcome.STOP_SUCCESS:
        run.final_answer = mapping.proposal_from_json(escalation.turn.proposal).message
        return _stop(run, RunStatus.SUCCEEDED, "goal_reached")
    if outcome == Outcome.STOP_FAILURE:
        return _stop(run, RunStatus.FAILED, "stopped_after_review")
    # Still unsure about something a person was not asked: the run stays with a person.
    return _stop(run, RunStatus.FAILED, "unresolved_after_review")


def _decide_with_human_answers(escalation: Escalation, answer: dict) -> Outcome:
    turn = escalation.turn
    decision = turn.decision
    answers = dict(decision.answers)
    for condition, label in answer.items():
        answers[condition] = _as_probability(condition, label)
    if answer.get(Condition.INTEGRITY) is True:
        # Confirmed injected: the output stays withheld and the run goes on without it.
        answers[Condition.INTEGRITY] = 0.0
    run = escalation.run
    policy = mapping.policy_for_run(run)
    # Only the turns the policy's windows read, as on every turn.
    earlier = (
        run.turns.filter(index__lt=turn.index)
        .select_related("decision")
        .order_by("-index")[: history_needed(policy)]
    )
    result = decide(
        answers,
        policy,
        [mapping.past_turn(t) for t in reversed(earlier)],
        mapping.usage_from_json(turn.usage),
        calls=tuple(decision.call_signatures),
        replans=mapping.run_state(run).replans,
    )
    return result.outcome


def _continue(run, enqueue_after_commit, outcome: Outcome = Outcome.CONTINUE) -> str:
    run.status = RunStatus.RUNNING
    run.save(update_fields=["status", "updated_at"])
    enqueue_after_commit(run.pk)
    return outcome.value


def _stop(run, status: str, reason: str) -> str:
    run.status = status
    run.stop_reason = reason
    run.finished_at = timezone.now()
    run.save(update_fields=["status", "stop_reason", "final_answer", "finished_at", "updated_at"])
    return Outcome.STOP_SUCCESS.value if status == RunStatus.SUCCEEDED else "stop_failure"
