"""The guarded agent loop's turn, persisted: rebuild the state from the last decided turn and
any verdict on it, record the proposal before anything runs, run the engine's turn against
recording tools, and write its outcome in one short transaction.

No lock or transaction is held while the actor, the guardian or a tool works; the unique
(run, index) and one-decision-per-turn constraints refuse a turn recorded twice.
"""

import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from escalations.models import Escalation, EscalationKind, VerdictDecision
from guardian_core.engine.loop import Feedback, Proposal, TurnRecord, proposal_as_text, run_turn
from guardian_core.engine.policy import Outcome, Usage
from guardian_core.engine.state import HistoryItem, project, state_next
from guardian_core.engine.tools import idempotency_key, validate_call
from runs import mapping
from runs.models import Decision, Run, RunStatus, ToolCall, ToolCallStatus, Turn
from runs.ports import build_actor, build_guardian, recording_tools
from runs.queue import enqueue_after_commit
from runs.tools import tools_for_run


class SystemClock:
    """The engine's clock port, from Django's timezone-aware now."""

    def now(self):
        return timezone.now()

    def monotonic(self) -> float:
        return time.monotonic()


@dataclass(frozen=True)
class _Resume:
    """How the next turn starts, derived from the last decided turn and any verdict on it."""

    proposal: Proposal | None
    approved: frozenset[int] | None
    feedback: tuple[Feedback, ...]
    # The verdict, written into the state's history before the next turn: the actor and the
    # guardian judge the run from what happened, and a rejected call never happened.
    history: tuple[HistoryItem, ...] = ()
    # Outputs a person cleared of injected instructions, released to the actor again.
    released: tuple[str, ...] | None = None
    # Calls a person said did not go through and asked to run again, under their first key.
    rerun_keys: dict[int, str] | None = None


def agent_turn_advance(run: Run, token: str) -> str:
    """Advance a claimed agent-loop run (the worker holds its lease `token`) by one turn.
    Returns "continued", "waiting" or "finished"; raises on an error (the caller records it).
    """
    turns = list(run.turns.select_related("decision").order_by("index"))
    decided = [turn for turn in turns if _has_decision(turn)]
    unfinished = next((turn for turn in turns if not _has_decision(turn)), None)
    last = decided[-1] if decided else None
    index = len(decided)

    state = mapping.state_from_json(last.state) if last else mapping.initial_state(run)
    usage = mapping.usage_from_json(last.usage) if last else Usage(turns=0)
    history = [mapping.past_turn(turn) for turn in decided]
    resume = _resume(last)
    if resume.history or resume.released is not None:
        state = state_next(state, add_history=resume.history, last_results=resume.released)

    policy = mapping.policy_from_version(run.policy_version, budgets=run.budgets)
    tools = tools_for_run(run.tools)
    guardian = build_guardian(run)

    proposal = resume.proposal
    if unfinished is not None and unfinished.proposal:
        proposal = mapping.proposal_from_json(unfinished.proposal)  # a retried turn
    if proposal is None:
        proposal = build_actor(run, tools).propose(project(state).data, resume.feedback)
        # Whatever a model sent must be storable before anything runs; text that is not
        # text makes its call invalid (fed back like any other problem), never a crash.
        proposal = proposal_as_text(proposal)
    turn = unfinished or _turn_begin(run, index, proposal)
    if turn is None:
        return "skipped"  # another worker recorded this turn first

    calls_by_key = _calls_by_key(run, index, proposal, tools, resume.rerun_keys or {})
    record = run_turn(
        state,
        run_id=str(run.pk),
        index=index,
        actor=_NoActor(),
        guardian=guardian,
        tools=recording_tools(
            tools,
            turn=turn,
            calls_by_key=calls_by_key,
            rerun_keys=frozenset((resume.rerun_keys or {}).values()),
        ),
        clock=SystemClock(),
        policy=policy,
        history=history,
        usage=usage,
        feedback=resume.feedback,
        proposal=proposal,
        approved=resume.approved,
        idempotency_keys=resume.rerun_keys,
        run_started_at=run.created_at,
    )
    return _turn_finish(run.pk, token, turn, record)


class _NoActor:
    """The actor was asked before the turn began (its proposal is recorded first)."""

    def propose(self, projection, feedback):
        raise AssertionError("the proposal is recorded before the turn runs")


def _has_decision(turn: Turn) -> bool:
    try:
        turn.decision  # noqa: B018 - the reverse one-to-one raises when there is none
    except Decision.DoesNotExist:
        return False
    return True


