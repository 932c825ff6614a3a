"""Verdicts: a person resolves an escalation, and what the verdict does to its run."""

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from escalations.decision_pane import uncertain_conditions
from escalations.errors import EscalationError
from escalations.examples import labelled_examples_create
from escalations.held_calls import HeldCall, escalation_held_calls
from escalations.models import (
    AUDIT_OUTCOME,
    ENDED_BY_REJECTION,
    VERDICT_REASON_MAX_CHARS,
    Approval,
    Escalation,
    EscalationEvent,
    EscalationEventKind,
    EscalationKind,
    EscalationStatus,
    Verdict,
    VerdictDecision,
)
from escalations.queue import escalation_claim_holder
from guardian_core.db import retry_on_conflict
from guardian_core.engine.argument_edits import edited_arguments_words
from guardian_core.engine.canonical import canonical_json
from guardian_core.engine.conditions import DRIFT_SCORES, Condition, RiskClass
from guardian_core.engine.judge import decide_judged
from guardian_core.engine.policy import Outcome, history_needed
from guardian_core.engine.tools import action_hash, validate_call
from guardian_core.logs import log_context
from guardian_core.wakeups import escalation_settled_after_commit
from runs import judging, mapping, sealing
from runs.models import Run, RunStatus, ToolCall, ToolCallStatus
from runs.queue import enqueue_after_commit
from runs.tools import run_tools
from runs.vocabulary import verdict_answer_words

logger = logging.getLogger(__name__)

# Every way of resolving (the command, the admin, the reviewers' queue, the API) calls
# escalation_resolve: one verdict per escalation, its approvals, the labelled examples it
# becomes (escalations/examples.py) and the run's next move, in one transaction.


# The risk classes as labels, least severe first (the engine's RiskClass is a plain enum).
RISK_CLASSES = tuple(risk.value for risk in RiskClass)


class AlreadyDecided(EscalationError):
    """The escalation was closed before this verdict came (a second tab, a retried submit, the
    deadline): the first outcome stands and this verdict is not recorded."""


@dataclass(frozen=True)
class _Submitted:
    """A reviewer's verdict as submitted, before any of it is checked."""

    decision: str
    reason: str
    answer: dict | None
    approved_calls: list[int] | None
    rerun: bool
    edited_arguments: Mapping | None
    risk_labels: Mapping | None
    seen_hashes: Mapping | None
    end_as: str = ""


# How a reviewer may end a run by rejecting an escalation that does not hold a step (the run's
# status after it, and its stop reason).
END_AS = {
    "failed": (RunStatus.FAILED, "rejected_by_reviewer"),
    "cancelled": (RunStatus.CANCELLED, "cancelled_by_reviewer"),
}


