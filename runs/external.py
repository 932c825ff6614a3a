"""Runs whose agent loop runs elsewhere (actor "external"): the caller proposes each step and
reports its results through the API; Guardian records, validates, gates and decides them as it
does its own loop's (the engine's prepare_step and finish_step, and runs/recording.py, the
one recording path both share), so the decision log, the reviewers' queue, replay and the
labelled examples are the same.

A step is a turn. It may carry what the user said to the agent since the last one
(`user_messages`): recorded with the proposal and written to the history ("user said: …")
before the step's calls, so the risk question and the guardian read the conversation. Before
it runs: the proposal is recorded, every call validated, the risk question asked, the whole
step gated; a step that runs nothing (invalid, held, or no call at all) is decided at once,
one that may run waits for its results with its calls recorded as started. After: the
results are recorded verbatim, the guardian is asked, the policy decides.

Every call is idempotent by its step number: the same step with the same content gets the
same answer, read back from the records; other content is a Conflict. A request holds the
run's lease while it works (as a worker does), so two requests for one run never interleave;
none holds a lock or a transaction while the guardian answers.

A caller that runs the calls in Guardian's own process (the MCP gateway) may hand them over
with the proposal (`run_reads`): a step whose every call is gated read-only then runs at once
and is recorded, with its results and its decision, in one commit (_read_step). Only reads
may skip the commit before they run: a crash re-runs nothing anyone saw or anything that
changed the world. A write call's "started" is always committed before it runs.

A client that vanishes with calls started and no results leaves them ambiguous: after
GUARDIAN_EXTERNAL_RESULTS_SECONDS the sweeper records them so and escalates the step, as the
internal loop does with a call that started and never finished.
"""

import hashlib
import hmac
import json
import secrets
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from escalations.models import Escalation, EscalationKind, EscalationStatus, Verdict
from escalations.notifications import item_url
from guardian_core.engine.loop import Proposal, ProposedCall, finish_step, prepare_step
from guardian_core.engine.policy import Outcome, Usage
from guardian_core.engine.state import state_apply, state_step
from runs import mapping, sealing
from runs.models import (
    Decision,
    Run,
    RunStatus,
    RunWebhook,
    ToolCall,
    ToolCallStatus,
    Turn,
    WebhookDelivery,
)
from runs.ports import CallRecorder, _Row, build_guardian, build_judge
from runs.recording import (
    CallResult,
    StepNotRecorded,
    from_json,
    step_record,
    turn_begin,
    turn_decided,
    turn_finish,
    turn_gated,
)
from runs.services import _claim, run_start
from runs.tools import run_tools
from runs.turns import (
    SystemClock,
    _approvals_check,
    _recent_turns,
    _Resume,
    _resume,
    _with_edited_arguments,
)
from runs.vocabulary import reason_summary

EXTERNAL = "external"
# A wait answers within this many seconds at most, whatever the caller asks: a long poll that
# holds a connection, not a hanging one.
MAX_WAIT_SECONDS = 30.0
WAIT_POLL_SECONDS = 0.25
# How long a request waits for another one on the same run (a duplicate in flight) to finish.
BUSY_WAIT_SECONDS = 5.0


