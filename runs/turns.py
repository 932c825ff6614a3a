"""The guarded agent loop's turn, persisted: rebuild the state from the last decided turn and
any verdict on it, record the proposal before anything runs, run the engine's turn against
recording tools, and write its outcome in one short transaction.

No lock or transaction is held while the actor, the guardian or a tool works; the unique
(run, index) and one-decision-per-turn constraints refuse a turn recorded twice.
"""

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import timedelta

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from escalations.models import Approval, Escalation, EscalationKind, VerdictDecision, queue_fields
from escalations.notifications import escalation_notify_after_commit
from guardian_core.engine.loop import Feedback, Proposal, TurnRecord, proposal_as_text, run_turn
from guardian_core.engine.policy import Outcome, Usage, history_needed
from guardian_core.engine.state import HistoryItem, project, state_apply, state_step
from guardian_core.engine.tools import (
    StepStopped,
    Tool,
    action_hash,
    idempotency_key,
    validate_call,
)
from guardian_core.policy_validation import escalation_hours
from runs import chain, judging, mapping, sealing
from runs.models import Decision, Run, RunStatus, ToolCall, ToolCallStatus, Turn
from runs.ports import CallRecorder, build_actor, build_guardian, build_judge, recording_tools
from runs.queue import enqueue_after_commit
from runs.tools import tools_for_run
from runs.vocabulary import reason_summary


class SystemClock:
    """The engine's clock port, from Django's timezone-aware now."""

    def now(self):
        return timezone.now()

    def monotonic(self) -> float:
        return time.monotonic()


@dataclass(frozen=True)
class CallResult:
    """The outcome of a call another loop ran (an external run's), written with the decision."""

    id: int
    status: str
    result: str | None
    error: str


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
    # A person's answer made the policy replan: counted like any replan.
    replanned: bool = False
    # An approved held step: every approval of the escalation, and whose verdict it was (their
    # approval's arguments are the ones that run when they edited them). None otherwise.
    approvals: tuple[Approval, ...] | None = None
    approver_id: int | None = None


def agent_turn_advance(run: Run, token: str, *, enqueue_next: bool = True) -> str:
    """Advance a claimed agent-loop run (the worker holds its lease `token`) by one turn.
    Returns "continued", "waiting" or "finished"; raises on an error (the caller records it).

    Reads what the next turn needs and nothing that grows with the run: the run row with its
    compact state, and the last few turns (the policy's windows, the last turn's usage,
    feedback and verdict, a retried turn's recorded proposal).
    """
    policy = mapping.policy_for_run(run)
    recent = _recent_turns(run, policy)
    decided = [turn for turn in recent if _has_decision(turn)]
    unfinished = next((turn for turn in recent if not _has_decision(turn)), None)
    last = decided[-1] if decided else None
    index = last.index + 1 if last else 0

    state = mapping.run_state(run)
    usage = mapping.usage_from_json(last.usage) if last else Usage(turns=0)
    usage = _with_unbilled(usage, run)
    history = [mapping.past_turn(turn) for turn in decided]
    resume = _resume(last)
    verdict_steps: tuple[dict, ...] = ()
    if resume.history or resume.released is not None or resume.replanned:
        step = state_step(
            add_history=resume.history, last_results=resume.released, replanned=resume.replanned
        )
        verdict_steps = (step,)
        state = state_apply(state, step)

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
    if resume.approvals is not None:
        proposal = _with_edited_arguments(proposal, resume)
    # Durability: the proposal is committed before anything runs, so a retry replays it.
    turn = unfinished or _turn_begin(run, index, proposal)
    if turn is None:
        return "skipped"  # another worker recorded this turn first

    approved, keys, refusals = resume.approved, dict(resume.rerun_keys or {}), {}
    if resume.approvals is not None:
        approved, approved_keys, refusals = _approvals_check(
            run, index, turn, proposal, tools, resume
        )
        keys.update(approved_keys)
    calls_by_key = _CallsByKey(run, index, proposal, keys)
    recorder = CallRecorder(
        turn=turn,
        calls_by_key=calls_by_key,
        rerun_keys=frozenset((resume.rerun_keys or {}).values()),
        fresh=unfinished is None,
        token=token,
    )
    judging_setup = build_judge(run)
    try:
        record = run_turn(
            state,
            run_id=str(run.pk),
            index=index,
            actor=_NoActor(),
            guardian=guardian,
            tools=recording_tools(tools, recorder),
            clock=SystemClock(),
            policy=policy,
            history=history,
            usage=usage,
            feedback=resume.feedback,
            proposal=proposal,
            approved=approved,
            idempotency_keys=keys or None,
            run_started_at=run.created_at,
            refusals=refusals,
            judge=judging_setup.judge if judging_setup else None,
            judge_conditions=judging_setup.conditions if judging_setup else (),
            judge_deadline_seconds=judging_setup.deadline_seconds if judging_setup else None,
        )
    except StepStopped:
        return _turn_stopped(run, token, turn, proposal, tools, recorder)
    finally:
        if judging_setup is not None:
            judging_setup.judge.close()
    return _turn_finish(run, token, turn, record, verdict_steps, recorder, enqueue_next, last=last)


