"""The guarded agent loop's turn, persisted: rebuild the state from the last decided turn and
any verdict on it, record the proposal before anything runs, run the engine's turn against
recording tools, and write its outcome in one short transaction (runs/recording.py, the path
an external run's steps share).

No lock or transaction is held while the actor, the guardian or a tool works; the unique
(run, index) and one-decision-per-turn constraints refuse a turn recorded twice.
"""

import time
from dataclasses import dataclass, replace

from django.utils import timezone

from escalations.models import Approval, EscalationKind, VerdictDecision
from guardian_core.engine.loop import Feedback, Proposal, proposal_as_text, run_turn
from guardian_core.engine.policy import Outcome, Usage, history_needed
from guardian_core.engine.state import HistoryItem, project, state_apply, state_step
from guardian_core.engine.tools import (
    StepStopped,
    Tool,
    action_hash,
    idempotency_key,
    validate_call,
)
from guardian_core.logs import log_bind
from runs import mapping
from runs.models import Decision, Run, ToolCallStatus, Turn
from runs.ports import CallRecorder, build_actor, build_guardian, build_judge, recording_tools
from runs.recording import (
    from_json,
    turn_begin,
    turn_decided,
    turn_finish,
    turn_stopped,
    turn_unwritten,
)
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
    # A person's answer made the policy replan: counted like any replan.
    replanned: bool = False
    # An approved held step: every approval of the escalation, and whose verdict it was (their
    # approval's arguments are the ones that run when they edited them). None otherwise.
    approvals: tuple[Approval, ...] | None = None
    approver_id: int | None = None


def agent_turn_advance(
    run: Run, token: str, *, enqueue_next: bool = True, keep_lease: bool = False
) -> str:
    """Advance a claimed agent-loop run (the worker holds its lease `token`) by one turn.
    Returns "continued", "waiting" or "finished"; raises on an error (the caller records it).
    With `keep_lease` a turn that continues keeps the lease, renewed (the worker goes on).

    Reads what the next turn needs and nothing that grows with the run: the run row with its
    compact state, and the last few turns (the policy's windows, the last turn's usage,
    feedback and verdict, a retried turn's recorded proposal).
    """
    policy = mapping.policy_for_run(run)
    recent = _recent_turns(run, policy)
    decided = [turn for turn in recent if turn_decided(turn)]
    unfinished = next((turn for turn in recent if not turn_decided(turn)), None)
    last = decided[-1] if decided else None
    index = last.index + 1 if last else 0
    log_bind(turn=index)  # until run_advance's context ends

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
    # Durability: the proposal is committed before any call runs, so a retry replays it:
    # with the first call recorded as started, or with the decision when no call runs
    # (runs/ports.py CallRecorder). A resumed held or ambiguous step commits it first: its
    # approvals are marked used by this turn before any call runs.
    if unfinished is not None:
        turn = unfinished
    elif resume.approvals is not None or resume.rerun_keys:
        turn = turn_begin(run, index, proposal)
        if turn is None:
            return "skipped"  # another worker recorded this turn first
    else:
        turn = turn_unwritten(run, index, proposal)

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
            before_calls=recorder.plan,
        )
    except StepStopped:
        return turn_stopped(run, token, turn, proposal, tools, recorder)
    finally:
        if judging_setup is not None:
            judging_setup.judge.close()
    return turn_finish(
        run,
        token,
        turn,
        record,
        verdict_steps,
        recorder,
        enqueue_next,
        last=last,
        new_calls=recorder.new_rows(record) if turn.pk is None else (),
        keep_lease=keep_lease,
        # A read-only turn the worker goes on from may commit without waiting for its WAL
        # flush: its loss in a crash of PostgreSQL only runs its reads again. Nobody outside
        # was told of it (no escalation, notice or caller; its next turn runs here, and the
        # next durable commit, the slice's last at the latest, flushes it with everything
        # before it, the WAL being written in order). A page read in that window (under a
        # second) may show a turn the crash then loses; its chain stays whole.
        durable=not (keep_lease and recorder.reads_only),
    )


def _with_unbilled(usage: Usage, run: Run) -> Usage:
    """`usage` with what failed model calls of the run were billed since its last turn: this
    turn's record counts it (and its write clears it on the run)."""
    unbilled = from_json(getattr(run, "unbilled", None)) or {}
    tokens, cost = int(unbilled.get("tokens", 0) or 0), float(unbilled.get("cost", 0.0) or 0.0)
    if not tokens and not cost:
        return usage
    return replace(usage, tokens=usage.tokens + tokens, cost=usage.cost + cost)


def _recent_turns(run: Run, policy) -> list[Turn]:
    """The last turns the policy's windows read, the last decided one and any unfinished
    one after it: one query, of a bounded number of small rows."""
    wanted = history_needed(policy) + 1  # and one unfinished turn at most
    claimed = getattr(run, "recent_turns", None)  # read with the claim (runs.services._claim)
    if claimed is not None and wanted + 1 <= RECENT_TURNS_READ:
        # Only the rows the policy reads become Turns: a model instance costs more than its row.
        return [_turn_from_claim(run, row) for row in from_json(claimed)[-(wanted + 1) :]]
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


def _turn_from_claim(run: Run, row: dict) -> Turn:
    """A Turn (and its decision's policy fields) from the claim's JSON, as the ORM query
    above would have loaded it."""
    turn = Turn(
        id=row["id"],
        run_id=run.pk,
        index=row["index"],
        proposal=from_json(row["proposal"]),
        usage=from_json(row["usage"]),
        feedback=from_json(row["feedback"]),
        gate=from_json(row.get("gate")) or {},
    )
    if row["decision_id"] is None:
        Turn.decision.related.set_cached_value(turn, None)
        # An unfinished turn's calls, as recorded (runs/external.py reads them).
        turn.claimed_calls = row.get("calls")
    else:
        turn.decision = Decision(
            id=row["decision_id"],
            outcome=row["outcome"],
            fired=from_json(row["fired"]),
            call_signatures=from_json(row["call_signatures"]),
            content_hash=row.get("content_hash") or "",
        )
    return turn


class _NoActor:
    """The actor was asked before the turn began (its proposal is recorded first)."""

    def propose(self, projection, feedback):
        raise AssertionError("the proposal is recorded before the turn runs")


def _resume(last: Turn | None) -> _Resume:
    if last is None:
        return _Resume(None, None, ())
    feedback = mapping.feedback_from_json(last.feedback)
    if last.decision.outcome != Outcome.ESCALATE:
        return _Resume(None, None, feedback)
    escalation = last.escalations.raised().select_related("verdict").order_by("-id").first()
    verdict = getattr(escalation, "verdict", None) if escalation else None
    if verdict is None:
        return _Resume(None, None, feedback)
    escalation.turn = last  # already loaded
    # A step run again after a verdict runs the held step's calls; what the user said before
    # it is in the history already (written when it was held), and is not said twice.
    proposal = replace(mapping.proposal_from_json(last.proposal), user_messages=())
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