def escalation_resolve(
    *,
    escalation_id: int,
    reviewer: AbstractBaseUser,
    decision: str,
    reason: str = "",
    answer: dict | None = None,
    approved_calls: list[int] | None = None,
    rerun: bool = False,
    edited_arguments: Mapping[int, dict] | None = None,
    risk_labels: Mapping[int, str] | None = None,
    seen_hashes: Mapping[int, str] | None = None,
    end_as: str = "",
) -> Verdict | None:
    """Record a person's verdict on an open escalation and move its run on.

    approve: exactly the approved calls of the held step run (all held calls by default), each
      bound to the exact action approved: an Approval per call stores the SHA-256 of (tool,
      arguments, idempotency key), and the worker runs the call only if what it is about to
      run hashes the same, once, before the approval expires (GUARDIAN_APPROVAL_MINUTES).
      `edited_arguments` replaces a call's arguments (checked against the tool's schema; the
      proposed ones are kept on the approval). Under a policy version's quorum a call needs
      two distinct approvers: the first approval is recorded, the item is released and stays
      open, and None is returned; the second completes the verdict.
      For an ambiguous call, approve records it as having gone through; for a coder/reviewer
      loop, the coder's last code is accepted as the run's answer.
    reject: the actor is told which calls were rejected and why, and proposes again; for an
      ambiguous call, it is recorded as not done and the run stops, unless `rerun` asks for
      it to run again under its own idempotency key; any other escalation rejected stops
      the run. One rejection rejects, whatever approvals a quorum had gathered.
    answer: {condition: label} for the conditions the guardian was unsure of; the policy
      decides again with the human answers. A run ends succeeded only with an answer: the
      actor's message must not be empty, and on a guardian failure (the guardian accepted no
      answer on that turn) an outcome of success continues the run instead, so the guardian
      is asked again on its next turn. An audit sample is only answered: its label becomes
      an example selected `audit_sample`, and its run is neither moved, told nor resealed
      (the verdict's resulting_outcome says "unchanged").
    end_as: how a rejection that ends the run ends it (not a held step's, nor an ambiguous
      call's): "failed" (the default) or "cancelled"; either needs the reason.
    risk_labels: for a held step, the reviewer's own risk class per call: the label of the
      call's risk example (the system's class when not given).
    seen_hashes: the action hash of each call as the reviewer's page showed it; a call that
      changed since is a problem, never approved blind.

    Only the holder of an unexpired claim may decide (an unclaimed item may be decided, e.g.
    from the command line). Raises EscalationError naming every problem, or AlreadyDecided
    when the escalation is closed already: one verdict per escalation.
    """
    submitted = _Submitted(
        decision=decision,
        reason=reason,
        answer=answer,
        approved_calls=approved_calls,
        rerun=rerun,
        edited_arguments=edited_arguments,
        risk_labels=risk_labels,
        seen_hashes=seen_hashes,
        end_as=end_as,
    )
    run_id = Escalation.objects.filter(pk=escalation_id).values_list("run_id", flat=True).first()
    with log_context(run_id=run_id, escalation_id=escalation_id):
        verdict = retry_on_conflict(lambda: _resolve(escalation_id, reviewer, submitted))
        if verdict is not None:
            logger.info(
                "verdict on escalation %s (run %s): %s, %s",
                escalation_id,
                run_id,
                verdict.decision,
                verdict.resulting_outcome,
                extra={
                    "decision": verdict.decision,
                    "resulting_outcome": verdict.resulting_outcome,
                    "reviewer_id": verdict.reviewer_id,
                },
            )
        return verdict


def escalation_resolve_bulk(
    *, escalation_ids: list[int], reviewer: AbstractBaseUser, decision: str, reason: str = ""
) -> list[tuple[int, Verdict | None, str]]:
    """Approve or reject several escalations of one kind and the same held tool(s) at once.

    Each goes through escalation_resolve on its own: its own verdict, approvals and hashes,
    its own transaction. Returns (escalation id, verdict or None, problem or "") per id, in
    the order given: an item that fails (held by someone else, already decided, of another
    kind or tool than the first one selected) says why, and the others proceed. A verdict of
    None with no problem is a first approval waiting for a second approver (quorum).
    """
    ids = list(dict.fromkeys(escalation_ids))
    found = {
        pk: (kind, tools)
        for pk, kind, tools in Escalation.objects.filter(pk__in=ids).values_list(
            "pk", "kind", "tools"
        )
    }
    first_pk = next((pk for pk in ids if pk in found), None)
    first = found.get(first_pk)
    results: list[tuple[int, Verdict | None, str]] = []
    for pk in ids:
        if decision not in (VerdictDecision.APPROVE, VerdictDecision.REJECT):
            results.append((pk, None, "decision: " + _("several items are approved or rejected")))
        elif pk not in found:
            results.append((pk, None, f"escalation {pk}: " + _("there is no such escalation")))
        elif found[pk] != first:
            results.append((pk, None, _bulk_mismatch(pk, found[pk], first_pk, first)))
        else:
            try:
                verdict = escalation_resolve(
                    escalation_id=pk, reviewer=reviewer, decision=decision, reason=reason
                )
            except EscalationError as exc:
                results.append((pk, None, str(exc)))
            else:
                results.append((pk, verdict, ""))
    return results