def _with_unbilled(usage: Usage, run: Run) -> Usage:
    """`usage` with what failed model calls of the run were billed since its last turn: this
    turn's record counts it (and its write clears it on the run)."""
    unbilled = _json(getattr(run, "unbilled", None)) or {}
    tokens, cost = int(unbilled.get("tokens", 0) or 0), float(unbilled.get("cost", 0.0) or 0.0)
    if not tokens and not cost:
        return usage
    return replace(usage, tokens=usage.tokens + tokens, cost=usage.cost + cost)


def _turn_stopped(
    run: Run,
    token: str,
    turn: Turn,
    proposal: Proposal,
    tools: dict[str, Tool],
    recorder: CallRecorder,
) -> str:
    """A call of the turn found the run no longer running under this lease, and did not start.
    Cancelled: the turn ends here, undecided (nothing follows a cancel; the guardian is not
    asked about a step cut short), every call that never started gets its row saying why, and
    the lease is given back. Returns "finished". A lost lease raises: the worker that took the
    run over retries the turn, and its record counts."""
    now = timezone.now()
    with transaction.atomic():
        status = (
            Run.objects.select_for_update()
            .filter(pk=run.pk, lease_token=token)
            .values_list("status", flat=True)
            .first()
        )
        if status is None or status == RunStatus.RUNNING:
            raise RuntimeError(f"run {run.pk}: lease lost while the turn ran")
        why = f"not started: the run was {status} before this call could start"
        recorded = set(ToolCall.objects.filter(turn=turn).values_list("position", flat=True))
        ToolCall.objects.bulk_create(
            ToolCall(
                turn=turn,
                position=position,
                tool=call.tool,
                arguments=call.arguments,
                intent=call.intent,
                risk_class=tools[call.tool].risk_class.value if call.tool in tools else "read_only",
                status=ToolCallStatus.PROPOSED,
                error=why,
            )
            for position, call in enumerate(proposal.calls)
            if position not in recorded and position not in recorder.rows
        )
        Turn.objects.filter(pk=turn.pk, finished_at__isnull=True).update(finished_at=now)
        Run.objects.filter(pk=run.pk, lease_token=token).update(
            lease_token="", lease_expires_at=None, updated_at=now
        )
    return "finished"


def _recent_turns(run: Run, policy) -> list[Turn]:
    """The last turns the policy's windows read, the last decided one and any unfinished
    one after it: one query, of a bounded number of small rows."""
    wanted = history_needed(policy) + 1  # and one unfinished turn at most
    claimed = getattr(run, "recent_turns", None)  # read with the claim (runs.services._claim)
    if claimed is not None and wanted + 1 <= RECENT_TURNS_READ:
        # Only the rows the policy reads become Turns: a model instance costs more than its row.
        return [_turn_from_claim(run, row) for row in _json(claimed)[-(wanted + 1) :]]
    rows = list(
        Turn.objects.filter(run_id=run.pk)
        .select_related("decision")
        .only(
            "id",
            "run_id",
            "index",
            "proposal",
            "usage",
            "feedback",
            "gate",
            "decision__id",
            "decision__outcome",
            "decision__fired",
            "decision__call_signatures",
            "decision__content_hash",
        )
        .order_by("-index")[: wanted + 1]
    )
    return rows[::-1]