class ExternalError(Exception):
    """A request Guardian refuses: `status` 400 (`problems` by field), 404 or 409."""

    def __init__(self, status: int, detail: str, problems: Mapping | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.problems = dict(problems or {})


# ---- before a step ----------------------------------------------------------------------------


def external_step_propose(
    *,
    run_id: int,
    owner_id: int | None,
    step: int,
    body: Mapping,
    run_reads: "ReadCalls | None" = None,
) -> tuple[dict, bool]:
    """Record and gate step `step` of external run `run_id` (of user `owner_id`, when given)
    from the caller's proposal (message, calls, tokens, cost); returns (the step's answer,
    whether it is new). Raises ExternalError (404 for a run that is not the owner's).

    `run_reads`, from a caller that runs the calls in this process (the MCP gateway): a step
    whose every call is gated to run as read-only is run through it at once and decided in
    the same commit that records it (_read_step); its answer is then the decided step.

    The common step costs the claim (the run row, its owner checked, and its last turns: one
    statement on PostgreSQL) and the write that records it; its answer is built from what
    was written, not read back."""
    proposal = _proposal_from_body(body)

    def landed() -> dict | None:
        turn = Turn.objects.filter(run_id=run_id, index=step).first()
        return _same_step(turn, proposal) if turn is not None and _opened(turn) else None

    claimed, token, answer = _lease_or_landed(run_id, owner_id, landed)
    if answer is not None:
        return answer, False
    try:
        recent = _recent_turns(claimed, mapping.policy_for_run(claimed))
        if _on_record(recent, step):
            answer = landed()  # a retry of a step on record: its answer, read back
            if answer is not None:
                _release(run_id, token)
                return answer, False
        answer = _step_open(
            claimed, token, step=step, proposal=proposal, recent=recent, run_reads=run_reads
        )
    except BaseException:
        _release(run_id, token)
        raise
    return answer, True


def _on_record(recent: Sequence[Turn], step: int) -> bool:
    """Whether step `step` is already recorded and gated, judging by the run's last turns."""
    if recent and step < recent[0].index:
        return True
    return any(turn.index == step and _opened(turn) for turn in recent)


def _same_step(turn: Turn, proposal: Proposal) -> dict:
    """A step already recorded: the same content gets the same answer, other content a 409."""
    _same_proposal(turn, proposal)
    return external_step_answer(turn)


def _same_proposal(turn: Turn, proposal: Proposal) -> None:
    if _proposal_key(mapping.proposal_from_json(turn.proposal)) != _proposal_key(proposal):
        raise ExternalError(
            409,
            f"step {turn.index} is recorded with other content; a retry must send it as it "
            "was, and a new step takes the next number",
        )


def _opened(turn: Turn) -> bool:
    """Gated (its answer is what it will stay), not just begun by a request that is still
    checking a person's approvals of it, or died doing so."""
    return bool(turn.gate) or turn_decided(turn)


def _step_open(
    run: Run,
    token: str,
    *,
    step: int,
    proposal: Proposal,
    recent: Sequence[Turn],
    run_reads: "ReadCalls | None" = None,
) -> dict:
    """Open step `step` under the lease `token`: checks it comes in turn, applies a verdict on
    the step before, prepares and gates it; decides it at once when nothing is to run.
    Returns its answer."""
    decided = [turn for turn in recent if turn_decided(turn)]
    unfinished = next((turn for turn in recent if not turn_decided(turn)), None)
    last = decided[-1] if decided else None
    expected = last.index + 1 if last else 0
    if unfinished is not None and not _opened(unfinished) and unfinished.index == step:
        # Begun by a request that died while it checked the approvals (nothing ran, it holds
        # no lease now): this request opens it, with the proposal it recorded.
        _same_proposal(unfinished, proposal)
        return _open_with(
            run,
            token,
            step=step,
            proposal=mapping.proposal_from_json(unfinished.proposal),
            decided=decided,
            resume=_resume(last),
            turn=unfinished,
        )
    if unfinished is not None:
        raise ExternalError(
            409, f"step {unfinished.index} waits for its results; report them first"
        )
    if step != expected:
        raise ExternalError(409, f"the next step of run {run.pk} is {expected}, not {step}")
    resume = _resume(last)
    if resume.proposal is not None:
        # A person approved the held step (or asked for an ambiguous call again): the next
        # step is that one, as approved. The caller may send it again; nothing else.
        if _proposal_key(proposal) != _proposal_key(resume.proposal):
            # The held step's user messages are in its history already; the approved step
            # runs its calls, and what the user said since goes with the step after it.
            said = (
                "; the user's messages it was proposed with are recorded with that step, and "
                f"new ones go with step {step + 1}"
                if proposal.user_messages
                else ""
            )
            raise ExternalError(
                409,
                f"step {step} is the step a person approved at step {last.index}: it runs as "
                f"approved (its answer lists the calls), not a new proposal{said}",
            )
        proposal = resume.proposal
    return _open_with(
        run,
        token,
        step=step,
        proposal=proposal,
        decided=decided,
        resume=resume,
        run_reads=run_reads,
    )


def _open_with(
    run: Run,
    token: str,
    *,
    step: int,
    proposal: Proposal,
    decided: Sequence[Turn],
    resume: _Resume,
    turn: Turn | None = None,
    run_reads: "ReadCalls | None" = None,
) -> dict:
    policy = mapping.policy_for_run(run)
    last = decided[-1] if decided else None
    state, verdict_steps = _state_after_verdict(run, resume)
    tools = run_tools(run)
    if resume.approvals is not None:
        proposal = _with_edited_arguments(proposal, resume)
    approved, keys, refusals = resume.approved, dict(resume.rerun_keys or {}), {}
    if resume.approvals is not None:
        # Approvals are spent on the turn that runs them, marked before any call runs: that
        # turn must exist first (and if this request dies now, the retry opens it).
        turn = turn or turn_begin(run, step, proposal)
        if turn is None:  # another request recorded it meanwhile
            raise ExternalError(409, f"step {step} was recorded by another request; read it")
        approved, approved_keys, refusals = _approvals_check(
            run, step, turn, proposal, tools, resume
        )
        keys.update(approved_keys)
    guardian = build_guardian(run)
    # The guardian answers the risk question with no transaction open and nothing recorded.
    prepared = prepare_step(
        state,
        run_id=str(run.pk),
        index=step,
        guardian=guardian,
        tools=tools,
        clock=SystemClock(),
        policy=policy,
        proposal=proposal,
        approved=approved,
        idempotency_keys=keys or None,
        refusals=refusals,
    )
    gate = {
        "risk_answers": [mapping.answer_to_json(a) for a in prepared.risk_answers],
        "approved": sorted(approved) if approved is not None else None,
        "keys": {str(k): v for k, v in keys.items()},
        "refusals": {str(k): v for k, v in refusals.items()},
        "risk_spend": list(prepared.risk_spend),
    }
    if prepared.runnable:
        now = timezone.now()
        gated = {c.position: c.effective.value for c in (prepared.gate.calls or ())}
        rows = [
            ToolCall(
                position=position,
                tool=proposal.calls[position].tool,
                arguments=prepared.checked[position].arguments,
                intent=proposal.calls[position].intent,
                risk_class=gated.get(position, "read_only"),
                status=ToolCallStatus.STARTED,
                idempotency_key=prepared.keys[position],
                error="",
                started_at=now,
            )
            for position in prepared.runnable
        ]
        if run_reads is not None and turn is None and _reads_only(proposal, rows):
            return _read_step(
                run,
                token,
                proposal=proposal,
                turn=Turn(
                    run=run,
                    index=step,
                    state_hash="",
                    proposal=mapping.proposal_to_json(proposal),
                    gate=gate,
                    started_at=now,
                ),
                prepared=prepared,
                rows=rows,
                run_reads=run_reads,
                guardian=guardian,
                tools=tools,
                policy=policy,
                decided=decided,
                verdict_steps=verdict_steps,
            )
        try:
            turn = step_record(run, token, step, proposal, gate, turn, rows, now)
        except IntegrityError:  # another request recorded it meanwhile
            raise ExternalError(409, f"step {step} was recorded by another request") from None
        except StepNotRecorded:  # cancelled meanwhile, or the lease ran out
            raise _not_recorded(run.pk, step) from None
        return _answer(run, turn, rows=rows)
    # Nothing runs: the guardian (and the judge) are asked with no transaction open, then the
    # step is recorded and decided in one transaction.
    record = _decide(
        run,
        prepared,
        guardian=guardian,
        tools=tools,
        policy=policy,
        decided=decided,
        results={},
        statuses=prepared.statuses,
        errors=(),
    )
    with transaction.atomic():
        turn = turn_gated(run, step, proposal, gate, turn)
        recorder = CallRecorder(turn=turn, calls_by_key=None, fresh=True)
        turn_finish(
            run,
            token,
            turn,
            record,
            verdict_steps,
            recorder,
            enqueue_next=False,
            last=last,
        )
    return external_step_answer(turn)


def _not_recorded(run_id: int, step: int) -> ExternalError:
    """Why a step's write found the run no longer this request's: ended (a cancel) or its
    lease taken over."""
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is not None and status != RunStatus.RUNNING:
        return ExternalError(409, f"run {run_id} was {status}: no call of step {step} runs")
    return ExternalError(409, f"run {run_id}: the request's lease ran out; retry")


# ---- a read-only step run in process --------------------------------------------------------

# Runs a read-only step's calls in the caller's process: given each call as gated
# ({"position", "tool", "arguments", "idempotency_key"}), returns {position: (result, error)},
# one of the two None. Raising means whether they ran is not known.
ReadCalls = Callable[[list[dict]], Mapping[int, tuple[str | None, str | None]]]


def _reads_only(proposal: Proposal, rows: Sequence[ToolCall]) -> bool:
    """Every call of the step runs, each gated read-only (the guardian did not raise it)."""
    return len(rows) == len(proposal.calls) and all(row.risk_class == "read_only" for row in rows)


def _read_step(
    run: Run,
    token: str,
    *,
    proposal: Proposal,
    turn: Turn,
    prepared,
    rows: list[ToolCall],
    run_reads: ReadCalls,
    guardian,
    tools,
    policy,
    decided: Sequence[Turn],
    verdict_steps: tuple,
) -> dict:
    """Run a step whose calls are all read-only through `run_reads`, under this request's
    lease, then ask the guardian and record the step, its calls with their results and its
    decision in one commit (turn_finish with `new_calls`; one statement on PostgreSQL for the
    common step). Durability: nothing is written before the reads run. A crash before the
    commit leaves only reads behind, which nobody saw (the caller hears the results from
    the answer, after the commit), so running them again is safe; a write call always has
    its "started" committed before it runs (step_record). When `run_reads` raises, whether
    the reads happened is not known: the step is recorded with its calls started, as any
    opened step, for the caller to report their outcome (or the sweeper to escalate it)."""
    calls = [
        {
            "position": row.position,
            "tool": row.tool,
            "arguments": row.arguments,
            "idempotency_key": row.idempotency_key,
        }
        for row in rows
    ]
    try:
        reported = dict(run_reads(calls))
        if set(reported) != {row.position for row in rows}:
            raise ValueError(f"run_reads answered {sorted(reported)}, not every call of the step")
    except BaseException:
        step_record(run, token, turn.index, proposal, turn.gate, None, rows, turn.started_at)
        raise
    statuses, errors = _outcomes(prepared, reported)
    now = timezone.now()
    recorder = CallRecorder(turn=turn, calls_by_key=None, fresh=True)
    for row in rows:
        result, error = reported[row.position]
        row.status = ToolCallStatus.FAILED if error is not None else ToolCallStatus.DONE
        row.result, row.error, row.finished_at = result, error or "", now
        # Neither the turn nor the row has an id yet: turn_finish writes both (new_calls).
        recorder.rows[row.position] = _Row(None, None, row.risk_class)
        recorder.values[row.position] = {name: getattr(row, name) for name in sealing.CALL_COLUMNS}
    record = _decide(
        run,
        prepared,
        guardian=guardian,
        tools=tools,
        policy=policy,
        decided=decided,
        results=reported,
        statuses=statuses,
        errors=errors,
    )
    # Every call of the step is in hand (none left to write): the common answer is built
    # from memory.
    in_hand = recorder.nothing_to_finish(record)
    moved = turn_finish(
        run,
        token,
        turn,
        record,
        verdict_steps,
        recorder,
        enqueue_next=False,
        last=decided[-1] if decided else None,
        new_calls=rows,
    )
    return _answer_decided(run, turn, rows, record, moved, in_hand=in_hand)


def _outcomes(prepared, reported: Mapping) -> tuple[dict, list[str]]:
    """The step's call statuses once its calls' outcomes are in (`reported`: {position:
    (result, error)}), and the errors the guardian reads."""
    statuses = dict(prepared.statuses)
    errors = []
    for position, (_, error) in sorted(reported.items()):
        statuses[position] = "failed" if error is not None else "done"
        if error is not None:
            tool = prepared.proposal.calls[position].tool
            errors.append(f"call {position} {tool} failed: {error}"[:1000])
    return statuses, errors


# ---- after a step -----------------------------------------------------------------------------


def external_step_results(
    *, run_id: int, owner_id: int | None, step: int, results: Sequence[Mapping]
) -> tuple[dict, bool]:
    """Record each started call's verbatim result (or error) and decide step `step` of
    external run `run_id` (of user `owner_id`, when given); returns (the step's answer,
    whether it was decided now). Raises ExternalError.

    The common step costs the claim (with the run's last turns), one read of its calls, one
    write of their results and, on PostgreSQL, one statement that decides it; its answer is
    built from what was written."""

    def landed() -> dict | None:
        turn = Turn.objects.filter(run_id=run_id, index=step).select_related("decision").first()
        if turn is None:
            raise ExternalError(404, f"run {run_id} has no step {step}")
        if not turn_decided(turn):
            return None
        rows = list(ToolCall.objects.filter(turn=turn).exclude(idempotency_key=None))
        reported = _results_checked(results, {row.position: row for row in rows})
        if _results_key(rows) != _results_key_reported(reported):
            raise ExternalError(409, f"step {step} is decided with other results")
        return external_step_answer(turn)

    claimed, token, answer = _lease_or_landed(run_id, owner_id, landed)
    if answer is not None:
        return answer, False
    try:
        recent = _recent_turns(claimed, mapping.policy_for_run(claimed))
        turn = next((t for t in recent if t.index == step), None)
        if turn is None or turn_decided(turn):
            answer = landed()  # decided already (a retry), or no such step
            if answer is not None:
                _release(run_id, token)
                return answer, False
            raise ExternalError(404, f"run {run_id} has no step {step} waiting for results")
        if not _opened(turn):
            raise ExternalError(409, f"step {step} is still being gated; send its results after")
        rows = _calls_of(turn)
        started = {row.position: row for row in rows if row.idempotency_key is not None}
        reported = _results_checked(results, started)
        answer = _results_record(claimed, token, turn, rows, reported, recent)
    except BaseException:
        _release(run_id, token)
        raise
    return answer, True


def _results_checked(results: Sequence[Mapping], started: Mapping[int, ToolCall]) -> dict:
    """{position: (result, error)} for exactly the calls that were to run; every problem named."""
    problems: list[str] = []
    reported: dict[int, tuple[str | None, str | None]] = {}
    for i, item in enumerate(results):
        where = f"results[{i}]"
        position = item.get("position")
        if position not in started or started[position].status not in _REPORTABLE:
            problems.append(f"{where}.position: no call {position!r} of this step was to run")
            continue
        if position in reported:
            problems.append(f"{where}.position: call {position} is reported twice")
        has_result, has_error = "result" in item, item.get("error") is not None
        if has_result == has_error:
            problems.append(f"{where}: give either result or error")
            continue
        text = item.get("result") if has_result else item["error"]
        if not isinstance(text, str):
            problems.append(f"{where}.{'result' if has_result else 'error'}: must be text")
            continue
        reported[position] = (text, None) if has_result else (None, text)
    missing = sorted(
        p for p, row in started.items() if row.status in _REPORTABLE and p not in reported
    )
    if missing and not problems:
        problems.append(
            "results: every call that was to run needs its result or error; missing: "
            + ", ".join(f"call {p} ({started[p].tool})" for p in missing)
        )
    if problems:
        raise ExternalError(400, "; ".join(problems), {"results": problems})
    return reported


# The statuses a started call's result may be reported from (a repeat of the same report finds
# it done or failed; ambiguous is the sweeper's).
_REPORTABLE = (ToolCallStatus.STARTED, ToolCallStatus.DONE, ToolCallStatus.FAILED)


def _calls_of(turn: Turn) -> list[ToolCall]:
    """The step's recorded calls: read with the claim (PostgreSQL), else now."""
    claimed = getattr(turn, "claimed_calls", None)
    if claimed is None:
        return list(ToolCall.objects.filter(turn_id=turn.pk).order_by("position"))
    fields = ("position", "tool", "arguments", "intent", "risk_class", "status")
    return [
        ToolCall(
            id=call["id"],
            turn_id=turn.pk,
            idempotency_key=call["idempotency_key"],
            result=call["result"],
            error=call["error"] or "",
            **{name: call[name] for name in fields},
        )
        for call in from_json(claimed)
    ]


def _results_record(
    run: Run, token: str, turn: Turn, rows: list[ToolCall], reported: dict, recent
) -> dict:
    """Decide the step with the reported results, which land with the decision (a decision
    that fails leaves the calls started, for the retry or the sweeper), and answer."""
    by_position = {row.position: row for row in rows}
    call_results = []
    for position, (result, error) in reported.items():
        row = by_position[position]
        row.status = ToolCallStatus.FAILED if error is not None else ToolCallStatus.DONE
        row.result, row.error = result, error or ""
        call_results.append(CallResult(row.pk, row.status, row.result, row.error))
    record, moved, recorder = _finish_reported(
        run, token, turn, reported, recent=recent, rows=rows, call_results=call_results
    )
    return _answer_decided(
        run, turn, rows, record, moved, in_hand=recorder.nothing_to_finish(record)
    )


def _answer_decided(
    run: Run, turn: Turn, rows: list[ToolCall], record, moved: str, *, in_hand: bool
) -> dict:
    """A step's answer once it is decided: built from what was written for the common step
    (it went on, and every call's row was `in_hand`), read back otherwise."""
    if moved == "continued" and in_hand:
        # The common step: nothing was written but what is in hand, so it is the answer.
        run.status = RunStatus.RUNNING
        decision = Decision(outcome=record.decision.outcome.value, reasons=_reasons(record))
        turn.feedback = mapping.feedback_to_json(record.feedback)
        return _answer(run, turn, rows=rows, decision=decision)
    return external_step_answer(turn)


def _reasons(record) -> list[dict]:
    return json.loads(json.dumps([reason.as_dict() for reason in record.decision.reasons]))


def _finish_reported(
    run: Run,
    token: str,
    turn: Turn,
    reported: dict,
    *,
    recent: Sequence[Turn] | None = None,
    rows: Sequence[ToolCall] | None = None,
    call_results: Sequence[CallResult] = (),
):
    """Decide a step whose started calls have their outcome (reported, or ambiguous).
    `recent` are the run's last turns (read with the claim) and `rows` the step's calls, when
    the caller has them. Returns (the turn's record, what turn_finish said, the recorder)."""
    policy = mapping.policy_for_run(run)
    if recent is None:
        recent = _recent_turns(run, policy)
    decided = [t for t in recent if t.index < turn.index and turn_decided(t)]
    last = decided[-1] if decided else None
    resume = _resume(last)
    state, verdict_steps = _state_after_verdict(run, resume)
    gate = turn.gate or {}
    tools = run_tools(run)
    prepared = prepare_step(
        state,
        run_id=str(run.pk),
        index=turn.index,
        guardian=_NoRiskGuardian(),
        tools=tools,
        clock=SystemClock(),
        policy=policy,
        proposal=mapping.proposal_from_json(turn.proposal),
        approved=frozenset(gate["approved"]) if gate.get("approved") is not None else None,
        idempotency_keys={int(k): v for k, v in (gate.get("keys") or {}).items()} or None,
        refusals={int(k): v for k, v in (gate.get("refusals") or {}).items()},
        risk_answers=[mapping.answer_from_json(a) for a in gate.get("risk_answers", [])],
    )
    statuses, errors = _outcomes(prepared, reported)
    record = _decide(
        run,
        prepared,
        guardian=build_guardian(run),
        tools=tools,
        policy=policy,
        decided=decided,
        results=reported,
        statuses=statuses,
        errors=errors,
    )
    record = _with_risk_spend(record, gate)
    # Every row the step's calls have is in hand when `rows` is given: the recorder then
    # writes only what is missing (nothing, for a step whose calls all ran).
    recorder = CallRecorder(turn=turn, calls_by_key=None, fresh=rows is not None)
    for row in rows or ():
        recorder.rows[row.position] = _Row(row.pk, turn.pk, row.risk_class)
        # The row as written, with the reported outcome it is given with the decision: what
        # the decision seals (runs/chain.py), without reading it back.
        recorder.values[row.position] = {
            "id": row.pk,
            **{name: getattr(row, name) for name in sealing.CALL_COLUMNS},
        }
    moved = turn_finish(
        run,
        token,
        turn,
        record,
        verdict_steps,
        recorder,
        enqueue_next=False,
        last=last,
        call_results=call_results,
    )
    return record, moved, recorder


def _decide(
    run: Run,
    prepared,
    *,
    guardian,
    tools,
    policy,
    decided: Sequence[Turn],
    results: Mapping,
    statuses: Mapping,
    errors: Sequence[str],
):
    """The step's record: the guardian's questions on what the step did, and the judge's
    when the run's policy version names one, as for Guardian's own turns."""
    last = decided[-1] if decided else None
    judging_setup = build_judge(run)
    try:
        return finish_step(
            prepared,
            results=results,
            statuses=statuses,
            errors=errors,
            guardian=guardian,
            tools=tools,
            clock=SystemClock(),
            policy=policy,
            history=[mapping.past_turn(t) for t in decided],
            usage=_usage_before(last),
            run_started_at=run.created_at,
            judge=judging_setup.judge if judging_setup else None,
            judge_conditions=judging_setup.conditions if judging_setup else (),
            judge_deadline_seconds=judging_setup.deadline_seconds if judging_setup else None,
        )
    finally:
        if judging_setup is not None:
            judging_setup.judge.close()


class _NoRiskGuardian:
    """The risk answers are the ones recorded when the step was gated: never asked again."""

    model_version = "recorded"

    def assess_risk(self, projections):
        raise AssertionError("the step's risk answers are recorded")

    def answer(self, projection, conditions):
        raise AssertionError("only the risk question is asked before a step")


def _with_risk_spend(record, gate: Mapping):
    # finish_step counted the guardian it was given; the risk question was asked (and paid
    # for) by the one that gated the step, its spend recorded with the gate.
    tokens, cost = (gate.get("risk_spend") or [0, 0.0])[:2]
    if not tokens and not cost:
        return record
    from dataclasses import replace

    usage = record.usage
    return replace(
        record, usage=replace(usage, tokens=usage.tokens + int(tokens), cost=usage.cost + cost)
    )


# ---- reading a step ---------------------------------------------------------------------------


def external_step_get(*, run: Run, step: int) -> dict:
    turn = Turn.objects.filter(run_id=run.pk, index=step).first()
    if turn is None:
        raise ExternalError(404, f"run {run.pk} has no step {step}")
    return external_step_answer(turn)


def external_run_summary(run: Run) -> dict:
    """Where an external run stands: its status, the next step to propose, a step waiting for
    results, an escalation waiting for a person (a client resuming after a restart reads it)."""
    last = Turn.objects.filter(run_id=run.pk).select_related("decision").order_by("-index").first()
    pending = last if last is not None and not turn_decided(last) else None
    open_escalation = (
        Escalation.objects.raised()
        .filter(run=run, status=EscalationStatus.OPEN)
        .order_by("-pk")
        .first()
    )
    return {
        "id": run.pk,
        "status": run.status,
        "stop_reason": run.stop_reason,
        "final_answer": run.final_answer,
        "next_step": (last.index + 1)
        if last is not None and pending is None
        else (last.index if last is not None else 0),
        "pending_step": pending.index if pending is not None else None,
        "escalation": _escalation_json(open_escalation) if open_escalation else None,
        "steps_url": reverse("api:run-steps", args=[run.pk]),
    }


def external_step_answer(turn: Turn) -> dict:
    """A step as the caller sees it, read from the records (so a retry reads the same)."""
    turn = Turn.objects.select_related("run", "decision").filter(pk=turn.pk).get()
    rows = list(ToolCall.objects.filter(turn=turn))
    # An audit sample of the step is the reviewers' business, not the caller's.
    escalation = turn.escalations.raised().order_by("-pk").first()
    decision = turn.decision if turn_decided(turn) else None
    return _answer(turn.run, turn, rows=rows, escalation=escalation, decision=decision)


def _answer(
    run: Run,
    turn: Turn,
    *,
    rows: Sequence[ToolCall],
    escalation: Escalation | None = None,
    decision: Decision | None = None,
) -> dict:
    """The step's answer from its records in hand: the same whether just written or read."""
    proposal = mapping.proposal_from_json(turn.proposal)
    by_position = {row.position: row for row in rows}
    # A step still waiting for its results when the run ended (a cancel): nothing of it is
    # to run any more, and results reported now are not taken.
    ended = decision is None and bool(turn.gate) and run.status != RunStatus.RUNNING
    calls = []
    for position, call in enumerate(proposal.calls):
        row = by_position.get(position)
        status = _CALL_STATUS.get(row.status if row else "", "not_run")
        if ended and status == "run":
            status = "cancelled"  # the only way a run ends with a step's results outstanding
        calls.append(
            {
                "position": position,
                "call_id": call.call_id,
                "tool": call.tool,
                "status": status,
                "arguments": row.arguments if row is not None else call.arguments,
                "idempotency_key": row.idempotency_key if row is not None else None,
                "risk_class": row.risk_class if row is not None else None,
                "problems": (row.error.splitlines() if row and status == "invalid" else []),
                "message": _call_message(status, row),
            }
        )
    if decision is None and not turn.gate:
        status = "opening"  # a request is checking its approvals; read it again in a moment
    elif ended:
        status = "cancelled"
    elif decision is None:
        status = "run"
    elif escalation is not None and escalation.kind == EscalationKind.GATED_STEP:
        status = "held"
    else:
        status = "decided"
    return {
        "run": run.pk,
        "step": turn.index,
        "status": status,
        "calls": calls,
        "escalation": _escalation_json(escalation) if escalation else None,
        "decision": _decision_json(run, turn, decision, by_position, escalation)
        if decision
        else None,
        "results_url": reverse("api:run-step-results", args=[run.pk, turn.index]),
    }


_CALL_STATUS = {
    ToolCallStatus.STARTED: "run",
    ToolCallStatus.DONE: "run",
    ToolCallStatus.FAILED: "run",
    ToolCallStatus.AMBIGUOUS: "run",
    ToolCallStatus.INVALID: "invalid",
    ToolCallStatus.HELD: "held",
    ToolCallStatus.REJECTED: "not_approved",
}


def _call_message(status: str, row: ToolCall | None) -> str:
    if status == "invalid":
        return "Invalid arguments: " + "; ".join((row.error or "").splitlines())
    if status == "held":
        return "Held: a person decides before any call of this step runs."
    if status == "not_approved":
        return (row.error if row else "") or "Not approved by a reviewer."
    if status == "not_run":
        return "Not run: the step ran nothing."
    if status == "cancelled":
        return (
            "Not to run: the run was cancelled before this call's result came back; a result "
            "reported now is not taken."
        )
    return ""


def _decision_json(run: Run, turn: Turn, decision: Decision, rows: Mapping, escalation) -> dict:
    quarantined = any(
        r.get("source") == "integrity" and r.get("outcome") == Outcome.ESCALATE
        for r in decision.reasons or []
    )
    triggered = [r for r in decision.reasons or [] if r.get("outcome") == decision.outcome]
    results = [
        {
            "position": position,
            # Withheld until a person clears it: the caller's model must not read it.
            "result": None if quarantined else row.result,
            "withheld": quarantined,
        }
        for position, row in sorted(rows.items())
        if row.status in (ToolCallStatus.DONE, ToolCallStatus.FAILED)
    ]
    return {
        "step": turn.index,
        "outcome": decision.outcome,
        "run_status": run.status,
        "may_continue": run.status == RunStatus.RUNNING,
        "summary": "; ".join(
            reason_summary(r.get("source", ""), r.get("detail", "")) for r in triggered
        ),
        "reasons": [
            {**r, "words": reason_summary(r.get("source", ""), r.get("detail", ""))}
            for r in decision.reasons or []
        ],
        "feedback": [
            {"call_id": item.call.call_id, "tool": item.call.tool, "message": item.message}
            for item in mapping.feedback_from_json(turn.feedback)
        ],
        "quarantined": quarantined,
        "results": results,
        "escalation": _escalation_json(escalation) if escalation else None,
        "final_answer": run.final_answer if decision.outcome == Outcome.STOP_SUCCESS else None,
    }


def _escalation_json(escalation: Escalation) -> dict:
    return {
        "id": escalation.pk,
        "kind": escalation.kind,
        "status": escalation.status,
        "summary": escalation.summary,
        # For a person (the loop may post it in a chat): absolute, at GUARDIAN_BASE_URL.
        "url": item_url(escalation.pk),
        # The long poll: on the wait server when there is one (no thread held per caller),
        # else on this server, a path.
        "wait_url": settings.GUARDIAN_WAIT_URL
        + reverse("api:escalation-wait", args=[escalation.pk]),
    }


# ---- waiting on a person ----------------------------------------------------------------------


def external_escalation_wait(*, escalation: Escalation, timeout: float) -> dict:
    """The escalation's verdict as soon as there is one, polling for up to `timeout` seconds
    (at most MAX_WAIT_SECONDS); an approved held step comes back with the step it resumes."""
    longest = min(MAX_WAIT_SECONDS, settings.GUARDIAN_EXTERNAL_MAX_WAIT_SECONDS)
    deadline = time.monotonic() + max(0.0, min(timeout, longest))
    while True:
        escalation.refresh_from_db(fields=["status"])
        if escalation.status != EscalationStatus.OPEN or time.monotonic() >= deadline:
            return external_verdict_answer(escalation)
        time.sleep(WAIT_POLL_SECONDS)


def external_verdict_answer(escalation: Escalation) -> dict:
    """What became of an escalation, for the caller (the wait and the webhook say the same)."""
    escalation = Escalation.objects.select_related("run", "turn").get(pk=escalation.pk)
    run = escalation.run
    verdict = Verdict.objects.filter(escalation=escalation).first()
    answer = {
        "escalation": escalation.pk,
        "run": run.pk,
        "step": escalation.turn.index,
        "status": "resolved" if verdict is not None else escalation.status,
        "decision": verdict.decision if verdict else None,
        "reason": verdict.reason if verdict else "",
        "run_status": run.status,
        "may_continue": run.status == RunStatus.RUNNING,
        "feedback": [],
        "released": [],
        "resumed": None,
    }
    if verdict is None:
        return answer
    turn = Turn.objects.select_related("decision").filter(pk=escalation.turn_id).get()
    resume = _resume(turn)
    answer["feedback"] = [
        {"call_id": f.call.call_id, "tool": f.call.tool, "message": f.message}
        for f in resume.feedback
    ]
    answer["released"] = list(resume.released or ())
    if resume.proposal is not None and run.status == RunStatus.RUNNING:
        answer["resumed"] = external_step_resume(run=run, after=turn)
    answer["run_status"] = Run.objects.values_list("status", flat=True).get(pk=run.pk)
    answer["may_continue"] = answer["run_status"] == RunStatus.RUNNING
    return answer


def external_step_resume(*, run: Run, after: Turn) -> dict | None:
    """The step that runs what a person approved at step `after` (opened now if it is not
    yet): exactly the approved calls, as approved, under the keys their approvals bind."""
    existing = Turn.objects.filter(run_id=run.pk, index=after.index + 1).first()
    if existing is not None:
        return external_step_answer(existing)
    try:
        token, claimed = _lease(run.pk)
    except (ExternalError, _Busy):
        return None  # another request opens it now; the caller reads it on its next wait
    step = after.index + 1
    try:
        recent = _recent_turns(claimed, mapping.policy_for_run(claimed))
        if _on_record(recent, step):  # opened meanwhile by the caller's own proposal
            _release(run.pk, token)
            return external_step_answer(Turn.objects.get(run_id=run.pk, index=step))
        proposal = _resume(after).proposal
        return _step_open(claimed, token, step=step, proposal=proposal, recent=recent)
    except BaseException:
        _release(run.pk, token)
        raise


# ---- the sweeper: a client that vanished mid-step ------------------------------------------------


def external_steps_abandoned(*, now=None) -> list[int]:
    """Steps whose calls were started by a caller that never reported back within
    GUARDIAN_EXTERNAL_RESULTS_SECONDS: each started call is recorded ambiguous (it may or may
    not have happened) and the step decided, which escalates it to a person. Returns the
    turn ids handled."""
    now = now or timezone.now()
    stale = now - timedelta(seconds=settings.GUARDIAN_EXTERNAL_RESULTS_SECONDS)
    turns = list(
        Turn.objects.filter(
            run__actor=EXTERNAL,
            run__status=RunStatus.RUNNING,
            decision__isnull=True,
            started_at__lt=stale,
            tool_calls__status=ToolCallStatus.STARTED,
        )
        .select_related("run")
        .distinct()[:100]
    )
    handled = []
    for turn in turns:
        since = timezone.localtime(turn.started_at).strftime("%Y-%m-%d %H:%M:%S")
        message = (
            f"AmbiguousCall: handed to the caller to run at {since}; no result came back: "
            "did it go through? It is not run again."
        )
        try:
            token, claimed = _lease(turn.run_id)
        except (ExternalError, _Busy):
            continue  # a request works on it right now
        _step_ambiguous(claimed, token, turn, message)
        handled.append(turn.pk)
    return handled


def external_step_outcome_unknown(
    *, run_id: int, owner_id: int | None, step: int, message: str
) -> dict:
    """The caller lost track of step `step`'s started calls (its connection to the tool broke
    after the call was sent): each is recorded ambiguous with `message` and the step decided
    at once, which escalates it to a person, as the sweeper would later. Returns the step's
    answer. Raises ExternalError."""

    def landed() -> dict | None:
        turn = Turn.objects.filter(run_id=run_id, index=step).first()
        return external_step_answer(turn) if turn is not None and turn_decided(turn) else None

    claimed, token, answer = _lease_or_landed(run_id, owner_id, landed)
    if answer is not None:
        return answer
    turn = Turn.objects.filter(run_id=run_id, index=step).first()
    if turn is None or turn_decided(turn):
        _release(run_id, token)
        answer = landed()
        if answer is None:
            raise ExternalError(404, f"run {run_id} has no step {step} waiting for results")
        return answer
    _step_ambiguous(claimed, token, turn, f"AmbiguousCall: {message}"[:1000])
    return external_step_answer(turn)


def _step_ambiguous(run: Run, token: str, turn: Turn, message: str) -> None:
    """Record a step's started calls ambiguous and decide it, under the lease `token`."""
    try:
        started = list(
            ToolCall.objects.filter(turn=turn, status=ToolCallStatus.STARTED).values_list(
                "position", flat=True
            )
        )
        ToolCall.objects.filter(turn=turn, status=ToolCallStatus.STARTED).update(
            status=ToolCallStatus.AMBIGUOUS, error=message
        )
        _finish_reported(run, token, turn, reported=dict.fromkeys(started, (None, message)))
    except BaseException:
        _release(turn.run_id, token)
        raise


# ---- webhooks ---------------------------------------------------------------------------------


def webhook_signature(secret: str, body: bytes) -> str:
    """The X-Guardian-Signature header of a delivery: HMAC-SHA256 of the exact body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def webhook_body(escalation: Escalation) -> bytes:
    return json.dumps(external_verdict_answer(escalation), sort_keys=True).encode()


def external_webhook_deliver(*, escalation_id: int) -> str:
    """Send one verdict to its run's webhook: "delivered", "retry" (no 2xx answer: the task
    tries again later) or "no webhook". The body is the wait's answer, signed with the run's
    secret (X-Guardian-Signature: sha256=HMAC of the exact bytes); the receiver dedupes by
    X-Guardian-Delivery. No transaction is open while the receiver answers."""
    import httpx

    escalation = Escalation.objects.select_related("run").get(pk=escalation_id)
    webhook = RunWebhook.objects.filter(run=escalation.run).first()
    if webhook is None:
        return "no webhook"
    delivery, _ = WebhookDelivery.objects.get_or_create(
        escalation=escalation, defaults={"webhook": webhook}
    )
    if delivery.delivered_at is not None:
        return "delivered"
    if delivery.given_up_at is not None:
        return "given up"
    body = webhook_body(escalation)
    headers = {
        "Content-Type": "application/json",
        "X-Guardian-Event": "verdict",
        "X-Guardian-Delivery": str(delivery.pk),
        "X-Guardian-Signature": webhook_signature(webhook.secret, body),
    }
    status, error = None, ""
    try:
        response = httpx.post(
            webhook.url,
            content=body,
            headers=headers,
            timeout=settings.GUARDIAN_WEBHOOK_TIMEOUT_SECONDS,
        )
        status = response.status_code
        if not 200 <= status < 300:
            error = f"HTTP {status}: {response.text[:300]}"
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:500]
    WebhookDelivery.objects.filter(pk=delivery.pk).update(
        attempts=delivery.attempts + 1,
        status_code=status,
        error=error,
        delivered_at=None if error else timezone.now(),
        last_attempt_at=timezone.now(),
    )
    return "retry" if error else "delivered"


# A delivery's task retries itself 8 times (runs.tasks.deliver_verdict), at most 300 s apart:
# one idle for longer than that lost its task (a worker killed, a broker that restarted empty).
WEBHOOK_MAX_ATTEMPTS = 9
WEBHOOK_IDLE_SECONDS = 600


def webhook_deliveries_sweep(*, now=None) -> dict[str, list[int]]:
    """The sweeper's pass over verdict webhooks (runs/sweeps.py): a verdict whose delivery
    went idle undelivered is sent again (by escalation id), or given up once every attempt is
    spent, with the reason kept on the delivery and shown on the run page; a decided verdict
    of a run with a webhook and no delivery at all (its message was lost before the first
    attempt) is sent. The receiver dedupes by X-Guardian-Delivery, so a late retry that
    crosses the sweep's is harmless."""
    from runs.queue import verdict_webhook_send

    now = now or timezone.now()
    idle = now - timedelta(seconds=WEBHOOK_IDLE_SECONDS)
    resent: list[int] = []
    given_up: list[int] = []
    stale = WebhookDelivery.objects.filter(
        delivered_at__isnull=True, given_up_at__isnull=True
    ).filter(Q(last_attempt_at__lt=idle) | Q(last_attempt_at__isnull=True, created_at__lt=idle))
    for delivery_id, escalation_id, attempts, error in stale.values_list(
        "pk", "escalation_id", "attempts", "error"
    ):
        if attempts >= WEBHOOK_MAX_ATTEMPTS:
            WebhookDelivery.objects.filter(pk=delivery_id, delivered_at__isnull=True).update(
                given_up_at=now,
                error=(f"given up after {attempts} attempts; last: {error}")[:500],
            )
            given_up.append(escalation_id)
        else:
            verdict_webhook_send(escalation_id)
            resent.append(escalation_id)
    never_sent = (
        Escalation.objects.filter(
            resolved_at__lt=idle,
            verdict__isnull=False,
            run__actor=EXTERNAL,
            run__webhook__isnull=False,
            webhook_delivery__isnull=True,
        )
        .exclude(kind=EscalationKind.AUDIT_SAMPLE)  # its verdict tells the run nothing
        .values_list("pk", flat=True)
    )
    for escalation_id in never_sent:
        verdict_webhook_send(escalation_id)
        resent.append(escalation_id)
    return {"resent": resent, "given_up": given_up}