def _bulk_mismatch(pk: int, item: tuple[str, str], first_pk: int, first: tuple[str, str]) -> str:
    # Said as the queue shows it (the kind's label, the tools held), so a reviewer sees at
    # once why two ticked items could not go together.
    def said(kind_tools: tuple[str, str]) -> str:
        kind, tools = kind_tools
        held = tools.strip(",").replace(",", ", ")
        if held:
            return _("%(kind)s holding %(tools)s") % {
                "kind": EscalationKind(kind).label,
                "tools": held,
            }
        return _("%(kind)s with no tool") % {"kind": EscalationKind(kind).label}

    return f"escalation {pk}: " + _(
        "%(item)s is not like the first selected, #%(first_pk)s (%(first)s): only items of "
        "one kind holding the same tools go together; decide it on its own"
    ) % {"item": said(item), "first_pk": first_pk, "first": said(first)}


def _resolve(
    escalation_id: int, reviewer: AbstractBaseUser, submitted: _Submitted
) -> Verdict | None:
    run_id = Escalation.objects.filter(pk=escalation_id).values_list("run_id", flat=True).first()
    if run_id is None:
        raise EscalationError(f"escalation {escalation_id}: " + _("there is no such escalation"))
    decision, reason = submitted.decision, submitted.reason
    now = timezone.now()
    with transaction.atomic():
        # Locks are taken in one order everywhere: the run, then its escalation (run_cancel,
        # the turn's outcome and the sweeper do the same), so a verdict racing a cancel
        # waits instead of deadlocking. A second verdict waits here for the first to commit,
        # then finds the escalation closed.
        Run.objects.select_for_update().filter(pk=run_id).first()
        escalation = (
            Escalation.objects.select_for_update(of=("self",))
            .select_related("run__policy_version", "turn__decision", "claimed_by")
            .get(pk=escalation_id)
        )
        closed = _closed(escalation)
        if closed:
            # A verdict or the deadline settled it: the first outcome stands. A cancelled
            # run's escalation was settled by nobody; that is a plain refusal.
            if escalation.status == EscalationStatus.CANCELLED:
                raise EscalationError(closed)
            raise AlreadyDecided(closed)
        problems = _problems(
            escalation, reviewer, decision, reason, submitted.answer, submitted.approved_calls
        )
        problems += _holder_problems(escalation, reviewer, now)
        problems += _end_as_problems(escalation, decision, submitted.end_as)
        if submitted.rerun and not (
            decision == VerdictDecision.REJECT and escalation.kind == EscalationKind.AMBIGUOUS_CALL
        ):
            problems.append(
                "rerun: " + _("only an ambiguous call that did not go through can run again")
            )
        plan, labels, step_problems = _held_step_plan(escalation, reviewer, submitted, now)
        problems += step_problems
        if problems:
            raise EscalationError(problems)
        if plan is not None:
            _approvals_write(escalation, reviewer, plan, now)
            if not all(item.complete for item in plan):
                _await_second_approver(escalation, reviewer, plan, labels)
                # The first approval is part of the run's story: sealed now (runs/chain.py).
                sealing.run_reseal(run_id)
                return None
        held = list(escalation.reason.get("held_calls", []))
        approved_calls = submitted.approved_calls
        verdict = Verdict.objects.create(
            escalation=escalation,
            decision=decision,
            reason=reason.strip(),
            answer=submitted.answer,
            approved_calls=sorted(held if approved_calls is None else approved_calls)
            if decision == VerdictDecision.APPROVE
            else [],
            rerun=submitted.rerun,
            risk_labels={str(position): label for position, label in sorted(labels.items())},
            seconds_to_decide=_seconds_to_decide(escalation, reviewer, now),
            reviewer=reviewer,
        )
        labelled_examples_create(escalation=escalation, verdict=verdict)
        audit = escalation.kind == EscalationKind.AUDIT_SAMPLE
        # An audit sample's verdict labels a turn: the run is not moved, nor told.
        outcome = AUDIT_OUTCOME
        if not audit:
            outcome = _move_run(escalation, verdict, submitted.end_as or "failed")
            if escalation.run.actor == "external":
                # The caller's webhook hears of it once the verdict is committed.
                from runs.queue import verdict_webhook_after_commit

                verdict_webhook_after_commit(escalation.pk)
                # And a caller held by the wait server answers now (guardian_core/wakeups.py).
                escalation_settled_after_commit(escalation.pk)
        verdict.resulting_outcome = outcome
        verdict.save(update_fields=["resulting_outcome"])
        escalation.status = {
            VerdictDecision.APPROVE: EscalationStatus.APPROVED,
            VerdictDecision.REJECT: EscalationStatus.REJECTED,
            VerdictDecision.ANSWER: EscalationStatus.ANSWERED,
        }[decision]
        escalation.resolved_at = now
        # Decided: nobody holds it any more (the history keeps who did).
        escalation.claimed_by, escalation.claimed_at, escalation.claim_expires_at = None, None, None
        escalation.save(
            update_fields=[
                "status",
                "resolved_at",
                "claimed_by",
                "claimed_at",
                "claim_expires_at",
            ]
        )
        # The edits come before the reason: the note is capped, and what ran must show.
        note = verdict.decision
        if verdict.answer:
            # What was answered, as the log says it: the history shows it, not just "answer".
            note += " (" + "; ".join(verdict_answer_words(verdict.answer, None)) + ")"
        note += "".join(f"; {words}" for words in _edit_words(plan))
        note += f": {verdict.reason}" if verdict.reason else ""
        EscalationEvent.objects.create(
            escalation=escalation,
            kind=EscalationEventKind.DECIDED,
            actor=reviewer,
            note=note[:2000],
        )
        # The verdict, its approvals and examples and the run's new status, sealed under the
        # log's key with the run (runs/chain.py); the next decision seals them again. An audit
        # sample is no part of the run's story (runs/sealing.stories): nothing to seal.
        if not audit:
            sealing.run_reseal(run_id)
    return verdict