# How many of the latest turns the claim reads along with the run: more than any window the
# policy reads (hysteresis and exact repeat), plus an unfinished turn.
RECENT_TURNS_READ = 8


def _json(value):
    return json.loads(value) if isinstance(value, str | bytes) else value


def _turn_from_claim(run: Run, row: dict) -> Turn:
    """A Turn (and its decision's policy fields) from the claim's JSON, as the ORM query
    above would have loaded it."""
    turn = Turn(
        id=row["id"],
        run_id=run.pk,
        index=row["index"],
        proposal=_json(row["proposal"]),
        usage=_json(row["usage"]),
        feedback=_json(row["feedback"]),
        gate=_json(row.get("gate")) or {},
    )
    if row["decision_id"] is None:
        Turn.decision.related.set_cached_value(turn, None)
        # An unfinished turn's calls, as recorded (runs/external.py reads them).
        turn.claimed_calls = row.get("calls")
    else:
        turn.decision = Decision(
            id=row["decision_id"],
            outcome=row["outcome"],
            fired=_json(row["fired"]),
            call_signatures=_json(row["call_signatures"]),
            content_hash=row.get("content_hash") or "",
        )
    return turn


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
    escalation.turn = last  # already loaded
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
        released = _released_results(last, verdict)
        replanned = verdict.resulting_outcome == Outcome.REPLAN
        return _Resume(None, None, feedback, history, released, replanned=replanned)
    if verdict.decision == VerdictDecision.APPROVE:
        approvals = tuple(escalation.approvals.all())
        approved = frozenset(verdict.approved_calls)
        return _Resume(
            proposal, approved, (), history, approvals=approvals, approver_id=verdict.reviewer_id
        )
    held = list(
        last.tool_calls.filter(status=ToolCallStatus.HELD).values_list("position", flat=True)
    )
    return _Resume(None, None, mapping.human_feedback(verdict, proposal, held), history)


def _with_edited_arguments(proposal: Proposal, resume: _Resume) -> Proposal:
    """The held step with the arguments its approver edited in place of the proposed ones."""
    edited = {
        approval.position: approval.arguments
        for approval in resume.approvals or ()
        if approval.reviewer_id == resume.approver_id and approval.original_arguments is not None
    }
    if not edited:
        return proposal
    calls = tuple(
        replace(call, arguments=edited[position]) if position in edited else call
        for position, call in enumerate(proposal.calls)
    )
    return replace(proposal, calls=calls)


def _approvals_check(
    run: Run, index: int, turn: Turn, proposal: Proposal, tools: dict[str, Tool], resume: _Resume
) -> tuple[frozenset[int], dict[int, str], dict[int, str]]:
    """Which approved calls of a held step may run on this turn, which resumes it.

    A call runs only if the SHA-256 of exactly what is about to run (tool, arguments,
    idempotency key) matches its approver's approval, and that approval is unused (or used by
    this very turn, which a retry may reuse) and unexpired. It is marked used by this turn
    before any call runs, with a quorum partner's approval of the same action, so an approval
    runs one action once. Returns (the positions that run, their keys, {position: why not} for the
    others, which are then "not approved" and the actor is told why). Costs one validation per
    approved call and one update, on this turn only.
    """
    now = timezone.now()
    runnable: set[int] = set()
    keys: dict[int, str] = {}
    refusals: dict[int, str] = {}
    to_mark: list[int] = []
    for position in sorted(resume.approved or ()):
        approvals = [a for a in resume.approvals or () if a.position == position]
        key, matching, why = _approval_match(
            run, index, proposal, tools, position, approvals, resume
        )
        why = why or _approval_spent(matching[0], turn, now)
        if why:
            refusals[position] = why
            continue
        runnable.add(position)
        keys[position] = key
        # The approver's own approval, and a quorum partner's of the same action while it is
        # still good: all spent on this one run of the call.
        to_mark.extend(
            a.pk for a in matching if a.used_at is None and (a is matching[0] or a.expires_at > now)
        )
    if to_mark:
        marked = Approval.objects.filter(pk__in=to_mark, used_at__isnull=True).update(
            used_at=now, used_on_turn=turn
        )
        if marked != len(to_mark):
            # Another turn took one of them meanwhile (two workers never hold a run at once, so
            # this is a record changed under us): run nothing now; the retry sees who used what.
            raise RuntimeError(f"run {run.pk}: an approval was used by another turn meanwhile")
    return frozenset(runnable), keys, refusals