def external_run_start(*, webhook_url: str = "", **fields) -> tuple[Run, str]:
    """Start an external run (runs.services.run_start) and, with `webhook_url`, the webhook its
    verdicts go to; returns the run and the webhook's secret ("" without one), shown once."""
    with transaction.atomic():
        run = run_start(actor=EXTERNAL, **fields)
        secret = ""
        if webhook_url:
            secret = secrets.token_hex(32)
            RunWebhook.objects.create(run=run, url=webhook_url, secret=secret)
    return run, secret


# ---- small parts ------------------------------------------------------------------------------


def _proposal_from_body(body: Mapping) -> Proposal:
    calls = tuple(
        ProposedCall(
            tool=call.get("tool"),
            arguments=call.get("arguments", {}),
            intent=call.get("intent") or "",
            call_id=call.get("call_id") or "",
        )
        for call in body.get("calls", [])
    )
    proposal = Proposal(
        calls=calls,
        message=body.get("message") or "",
        tokens=int(body.get("tokens") or 0),
        cost=float(body.get("cost") or 0.0),
        user_messages=tuple(item.get("text") or "" for item in body.get("user_messages", [])),
    )
    from guardian_core.engine.loop import proposal_as_text

    return proposal_as_text(proposal)


def _proposal_key(proposal: Proposal) -> str:
    """What makes two proposals of a step the same: what the model said and asked to run, and
    what the user said before it."""
    return json.dumps(
        {
            "message": proposal.message,
            "calls": [[c.tool, c.arguments, c.call_id] for c in proposal.calls],
            "user_messages": list(proposal.user_messages),
        },
        sort_keys=True,
        default=str,
    )