def _end_as_problems(escalation: Escalation, decision: str, end_as: str) -> list[str]:
    if not end_as:
        return []
    if end_as not in END_AS:
        return [("end_as: " + _("failed or cancelled, not %(given)r") % {"given": end_as})[:200]]
    if decision != VerdictDecision.REJECT or escalation.kind not in ENDED_BY_REJECTION:
        return ["end_as: " + _("only a rejection that ends the run says how it ends")]
    return []


def _when(moment: datetime) -> str:
    return timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S %Z")


def _closed(escalation: Escalation) -> str:
    """Why no verdict can be given any more ("" while the escalation is open)."""
    if escalation.status == EscalationStatus.OPEN:
        return ""
    verdict = Verdict.objects.filter(escalation=escalation).select_related("reviewer").first()
    if verdict is not None:
        return _(
            "escalation %(id)s was already decided by %(reviewer)s at %(at)s (%(decision)s)"
        ) % {
            "id": escalation.pk,
            "reviewer": verdict.reviewer,
            "at": _when(verdict.created_at),
            "decision": verdict.decision,
        }
    if escalation.status == EscalationStatus.EXPIRED:
        return _("escalation %(id)s expired unanswered at %(at)s; nothing ran") % {
            "id": escalation.pk,
            "at": _when(escalation.resolved_at),
        }
    return _("escalation %(id)s is already %(status)s (at %(at)s)") % {
        "id": escalation.pk,
        "status": escalation.status,
        "at": _when(escalation.resolved_at),
    }