def _approval_match(
    run: Run,
    index: int,
    proposal: Proposal,
    tools: dict[str, Tool],
    position: int,
    approvals: list[Approval],
    resume: _Resume,
) -> tuple[str, list[Approval], str]:
    """The key the call runs under, the approvals of exactly that call (its approver's own
    first), and why it may not run ("" when it may)."""
    own = next((a for a in approvals if a.reviewer_id == resume.approver_id), None)
    if own is None:
        return "", [], "no approval of this call is on record"
    if position >= len(proposal.calls):
        return "", [], "the call changed after approval (it is no longer in the step)"
    call = proposal.calls[position]
    check = validate_call(tools, call.tool, call.arguments)
    if not check.ok:
        return "", [], "the call changed after approval (its arguments no longer fit)"
    # The engine's own key for this call on this turn (what it would derive unasked); it is
    # handed to the engine explicitly, so the key hashed is the key the tool gets.
    key = idempotency_key(
        run_id=str(run.pk),
        turn_index=index,
        position=position,
        tool=call.tool,
        arguments=check.arguments,
    )
    expected = action_hash(call.tool, check.arguments, key)
    # An approval row edited after the fact no longer hashes to what it stores: it counts
    # for nothing.
    matching = [
        a
        for a in approvals
        if a.action_hash == expected
        and action_hash(a.tool, a.arguments, a.idempotency_key) == a.action_hash
    ]
    if own not in matching:
        return key, [], "the call changed after approval"
    return key, [own, *(a for a in matching if a is not own)], ""


def _approval_spent(approval: Approval, turn: Turn, now) -> str:
    """Why the approval no longer allows the call ("" if it does): another turn used it, or it
    expired before this turn could use it. This very turn, retried, reuses its own."""
    if approval.used_on_turn_id == turn.pk:
        return ""
    if approval.used_at is not None:
        return f"its approval was already used (approval {approval.pk})"
    if approval.expires_at <= now:
        when = timezone.localtime(approval.expires_at).strftime("%Y-%m-%d %H:%M %Z")
        return f"its approval expired at {when}"
    return ""


def _released_results(last: Turn, verdict) -> tuple[str, ...] | None:
    """The verbatim outputs of a turn that were withheld (an injection suspected, or a
    guardian that failed to answer) once a person has said they hold no injected
    instructions."""
    if (verdict.answer or {}).get("integrity") is not False:
        return None
    calls = last.tool_calls.filter(status=ToolCallStatus.DONE).order_by("position")
    return tuple(call.result or "" for call in calls)


def _turn_begin(run: Run, index: int, proposal: Proposal) -> Turn | None:
    """Record the turn and its proposal before anything runs; None if it exists already.
    Durability: this insert commits on its own (autocommit), before any call runs; a worker
    is never inside a transaction here, and a caller that is gets a savepoint."""
    fields = {
        "run": run,
        "index": index,
        "state_hash": "",
        "proposal": mapping.proposal_to_json(proposal),
        "started_at": timezone.now(),
    }
    try:
        if connection.in_atomic_block:
            with transaction.atomic():
                return Turn.objects.create(**fields)
        return Turn.objects.create(**fields)
    except IntegrityError:
        return None