def _results_key(rows) -> str:
    return json.dumps(
        sorted(
            [r.position, r.result, r.error or None]
            for r in rows
            if r.status in (ToolCallStatus.DONE, ToolCallStatus.FAILED)
        ),
        default=str,
    )


def _results_key_reported(reported: Mapping[int, tuple]) -> str:
    return json.dumps(
        sorted([p, result, error] for p, (result, error) in reported.items()), default=str
    )


def _state_after_verdict(run: Run, resume: _Resume):
    """The run's state with a verdict on the step before written in, and that state step."""
    state = mapping.run_state(run)
    if resume.history or resume.released is not None or resume.replanned:
        step = state_step(
            add_history=resume.history, last_results=resume.released, replanned=resume.replanned
        )
        return state_apply(state, step), (step,)
    return state, ()


def _usage_before(last: Turn | None) -> Usage:
    return mapping.usage_from_json(last.usage) if last is not None else Usage(turns=0)


def _lease_or_landed(
    run_id: int, owner_id: int | None, landed: Callable[[], dict | None]
) -> tuple[Run | None, str, dict | None]:
    """The run's lease for this request: (the claimed run with its last turns, the lease
    token, None). Or, when the run is not free, the answer `landed` reads back for a request
    already recorded (a retry of a step that waits on a person or ended the run; or one sent
    while the first is still being answered, which holds the lease): (None, "", answer).
    ExternalError 404 for a run that is not the owner's external run, 409 when the run is
    not the caller's to move, or another request holds it past BUSY_WAIT_SECONDS."""
    deadline = time.monotonic() + BUSY_WAIT_SECONDS
    while True:
        try:
            token, claimed = _lease(run_id, owner_id)
            return claimed, token, None
        except ExternalError as error:
            answer = landed() if error.status == 409 else None
            if answer is not None:
                return None, "", answer
            raise
        except _Busy as busy:
            answer = landed()
            if answer is not None:
                return None, "", answer
            if time.monotonic() >= deadline:
                raise ExternalError(409, str(busy)) from None
            time.sleep(WAIT_POLL_SECONDS / 5)