def _holder_problems(escalation: Escalation, reviewer: AbstractBaseUser, now) -> list[str]:
    holder = escalation_claim_holder(escalation, now=now)
    if holder is None or holder.pk == reviewer.pk:
        return []
    return [
        "claim: "
        + _("%(holder)s holds this escalation since %(since)s; only they may decide it")
        % {"holder": holder, "since": _when(escalation.claimed_at)}
    ]


def _seconds_to_decide(escalation: Escalation, reviewer: AbstractBaseUser, now) -> float:
    """From the reviewer's claim when they hold it, else from the item's arrival."""
    holder = escalation_claim_holder(escalation, now=now)
    mine = holder is not None and holder.pk == reviewer.pk and escalation.claimed_at is not None
    since = escalation.claimed_at if mine else escalation.created_at
    return max(0.0, (now - since).total_seconds())


@dataclass(frozen=True)
class _Approve:
    """One held call as this reviewer approves it: the exact action, and whether the approvals
    it has with this one are enough (a quorum call needs two distinct approvers)."""

    call: HeldCall
    arguments: dict
    original_arguments: dict | None  # the proposed ones, when the reviewer edited them
    idempotency_key: str
    action_hash: str
    lapsed: Approval | None  # this reviewer's own earlier approval that expired: replaced
    complete: bool


def _held_step_plan(
    escalation: Escalation, reviewer: AbstractBaseUser, submitted: _Submitted, now
) -> tuple[list[_Approve] | None, dict[int, str], list[str]]:
    """For a held step: the approvals to record on approve (None otherwise), the reviewer's
    own risk class per call, and every problem with the edited arguments, the risk classes,
    the hashes the reviewer saw and the quorum."""
    edited, problems = _by_position(submitted.edited_arguments, "edited_arguments")
    labels, more = _by_position(submitted.risk_labels, "risk_labels")
    seen, even_more = _by_position(submitted.seen_hashes, "seen_hashes")
    problems += more + even_more
    given = {"edited_arguments": edited, "risk_labels": labels, "seen_hashes": seen}
    if escalation.kind != EscalationKind.GATED_STEP:
        problems += [
            f"{field}: " + _("only a held step's calls take them")
            for field, v in given.items()
            if v
        ]
        return None, {}, problems
    calls = {call.position: call for call in escalation_held_calls(escalation)}
    for field, values in given.items():
        unknown = sorted(set(values) - set(calls))
        if unknown:
            problems.append(
                f"{field}: " + _("%(calls)s are not held calls of this step") % {"calls": unknown}
            )
    for position, seen_hash in sorted(seen.items()):
        if position in calls and not (isinstance(seen_hash, str) and seen_hash):
            problems.append(
                f"seen_hashes: call {position} " + _("came with no hash; open it again")
            )
        elif position in calls and seen_hash != calls[position].action_hash:
            problems.append(
                f"call {position} ({calls[position].tool}) "
                + _("changed since you opened it; look at it again")
            )
    for position, label in sorted(labels.items()):
        if position in calls and label not in RISK_CLASSES:
            problems.append(
                (
                    f"risk_labels: call {position} ({calls[position].tool}): "
                    + _("one of %(classes)s, got %(given)r")
                    % {"classes": ", ".join(RISK_CLASSES), "given": label}
                )[:300]
            )
    labels = {p: label for p, label in labels.items() if p in calls}
    if submitted.decision != VerdictDecision.APPROVE:
        if edited:
            problems.append(
                "edited_arguments: " + _("arguments are edited only to approve the call")
            )
        return None, labels, problems
    approved = submitted.approved_calls
    positions = sorted(set(calls) if approved is None else set(calls) & set(approved))
    unapproved = sorted(set(edited) & set(calls) - set(positions))
    if unapproved:
        problems.append(
            "edited_arguments: "
            + _("%(calls)s are edited but not approved") % {"calls": unapproved}
        )
    plan = []
    for position in positions:
        item, item_problems = _approve_call(escalation, calls[position], edited, reviewer, now)
        problems += item_problems
        if item is not None:
            plan.append(item)
    return plan, labels, problems