class _CallsByKey:
    """Which call of the proposal an idempotency key belongs to: (position, intent). Worked
    out when a call runs, from the arguments the engine validated (validating them again here
    would double the turn's validation work)."""

    def __init__(
        self, run: Run, index: int, proposal: Proposal, rerun_keys: dict[int, str]
    ) -> None:
        self.run_id, self.index, self.proposal, self.rerun_keys = (
            run.pk,
            index,
            proposal,
            rerun_keys,
        )
        self.found: dict[str, tuple[int, str]] = {}

    def lookup(self, key: str, tool: str, arguments: dict) -> tuple[int, str]:
        if key not in self.found:
            for position, call in enumerate(self.proposal.calls):
                if call.tool == tool and key in (
                    self.rerun_keys.get(position),
                    idempotency_key(
                        run_id=str(self.run_id),
                        turn_index=self.index,
                        position=position,
                        tool=tool,
                        arguments=arguments,
                    ),
                ):
                    self.found[key] = (position, call.intent)
                    break
            else:
                raise KeyError(f"no call of the proposal has the idempotency key {key}")
        return self.found[key]


def _turn_finish(
    run: Run,
    token: str,
    turn: Turn,
    record: TurnRecord,
    verdict_steps: tuple[dict, ...],
    recorder: CallRecorder,
    enqueue_next: bool = True,
    *,
    last: Turn | None = None,
    call_results: Sequence[CallResult] = (),
) -> str:
    """Write the turn's outcome in one transaction and move the run on: the run row (its
    compact state, status, lease released, seal), the turn (its steps, what the guardian
    saw), the calls that never ran, `call_results` (the outcomes of calls another loop ran,
    which land with the decision), the decision, sealed under the log's key (runs/chain.py),
    and any escalation. `last` is the last decided turn before this one: the chain's previous
    link, and what people decided on it, which this decision seals. Durability: this is the
    commit that makes the turn count; until it lands a retry replays the recorded proposal."""
    now = timezone.now()
    decision = record.decision
    prev_hash = last.decision.content_hash if last else ""
    # What people decided on the turn before (a verdict, approvals, examples) is read only
    # when there was something to decide: the common turn follows a turn that went on.
    before = chain.NO_STORY
    if last is not None and last.decision.outcome == Outcome.ESCALATE:
        before = sealing.turn_story(last.pk)
        if not sealing.run_seal_holds(run, head_turn=last.index, head=prev_hash, tail=before):
            # Changed since the verdict sealed it (an approval edited, an example removed):
            # sealed as such, so verify_log names this turn instead of blessing the change.
            before = f"altered:{before}"
    fields = _turn_fields(turn, record, verdict_steps)

    def sealed_with(calls: list[dict], opened=()) -> dict:
        return chain.seal_fields(
            _decision_fields(run, record),
            run=run,
            turn_index=turn.index,
            prev_hash=prev_hash,
            turn=fields,
            calls=chain.calls_content(calls, opened),
            before=before,
        )

    if _one_statement_applies(record, recorder):
        calls = recorder.sealed_calls(record)
        if calls is None:
            calls = sealing.turn_calls(turn.pk)
        sealed = sealed_with(_with_results(calls, call_results))
        if _finish_in_one_statement(run, token, turn, record, fields, now, sealed, call_results):
            if enqueue_next:
                enqueue_after_commit(run.pk)
            return "continued"
    outcome: Outcome | None = decision.outcome
    changes = {
        "state": mapping.state_to_json(record.state_after),
        "lease_token": "",
        "lease_expires_at": None,
        "failures": 0,
        "last_error": "",
        "unbilled": {},
        "updated_at": now,
        **_run_outcome_fields(record, now),
    }
    # Calls still ambiguous on a turn that escalates are sealed without their outcome: the
    # escalation lists them, and the reviewer's verdict says what became of them.
    opened = _ambiguous_positions(record) if outcome == Outcome.ESCALATE else ()
    escalation = _escalation_fields(run, turn, record, now) if outcome == Outcome.ESCALATE else None

    def run_seal(sealed: dict) -> dict:
        """The run's seal once this turn lands (its status, answer, last decision and the
        escalation it opens), made in memory."""
        after = Run(
            **{name: getattr(run, name) for name in ("uid", *chain.RUN_HEADER_FIELDS)},
            policy_version_id=run.policy_version_id,
            status=changes.get("status", run.status),
            stop_reason=changes.get("stop_reason", run.stop_reason),
            final_answer=changes.get("final_answer", run.final_answer),
        )
        tail = chain.story_digest([{**escalation, "status": "open"}]) if escalation else None
        return sealing.run_seal_value(
            after, head_turn=turn.index, head=sealed["content_hash"], tail=tail or chain.NO_STORY
        )

    # The common case holds its calls in memory: sealed before the transaction opens, and the
    # run's seal written by the statement that moves the run.
    calls = recorder.sealed_calls(record)
    sealed = None
    if calls is not None:
        sealed = sealed_with(_with_results(calls, call_results), opened)
        changes["seal"] = run_seal(sealed)
    with transaction.atomic():
        # The lease and the status are checked in the same statement that writes the run.
        moved = Run.objects.filter(pk=run.pk, lease_token=token, status=RunStatus.RUNNING).update(
            **changes
        )
        if not moved:
            if not Run.objects.filter(pk=run.pk, lease_token=token).exists():
                # The lease expired and another worker took the run over: its turn counts.
                raise RuntimeError(f"run {run.pk}: lease lost before the turn was recorded")
            # Cancelled while the turn ran: the turn is recorded, nothing follows.
            Run.objects.filter(pk=run.pk).update(
                state=changes["state"], lease_token="", lease_expires_at=None, updated_at=now
            )
            outcome = None
        for call in call_results:
            ToolCall.objects.filter(pk=call.id).update(
                status=call.status, result=call.result, error=call.error, finished_at=now
            )
        Turn.objects.filter(pk=turn.pk).update(
            state_hash=fields["state_hash"],
            steps=fields["steps"],
            projection=fields["projection"],
            risk_projections=fields["risk_projections"],
            usage=fields["usage"],
            feedback=fields["feedback"],
            timings=dict(record.timings),
            finished_at=now,
        )
        recorder.finish(record)
        if outcome is None and opened:
            opened, calls = (), None  # no escalation will list them: sealed in full
        if calls is None:
            # Read back: this path writes calls in several ways (a retried turn, calls that
            # never ran, a class the gate raised, an external step's).
            sealed = sealed_with(sealing.turn_calls(turn.pk), opened)
        Decision.objects.create(turn=turn, policy_version_id=run.policy_version_id, **sealed)
        if record.judged:
            judging.judge_examples_record(
                run=run, record=record, policy=mapping.policy_for_run(run)
            )
        result = "finished"
        if outcome in (Outcome.CONTINUE, Outcome.REPLAN):
            if enqueue_next:
                enqueue_after_commit(run.pk)
            result = "continued"
        elif outcome == Outcome.ESCALATE:
            _escalation_open(run, turn, escalation)
            result = "waiting"
        if outcome is None:
            sealing.run_reseal(run.pk)  # cancelled meanwhile: sealed as the cancel left it
        elif "seal" not in changes:
            Run.objects.filter(pk=run.pk).update(seal=run_seal(sealed))
    return result