class _Busy(Exception):
    pass


def _lease(run_id: int, owner_id: int | None = None) -> tuple[str, Run]:
    """Take the lease of external run `run_id` (of user `owner_id`, when given) for this
    request, as a worker takes it for a turn: (the token, the run as claimed, with its last
    turns). ExternalError 404 when there is no such run, 409 when it is not the caller's to
    move (waiting on a person, ended); _Busy when another request holds it."""
    token = uuid.uuid4().hex
    claimed = _claim(run_id, token, actor=EXTERNAL, created_by_id=owner_id)
    if claimed is not None:
        return token, claimed
    found = Run.objects.filter(pk=run_id, actor=EXTERNAL)
    if owner_id is not None:
        found = found.filter(created_by_id=owner_id)
    status = found.values_list("status", flat=True).first()
    if status is None:
        raise ExternalError(404, f"no run {run_id} of yours")
    if status == RunStatus.WAITING:
        raise ExternalError(409, f"run {run_id} waits on a person: wait for the verdict first")
    if status == RunStatus.CANCELLED:
        raise ExternalError(
            409, f"run {run_id} was cancelled: no call of it runs, and no result is taken"
        )
    if status != RunStatus.RUNNING:
        raise ExternalError(409, f"run {run_id} has ended ({status})")
    raise _Busy(f"another request is working on run {run_id}; retry in a moment")


def _release(run_id: int, token: str) -> bool:
    """Give the lease back; False if it was not this request's any more."""
    return bool(
        Run.objects.filter(pk=run_id, lease_token=token).update(
            lease_token="", lease_expires_at=None, updated_at=timezone.now()
        )
    )


__all__ = [
    "EXTERNAL",
    "ExternalError",
    "external_escalation_wait",
    "external_run_summary",
    "external_step_answer",
    "external_step_get",
    "external_step_outcome_unknown",
    "external_step_propose",
    "external_step_results",
    "external_steps_abandoned",
    "external_verdict_answer",
    "webhook_body",
    "webhook_signature",
]