def _resume(last: Turn | None) -> _Resume:
    if last is None:
        return _Resume(None, None, ())
    feedback = mapping.feedback_from_json(last.feedback)
    if last.decision.outcome != Outcome.ESCALATE:
        return _Resume(None, None, feedback)
    escalation = last.escalations.select_related("verdict").order_by("-id").first()
    verdict = getattr(escalation, "verdict", None) if escalation else None
    if verdict is None:
        return _Resume(None, None, feedback)
    proposal = mapping.proposal_from_json(last.proposal)
    history = mapping.verdict_history(escalation, verdict, proposal)
    if escalation.kind == EscalationKind.AMBIGUOUS_CALL and verdict.rerun:
        keys = dict(
            last.tool_calls.filter(status=ToolCallStatus.FAILED, idempotency_key__isnull=False)
            .filter(position__in=escalation.reason.get("ambiguous_calls", []))
            .values_list("position", "idempotency_key")
        )
        return _Resume(proposal, frozenset(keys), (), history, rerun_keys=keys)
    if escalation.kind != EscalationKind.GATED_STEP:
        return _Resume(None, None, feedback, history, _released_results(last, verdict))
    if verdict.decision == VerdictDecision.APPROVE:
        return _Resume(proposal, frozenset(verdict.approved_calls), (), history)
    held = list(
        last.tool_calls.filter(status=ToolCallStatus.HELD).values_list("position", flat=True)
    )
    return _Resume(None, None, mapping.human_feedback(verdict, proposal, held), history)


def _released_results(last: Turn, verdict) -> tuple[str, ...] | None:
    """The verbatim outputs of a turn that were withheld (an injection suspected, or a
    guardian that failed to answer) once a person has said they hold no injected
    instructions."""
    if (verdict.answer or {}).get("integrity") is not False:
        return None
    calls = last.tool_calls.filter(status=ToolCallStatus.DONE).order_by("position")
    return tuple(call.result or "" for call in calls)


def _turn_begin(run: Run, index: int, proposal: Proposal) -> Turn | None:
    """Record the turn and its proposal before anything runs; None if it exists already."""
    try:
        with transaction.atomic():
            return Turn.objects.create(
                run=run,
                index=index,
                state_hash="",
                proposal=mapping.proposal_to_json(proposal),
                started_at=timezone.now(),
            )
    except IntegrityError:
        return None


def _calls_by_key(
    run: Run, index: int, proposal: Proposal, tools, rerun_keys: dict[int, str]
) -> dict[str, tuple[int, str]]:
    keys = {}
    for position, call in enumerate(proposal.calls):
        check = validate_call(tools, call.tool, call.arguments)
        if check.ok:
            key = rerun_keys.get(position) or idempotency_key(
                run_id=str(run.pk),
                turn_index=index,
                position=position,
                tool=call.tool,
                arguments=check.arguments,
            )
            keys[key] = (position, call.intent)
    return keys


def _turn_finish(run_id: int, token: str, turn: Turn, record: TurnRecord) -> str:
    """Write the turn's outcome in one transaction and move the run on."""
    now = timezone.now()
    decision = record.decision
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run_id)
        if run.lease_token != token:
            # The lease expired and another worker took the run over: its turn counts.
            raise RuntimeError(f"run {run_id}: lease lost before the turn was recorded")
        Turn.objects.filter(pk=turn.pk).update(
            state_hash=record.state_hash_after,
            projection=record.guardian_projection or {},
            risk_projections=list(record.risk_projections),
            state=mapping.state_to_json(record.state_after),
            usage=mapping.usage_to_json(record.usage),
            feedback=mapping.feedback_to_json(record.feedback),
            timings=dict(record.timings),
            finished_at=now,
        )
        _tool_calls_record(turn, record)
        Decision.objects.create(
            turn=turn,
            outcome=decision.outcome.value,
            answers=mapping.answers_to_json(record.answers),
            risk_answers=[mapping.answer_to_json(a) for a in record.risk_answers],
            thresholds=dict(record.thresholds),
            reasons=[reason.as_dict() for reason in decision.reasons],
            fired=sorted(condition.value for condition in decision.fired),
            call_signatures=list(record.past_turn.calls),
            stop_reason=decision.stop_reason or "",
            policy_version=run.policy_version,
            question_set_version=record.question_set_version,
            guardian_model_version=record.guardian_model_version,
            state_hash=record.state_hash_after,
        )
        result = _apply_outcome(run, turn, record, now)
        run.lease_token = ""
        run.lease_expires_at = None
        run.failures = 0
        run.last_error = ""
        run.save()
    return result