def _one_statement_applies(record: TurnRecord, recorder: CallRecorder) -> bool:
    """Whether the turn may be written by _finish_in_one_statement: a continuing turn on
    PostgreSQL, outside a transaction, whose calls all have their rows, with no judge's
    examples to write (those go in the ORM path's transaction)."""
    return (
        connection.vendor == "postgresql"
        and not connection.in_atomic_block
        and record.decision.outcome in (Outcome.CONTINUE, Outcome.REPLAN)
        and recorder.nothing_to_finish(record)
        and not record.judged
    )


def _with_results(calls: list[dict], call_results: Sequence[CallResult]) -> list[dict]:
    """The calls with the outcomes another loop reported, which land with the decision."""
    if not call_results:
        return calls
    by_id = {result.id: result for result in call_results}
    return [
        {**call, "status": r.status, "result": r.result, "error": r.error}
        if (r := by_id.get(call.get("id"))) is not None
        else call
        for call in calls
    ]


def _ambiguous_positions(record: TurnRecord) -> list[int]:
    """The calls an escalation lists as ambiguous (the same rule as _escalation_open)."""
    return [c.position for c in record.calls if "AmbiguousCall" in (c.error or "")]


def _turn_fields(turn: Turn, record: TurnRecord, verdict_steps: tuple[dict, ...]) -> dict:
    """The turn's sealed columns (runs.chain.TURN_FIELDS) as this finish writes them."""
    return {
        "proposal": turn.proposal,
        "state": turn.state,
        "state_hash": record.state_hash_after,
        "steps": [*verdict_steps, *record.state_steps],
        "projection": record.guardian_projection or {},
        "risk_projections": list(record.risk_projections),
        "usage": mapping.usage_to_json(record.usage),
        "feedback": mapping.feedback_to_json(record.feedback),
    }