def _approve_call(
    escalation: Escalation,
    call: HeldCall,
    edited: dict[int, object],
    reviewer: AbstractBaseUser,
    now,
) -> tuple[_Approve | None, list[str]]:
    where = f"call {call.position} ({call.tool})"
    arguments, original, key, digest = call.arguments, None, call.idempotency_key, call.action_hash
    if call.position in edited:
        tool = run_tools(escalation.run).get(call.tool)
        if tool is None:
            return None, [f"arguments of {where}: " + _("the tool is no longer registered")]
        check = validate_call({call.tool: tool}, call.tool, edited[call.position])
        if not check.ok:
            return None, [
                f"arguments of {where}: " + (f"{p.path}: {p.message}" if p.path else p.message)
                for p in check.problems
            ]
        # Compared as canonical JSON: Python's == calls true and 1 the same argument.
        if canonical_json(check.arguments) != canonical_json(call.arguments):
            arguments, original = check.arguments, call.arguments
            # The key the worker derives from the edited call it runs.
            key = mapping.approval_key(
                run_id=escalation.run_id,
                held_turn_index=escalation.turn.index,
                position=call.position,
                tool=call.tool,
                arguments=arguments,
            )
            digest = action_hash(call.tool, arguments, key)
    lapsed = next((a for a in call.approvals if a.reviewer_id == reviewer.pk), None)
    if lapsed is not None and lapsed.used_at is None and lapsed.expires_at > now:
        return None, [
            f"{where}: "
            + _("you approved it at %(at)s already; it needs a second, different approver")
            % {"at": _when(lapsed.created_at)}
        ]
    others = [
        a
        for a in call.approvals
        if a.reviewer_id != reviewer.pk and a.used_at is None and a.expires_at > now
    ]
    problems = []
    if call.needs_quorum:
        problems = [
            f"{where}: "
            + _(
                "%(reviewer)s approved it with other arguments; approve the same action "
                "or reject it"
            )
            % {"reviewer": a.reviewer}
            for a in others
            if a.action_hash != digest
        ]
    complete = not call.needs_quorum or any(a.action_hash == digest for a in others)
    item = _Approve(call, arguments, original, key, digest, lapsed, complete)
    return (None if problems else item), problems


def _approvals_write(
    escalation: Escalation, reviewer: AbstractBaseUser, plan: list[_Approve], now
) -> None:
    expires_at = now + timedelta(minutes=settings.GUARDIAN_APPROVAL_MINUTES)
    for item in plan:
        fields = {
            "tool": item.call.tool,
            "arguments": item.arguments,
            "original_arguments": item.original_arguments,
            "idempotency_key": item.idempotency_key,
            "action_hash": item.action_hash,
            "expires_at": expires_at,
        }
        if item.lapsed is not None:
            # One approval per reviewer and call: a lapsed one of theirs is given anew.
            Approval.objects.filter(pk=item.lapsed.pk).update(**fields, created_at=now)
        else:
            Approval.objects.create(
                escalation=escalation, reviewer=reviewer, position=item.call.position, **fields
            )


def _await_second_approver(
    escalation: Escalation, reviewer: AbstractBaseUser, plan: list[_Approve], labels: dict
) -> None:
    """A first approval under a quorum: recorded, and the item goes back to the queue, open,
    for a second and different reviewer."""
    waiting = ", ".join(f"call {i.call.position} ({i.call.tool})" for i in plan if not i.complete)
    note = f"approved; {waiting} needs a second, different approver"
    note += "".join(f"; {words}" for words in _edit_words(plan))
    if labels:
        note += "; risk classes given: " + ", ".join(f"call {p}: {c}" for p, c in labels.items())
    Escalation.objects.filter(pk=escalation.pk).update(
        claimed_by=None, claimed_at=None, claim_expires_at=None
    )
    EscalationEvent.objects.create(
        escalation=escalation,
        kind=EscalationEventKind.APPROVED_ONE,
        actor=reviewer,
        note=note[:2000],
    )