def _tool_calls_record(turn: Turn, record: TurnRecord) -> None:
    """Bring every call of the step into the log, including those that never ran.

    A call marked ambiguous (started before a crash, never finished) keeps that status: it
    is what the reviewer is asked about. A call re-run under the key of an earlier turn's
    call is recorded on that earlier row (it is the same call); this turn's row points to it.
    """
    gated = {call.position: call for call in (record.gate.calls if record.gate else ())}
    keys = [call.idempotency_key for call in record.calls if call.idempotency_key]
    existing = {
        row.idempotency_key: row
        for row in ToolCall.objects.filter(idempotency_key__in=keys)
        .select_related("turn")
        .only("id", "turn__index", "position", "status", "idempotency_key")
    }
    for call in record.calls:
        effective = gated[call.position].effective.value if call.position in gated else None
        row = existing.get(call.idempotency_key)
        status = _stored_status(call.status)
        if row is not None and row.status == ToolCallStatus.AMBIGUOUS and status == "failed":
            status = ToolCallStatus.AMBIGUOUS
        fields = {
            "tool": call.tool,
            "arguments": call.arguments,
            "intent": call.intent,
            "risk_class": effective or (call.declared_risk or "read_only"),
            "status": status,
            "idempotency_key": call.idempotency_key,
            "error": call.error or "\n".join(call.problems),
        }
        if call.result is not None:
            fields["result"] = call.result
        if row is not None and row.turn_id != turn.pk:
            fields["idempotency_key"] = None
            fields["error"] = (
                f"re-run of call {row.position} of turn {row.turn.index} with its idempotency key; "
                + fields["error"]
            ).strip("; ")
        ToolCall.objects.update_or_create(turn=turn, position=call.position, defaults=fields)


def _stored_status(status: str) -> str:
    return {
        "invalid": ToolCallStatus.INVALID,
        "held": ToolCallStatus.HELD,
        "not_approved": ToolCallStatus.REJECTED,
        "done": ToolCallStatus.DONE,
        "failed": ToolCallStatus.FAILED,
        "not_run": ToolCallStatus.PROPOSED,
    }[status]


def _apply_outcome(run: Run, turn: Turn, record: TurnRecord, now) -> str:
    outcome = record.decision.outcome
    if run.status != RunStatus.RUNNING:
        return "finished"  # cancelled while the turn ran: it is recorded, nothing follows
    if outcome in (Outcome.CONTINUE, Outcome.REPLAN):
        enqueue_after_commit(run.pk)
        return "continued"
    if outcome == Outcome.ESCALATE:
        run.status = RunStatus.WAITING
        _escalation_open(run, turn, record, now)
        return "waiting"
    run.status = RunStatus.SUCCEEDED if outcome == Outcome.STOP_SUCCESS else RunStatus.FAILED
    run.stop_reason = record.decision.stop_reason or ""
    run.final_answer = record.final_answer
    run.finished_at = now
    return "finished"


def _escalation_open(run: Run, turn: Turn, record: TurnRecord, now) -> Escalation:
    triggered = record.decision.triggered
    sources = {reason.source for reason in triggered}
    bands = {reason.band for reason in triggered}
    errors = " ".join(call.error or "" for call in record.calls)
    if "gate" in sources:
        kind = EscalationKind.GATED_STEP
    elif "tool_error" in sources and "AmbiguousCall" in errors:
        kind = EscalationKind.AMBIGUOUS_CALL
    elif "integrity" in sources and "fired" in bands:
        kind = EscalationKind.INTEGRITY
    elif "malformed" in bands:
        kind = EscalationKind.GUARDIAN_FAILURE
    else:
        kind = EscalationKind.UNCERTAIN
    first = triggered[0]
    return Escalation.objects.create(
        run=run,
        turn=turn,
        kind=kind,
        summary=f"{first.source}: {first.detail}"[:300],
        reason={
            "triggered": [reason.as_dict() for reason in triggered],
            "held_calls": [c.position for c in record.calls if c.status == "held"],
            "ambiguous_calls": [
                c.position for c in record.calls if "AmbiguousCall" in (c.error or "")
            ],
        },
        deadline=now + timedelta(hours=settings.GUARDIAN_ESCALATION_HOURS),
    )