def _decision_fields(run: Run, record: TurnRecord) -> dict:
    """The decision's hashed columns (runs.chain.HASHED_FIELDS) but its previous link."""
    decision = record.decision
    return {
        "outcome": decision.outcome.value,
        "answers": judging.answers_logged(record, run),
        "risk_answers": [mapping.answer_to_json(a) for a in record.risk_answers],
        "thresholds": dict(record.thresholds),
        "reasons": [reason.as_dict() for reason in decision.reasons],
        "fired": sorted(condition.value for condition in decision.fired),
        "call_signatures": list(record.past_turn.calls),
        "stop_reason": decision.stop_reason or "",
        "question_set_version": record.question_set_version,
        "guardian_model_version": record.guardian_model_version,
        "state_hash": record.state_hash_after,
    }


# The common turn (continue or replan, every call recorded as it ran) written in one
# statement: PostgreSQL runs the writes of a writable CTE atomically, in one round trip
# instead of five (BEGIN, three statements, COMMIT). Each write only happens if the one
# before it did, so a lost lease or a cancel writes nothing, and the ORM path below then
# finds out which and records it. {calls} writes call results given with the turn (the
# SQL goes through str.format: a literal brace is doubled).
_FINISH_SQL = """
WITH moved AS (
    UPDATE runs_run
    SET state = %(state)s::jsonb, lease_token = '', lease_expires_at = NULL, failures = 0,
        last_error = '', unbilled = '{{}}', updated_at = %(now)s, seal = %(seal)s::jsonb
    WHERE id = %(run_id)s AND lease_token = %(token)s AND status = 'running'
    RETURNING id
),{calls} turn AS (
    UPDATE runs_turn
    SET state_hash = %(state_hash)s, steps = %(steps)s::jsonb, projection = %(projection)s::jsonb,
        risk_projections = %(risk_projections)s::jsonb, usage = %(usage)s::jsonb,
        feedback = %(feedback)s::jsonb, timings = %(timings)s::jsonb, finished_at = %(now)s
    WHERE id = %(turn_id)s AND EXISTS (SELECT 1 FROM moved)
    RETURNING id
)
INSERT INTO runs_decision (
    turn_id, outcome, answers, risk_answers, fired, call_signatures, stop_reason, thresholds,
    reasons, policy_version_id, question_set_version, guardian_model_version, state_hash,
    prev_hash, content_hash, seal_key, created_at
)
SELECT turn.id, %(outcome)s, %(answers)s::jsonb, %(risk_answers)s::jsonb, %(fired)s::jsonb,
    %(call_signatures)s::jsonb, %(stop_reason)s, %(thresholds)s::jsonb, %(reasons)s::jsonb,
    %(policy_version_id)s, %(question_set_version)s, %(guardian_model_version)s,
    %(state_hash)s, %(prev_hash)s, %(content_hash)s, %(seal_key)s, %(now)s
FROM turn
RETURNING id
"""
_FINISH_CALLS_SQL = """ calls AS (
    UPDATE runs_toolcall
    SET status = c.status, result = c.result, error = c.error, finished_at = %(now)s
    FROM jsonb_to_recordset(%(calls)s::jsonb) AS c(id bigint, status text, result text, error text)
    WHERE runs_toolcall.id = c.id AND EXISTS (SELECT 1 FROM moved)
    RETURNING runs_toolcall.id
),"""