def _edit_words(plan: list[_Approve] | None) -> list[str]:
    """ "call 0 (issue_refund) approved with edited arguments: amount 49.9 → 39.9" for each
    approved call whose arguments the reviewer edited."""
    return [
        edited_arguments_words(
            item.original_arguments,
            item.arguments,
            tool=item.call.tool,
            position=item.call.position,
        )
        for item in plan or []
        if item.original_arguments is not None
    ]


def _by_position(values: object, field: str) -> tuple[dict[int, object], list[str]]:
    """{position: value} from a mapping keyed by call positions (ints, or digit strings as
    forms and JSON send them), with a problem for each key that is no position."""
    if values is None:
        return {}, []
    if not isinstance(values, Mapping):
        return {}, [f"{field}: " + _("must map call positions to values")]
    found: dict[int, object] = {}
    problems = []
    for key, value in values.items():
        if isinstance(key, int) and not isinstance(key, bool) and key >= 0:
            found[key] = value
        elif isinstance(key, str) and key.isascii() and key.isdigit():
            found[int(key)] = value
        else:
            problems.append(
                (f"{field}: " + _("%(key)r is not a call position") % {"key": key})[:300]
            )
    return found, problems


def verdict_reason_problem(reason: str) -> str:
    """The problem with a verdict's reason that is too long ("" when it is not): refused,
    naming the field, never cut (the form and the API say it the same way)."""
    length = len(reason.strip())
    if length <= VERDICT_REASON_MAX_CHARS:
        return ""
    return "reason: " + _("at most %(max)s characters, got %(length)s; shorten it") % {
        "max": f"{VERDICT_REASON_MAX_CHARS:,}",
        "length": f"{length:,}",
    }


def _problems(escalation, reviewer, decision, reason, answer, approved_calls) -> list[str]:
    problems = []
    if not reviewer.has_perm("escalations.review_escalation"):
        problems.append(
            "reviewer: " + _("%(reviewer)s may not review escalations") % {"reviewer": reviewer}
        )
    if decision not in VerdictDecision.values:
        return [
            *problems,
            "decision: "
            + _("must be one of %(values)s") % {"values": ", ".join(VerdictDecision.values)},
        ]
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
                "decision: "
                + _("only a held step, an ambiguous call or a coder/reviewer loop can be approved")
            )
        if kind == EscalationKind.REVIEW_LOOP and not escalation.reason.get("last_code"):
            problems.append("decision: " + _("the coder produced no code to approve"))
        unknown = sorted(set(approved_calls or []) - held)
        if unknown:
            problems.append(
                "approved_calls: "
                + _("%(calls)s are not held calls of this step") % {"calls": unknown}
            )
    if kind == EscalationKind.AUDIT_SAMPLE and decision != VerdictDecision.ANSWER:
        problems.append(
            "decision: "
            + _(
                "an audit sample is answered (give the true answer); it holds nothing "
                "to approve or reject"
            )
        )
    if decision == VerdictDecision.REJECT and not reason.strip():
        problems.append("reason: " + _("a rejection needs a reason the actor can act on"))
    if too_long := verdict_reason_problem(reason):
        problems.append(too_long)
    if decision == VerdictDecision.ANSWER:
        allowed = set(uncertain_conditions(escalation))
        if not allowed:
            problems.append(
                "answer: " + _("this escalation asks no question; approve or reject it")
            )
        elif not isinstance(answer, dict) or not answer:
            problems.append(
                "answer: "
                + _("give a label for %(conditions)s") % {"conditions": ", ".join(sorted(allowed))}
            )
        else:
            for condition, label in answer.items():
                if condition not in allowed:
                    problems.append(
                        f"answer.{condition}: "
                        + _("not asked here (%(allowed)s)") % {"allowed": sorted(allowed)}
                    )
                elif _label_problem(condition, label):
                    problems.append(f"answer.{condition}: {_label_problem(condition, label)}")
            missing = sorted(allowed - set(answer))
            if missing:
                problems.append(
                    "answer: "
                    + _("no label for %(conditions)s") % {"conditions": ", ".join(missing)}
                )
    return problems


def _label_problem(condition: str, label: object) -> str | None:
    if condition == Condition.RISK:
        if label in RISK_CLASSES:
            return None
        return _("one of %(classes)s") % {"classes": ", ".join(RISK_CLASSES)}
    if condition == Condition.DRIFT:
        ok = isinstance(label, int) and not isinstance(label, bool) and label in DRIFT_SCORES
        return None if ok else _("a drift score from 0 to 4")
    return None if isinstance(label, bool) else _("true or false")


def _as_probability(condition: str, label: object) -> object:
    """A person's label as a certain answer: p = 1 or 0, or a one-hot distribution."""
    if condition == Condition.RISK:
        return {value: 1.0 if value == label else 0.0 for value in RISK_CLASSES}
    if condition == Condition.DRIFT:
        return {str(score): 1.0 if score == label else 0.0 for score in DRIFT_SCORES}
    return 1.0 if label else 0.0


def _move_run(escalation: Escalation, verdict: Verdict, end_as: str = "failed") -> str:
    """Set the run's status after the verdict; returns the outcome it leads to. Raises
    EscalationError when the answers would end the run succeeded with no answer."""

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
        return _stop(run, *END_AS[end_as])
    outcome = _decide_with_human_answers(escalation, verdict.answer or {})
    if outcome == Outcome.STOP_SUCCESS and kind == EscalationKind.GUARDIAN_FAILURE:
        # The guardian accepted no answer on this turn: the person's answers teach it, and
        # the run goes on, so it is asked again before anything ends succeeded.
        outcome = Outcome.CONTINUE
    if outcome in (Outcome.CONTINUE, Outcome.REPLAN):
        return _continue(run, enqueue_after_commit, outcome)
    if outcome == Outcome.STOP_SUCCESS:
        message = mapping.proposal_from_json(escalation.turn.proposal).message
        if not (message or "").strip():
            raise EscalationError(
                [
                    "answer: "
                    + _(
                        "the actor gave no answer on this turn, so the run cannot end "
                        "succeeded here; answer that the goal is not reached (the run goes on), "
                        "or reject to end it"
                    )
                ]
            )
        run.final_answer = message
        return _stop(run, RunStatus.SUCCEEDED, "goal_reached")
    if outcome == Outcome.STOP_FAILURE:
        return _stop(run, RunStatus.FAILED, "stopped_after_review")
    # Still unsure about something a person was not asked: the run stays with a person.
    return _stop(run, RunStatus.FAILED, "unresolved_after_review")


def _decide_with_human_answers(escalation: Escalation, answer: dict) -> Outcome:
    turn = escalation.turn
    decision = turn.decision
    # What the second-tier judge settled on this turn stays settled (runs/judging.py).
    answers, judged = judging.answers_split(decision.answers)
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
    result = decide_judged(
        answers,
        judged,
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
    if run.actor != "external":  # an external run's caller proposes its next step
        enqueue_after_commit(run.pk)
    return outcome.value


def _stop(run, status: str, reason: str) -> str:
    run.status = status
    run.stop_reason = reason
    run.finished_at = timezone.now()
    run.save(update_fields=["status", "stop_reason", "final_answer", "finished_at", "updated_at"])
    if status == RunStatus.CANCELLED:
        return "stop_cancelled"
    return Outcome.STOP_SUCCESS.value if status == RunStatus.SUCCEEDED else "stop_failure"