def _finish_in_one_statement(
    run, token, turn, record, fields: dict, now, sealed: dict, call_results=()
) -> bool:
    """Write a continuing turn (_one_statement_applies) with _FINISH_SQL: its columns
    `fields`, its decision `sealed` (runs.chain) and the run's seal, made here in memory for
    a running run whose last decision this is. False when it wrote nothing (the caller then
    takes the ORM path, which handles every case)."""
    params = {
        "run_id": run.pk,
        "token": token,
        "turn_id": turn.pk,
        "now": now,
        "state": json.dumps(mapping.state_to_json(record.state_after)),
        "seal": json.dumps(
            sealing.run_seal_value(run, head_turn=turn.index, head=sealed["content_hash"])
        ),
        "state_hash": fields["state_hash"],
        "steps": json.dumps(fields["steps"]),
        "projection": json.dumps(fields["projection"]),
        "risk_projections": json.dumps(fields["risk_projections"]),
        "usage": json.dumps(fields["usage"]),
        "feedback": json.dumps(fields["feedback"]),
        "timings": json.dumps(dict(record.timings)),
        "outcome": sealed["outcome"],
        "answers": json.dumps(sealed["answers"]),
        "risk_answers": json.dumps(sealed["risk_answers"]),
        "fired": json.dumps(sealed["fired"]),
        "call_signatures": json.dumps(sealed["call_signatures"]),
        "stop_reason": sealed["stop_reason"],
        "thresholds": json.dumps(sealed["thresholds"]),
        "reasons": json.dumps(sealed["reasons"]),
        "policy_version_id": run.policy_version_id,
        "question_set_version": sealed["question_set_version"],
        "guardian_model_version": sealed["guardian_model_version"],
        "prev_hash": sealed["prev_hash"],
        "content_hash": sealed["content_hash"],
        "seal_key": sealed["seal_key"],
    }
    calls = ""
    if call_results:
        calls = _FINISH_CALLS_SQL
        params["calls"] = json.dumps([call.__dict__ for call in call_results])
    with connection.cursor() as cursor:
        cursor.execute(_FINISH_SQL.format(calls=calls), params)
        return cursor.fetchone() is not None


def _run_outcome_fields(record: TurnRecord, now) -> dict:
    """The run's columns the turn's outcome sets (nothing for continue or replan)."""
    outcome = record.decision.outcome
    if outcome in (Outcome.CONTINUE, Outcome.REPLAN):
        return {}
    if outcome == Outcome.ESCALATE:
        return {"status": RunStatus.WAITING}
    succeeded = outcome == Outcome.STOP_SUCCESS
    return {
        "status": RunStatus.SUCCEEDED if succeeded else RunStatus.FAILED,
        "stop_reason": record.decision.stop_reason or "",
        "final_answer": record.final_answer,
        "finished_at": now,
    }


def _escalation_fields(run: Run, turn: Turn, record: TurnRecord, now) -> dict:
    """The escalation a turn that escalates opens, as the columns it is created with (the run
    seal covers them before it is written)."""
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
    reason = {
        "triggered": [reason.as_dict() for reason in triggered],
        "held_calls": [c.position for c in record.calls if c.status == "held"],
        "ambiguous_calls": _ambiguous_positions(record),
    }
    return {
        "kind": kind.value,
        "summary": reason_summary(first.source, first.detail)[:300],
        "reason": reason,
        **queue_fields(reason, {c.position: c.tool for c in record.calls}),
        # The pinned version's deadline; a version without one keeps the setting's.
        "deadline": now + timedelta(hours=escalation_hours(run.policy_version.limits or {})),
    }


def _escalation_open(run: Run, turn: Turn, fields: dict) -> Escalation:
    escalation = Escalation.objects.create(run=run, turn=turn, **fields)
    escalation_notify_after_commit(escalation.pk)
    return escalation
