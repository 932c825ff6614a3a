"""One turn's facts written to the log: the one path the durable loop (runs/turns.py) and an
external run's steps (runs/external.py) share to record a turn, its calls, its decision under
the chain's seal (runs/chain.py), the escalation it opens and the run's move.

Shared, the same statements either way:
* turn_begin: the turn and its proposal, committed before anything runs.
* turn_finish: the turn's outcome in one short transaction (or, for the common continuing turn
  on PostgreSQL, one statement): the run row (its compact state, status, lease given back,
  seal), the turn's columns, the calls that never ran, the decision sealed under the log's key,
  any escalation and its notice, and the next turn enqueued after commit; a turn that did not
  escalate is drawn for audit (escalations/audit_samples.py), in the same transaction or, for
  the one-statement turn, right after it.
* from_json and turn_decided: a JSON column as read by a raw query or the ORM; whether a turn
  has its decision.

Where the two differ, on purpose:
* Calls. The durable loop records each call in the statement that starts it, as its tool runs
  (runs/ports.py, CallRecorder), and its results as they come back. An external step's calls
  run in its caller's loop: step_record writes the gated turn with its calls "started" and gives
  the request's lease back, all in one statement (PostgreSQL) or one transaction; their results
  come in a second request and land with the decision (turn_finish's `call_results`, written
  by the statement that writes the decision). A read-only step run in Guardian's process (the
  MCP gateway's) is written whole with its decision: turn, calls and their results in the
  statement that decides it (turn_finish's `new_calls`).
* The lease. A worker holds the run's lease for the whole turn, and turn_finish gives it back.
  An external request holds it only while it works: given back when the step opens
  (step_record) and taken again for its results.
* A cancel while calls run. The durable loop's next call finds the run cancelled and the turn
  ends undecided (turn_stopped); an external step's open is refused whole (StepNotRecorded),
  and results reported after a cancel are not taken.
* Enqueueing: an external step never enqueues a next turn (enqueue_next=False): its caller
  drives the run.
"""

import contextlib
import json
import logging
from collections.abc import Sequence
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from escalations.audit_samples import audit_sample_open
from escalations.models import Escalation, EscalationKind, queue_fields
from escalations.notifications import escalation_notify_after_commit
from guardian_core import metrics
from guardian_core.engine.loop import Proposal, TurnRecord
from guardian_core.engine.policy import Outcome
from guardian_core.engine.tools import Tool
from guardian_core.logs import log_context
from guardian_core.policy_validation import escalation_hours
from runs import chain, judging, mapping, sealing
from runs.models import Decision, Run, RunStatus, ToolCall, ToolCallStatus, Turn
from runs.ports import NO_FLUSH_WAIT, CallRecorder, CallResult, _Row
from runs.queue import enqueue_after_commit
from runs.vocabulary import reason_summary

logger = logging.getLogger(__name__)


def from_json(value):
    """A JSON column's value: text from a raw query (the claim's), already decoded by the ORM."""
    return json.loads(value) if isinstance(value, str | bytes) else value


def turn_decided(turn: Turn) -> bool:
    """Whether the turn has its decision (it counts; until then a retry replays it)."""
    try:
        turn.decision  # noqa: B018 - the reverse one-to-one raises when there is none
    except Decision.DoesNotExist:
        return False
    return True


def turn_begin(run: Run, index: int, proposal: Proposal) -> Turn | None:
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


def turn_unwritten(run: Run, index: int, proposal: Proposal) -> Turn:
    """The turn and its proposal, begun in memory: written with its first call's start, or
    with its decision when no call must be recorded before it runs (runs/ports.py
    CallRecorder); either way before anything that is not a read runs."""
    return Turn(
        run=run,
        index=index,
        state_hash="",
        proposal=mapping.proposal_to_json(proposal),
        started_at=timezone.now(),
    )


# ---- an external step's opening ---------------------------------------------------------------


class StepNotRecorded(Exception):
    """An external step's write found the run no longer the request's: cancelled meanwhile, or
    its lease taken over. Nothing of the step was written."""

    def __init__(self, run_id: int, step: int) -> None:
        super().__init__(f"run {run_id}: step {step} was not recorded")
        self.run_id, self.step = run_id, step


def step_record(
    run: Run,
    token: str,
    step: int,
    proposal: Proposal,
    gate: dict,
    turn: Turn | None,
    rows: list[ToolCall],
    now,
) -> Turn:
    """Write a gated step with its started calls (`rows`, given their turn here) and give the
    lease back: all of it or nothing, and only while the lease is still this request's."""
    if connection.vendor == "postgresql" and turn is None:
        # In a caller's transaction (a test's), a savepoint keeps a refused insert from
        # breaking it; in autocommit the statement is its own transaction.
        with transaction.atomic() if connection.in_atomic_block else contextlib.nullcontext():
            turn = _step_record_in_one_statement(run, token, step, proposal, gate, rows, now)
    else:
        with transaction.atomic():
            turn = turn_gated(run, step, proposal, gate, turn)
            for row in rows:
                row.turn = turn
            ToolCall.objects.bulk_create(rows)
            # The lease and the run's status, checked in the statement that gives it back: a
            # cancel meanwhile undoes the whole step.
            given_back = Run.objects.filter(
                pk=run.pk, lease_token=token, status=RunStatus.RUNNING
            ).update(lease_token="", lease_expires_at=None, updated_at=timezone.now())
            if not given_back:
                raise StepNotRecorded(run.pk, step)
    for row in rows:
        row.turn = turn
    return turn


# The common step written in one statement: PostgreSQL runs the writes of a writable CTE
# atomically, in one round trip instead of five (BEGIN, three statements, COMMIT). The step is
# written only if the lease is still this request's (and given back in the same statement) and
# the run still running: a cancel in flight holds the run's row, so the update waits for it,
# reads the row again and writes nothing; no call is handed out as "run" after a cancel.
_OPEN_SQL = """
WITH released AS (
    UPDATE runs_run SET lease_token = '', lease_expires_at = NULL, updated_at = %(now)s
    WHERE id = %(run_id)s AND lease_token = %(token)s AND status = 'running'
    RETURNING id
), turn AS (
    INSERT INTO runs_turn (
        run_id, index, state_hash, proposal, projection, risk_projections, steps, state,
        usage, feedback, gate, timings, started_at
    )
    SELECT released.id, %(index)s, '', %(proposal)s::jsonb, '{}', '[]', '[]', '{}', '{}',
        '[]', %(gate)s::jsonb, '{}', %(now)s
    FROM released
    RETURNING id
), calls AS (
    INSERT INTO runs_toolcall (
        turn_id, position, tool, arguments, intent, risk_class, status, idempotency_key,
        error, started_at
    )
    SELECT turn.id, c.position, c.tool, c.arguments, c.intent, c.risk_class, c.status,
        c.idempotency_key, '', %(now)s
    FROM turn, jsonb_to_recordset(%(calls)s::jsonb) AS c(
        position int, tool text, arguments jsonb, intent text, risk_class text, status text,
        idempotency_key text
    )
    RETURNING id, position
)
SELECT (SELECT id FROM turn), (SELECT json_agg(json_build_array(position, id)) FROM calls)
"""


def _step_record_in_one_statement(
    run: Run, token: str, step: int, proposal: Proposal, gate: dict, rows: list[ToolCall], now
) -> Turn:
    calls = [
        {
            "position": row.position,
            "tool": row.tool,
            "arguments": row.arguments,
            "intent": row.intent,
            "risk_class": row.risk_class,
            "status": row.status,
            "idempotency_key": row.idempotency_key,
        }
        for row in rows
    ]
    params = {
        "run_id": run.pk,
        "token": token,
        "now": now,
        "index": step,
        "proposal": json.dumps(mapping.proposal_to_json(proposal)),
        "gate": json.dumps(gate),
        "calls": json.dumps(calls),
    }
    with connection.cursor() as cursor:
        cursor.execute(_OPEN_SQL, params)
        turn_id, ids = cursor.fetchone()
    if turn_id is None:
        raise StepNotRecorded(run.pk, step)
    ids = dict(json.loads(ids) if isinstance(ids, str) else ids)
    for row in rows:
        row.pk = ids[row.position]
    turn = Turn(
        id=turn_id,
        run_id=run.pk,
        index=step,
        state_hash="",
        proposal=mapping.proposal_to_json(proposal),
        gate=gate,
        started_at=now,
    )
    turn._state.adding, turn._state.db = False, connection.alias
    return turn


def turn_gated(run: Run, step: int, proposal: Proposal, gate: dict, turn: Turn | None) -> Turn:
    """The step's turn with its gate: written now, or a begun one given its gate."""
    if turn is not None:
        Turn.objects.filter(pk=turn.pk).update(gate=gate)
        turn.gate = gate
        return turn
    return Turn.objects.create(
        run=run,
        index=step,
        state_hash="",
        proposal=mapping.proposal_to_json(proposal),
        gate=gate,
        started_at=timezone.now(),
    )


# ---- a durable turn cut short by a cancel ----------------------------------------------------


def turn_stopped(
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
        if turn.pk is None:  # begun in memory, its first call refused: written now, as it ends
            turn.save(force_insert=True)
        recorder.write_unwritten()
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


# ---- the turn's outcome ----------------------------------------------------------------------


def turn_finish(
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
    new_calls: Sequence[ToolCall] = (),
    keep_lease: bool = False,
    durable: bool = True,
) -> str:
    """Write the turn's outcome (_turn_finish) and log it: one line for the decision, one for
    the escalation it opens, with the run, the turn and the guardian's model version bound."""
    with log_context(run_id=run.pk, turn=turn.index, model_version=record.guardian_model_version):
        result, escalation = _turn_finish(
            run,
            token,
            turn,
            record,
            verdict_steps,
            recorder,
            enqueue_next,
            last=last,
            call_results=call_results,
            new_calls=new_calls,
            keep_lease=keep_lease,
            durable=durable,
        )
        outcome = record.decision.outcome.value
        fired = sorted(condition.value for condition in record.decision.fired)
        logger.info(
            "run %s turn %s: %s, %s",
            run.pk,
            turn.index,
            outcome,
            result,
            extra={"outcome": outcome, "fired": fired, "result": result},
        )
        if escalation is not None:
            with log_context(escalation_id=escalation.pk):
                logger.info(
                    "escalation %s opened on run %s turn %s (%s)",
                    escalation.pk,
                    run.pk,
                    turn.index,
                    escalation.kind,
                    extra={"kind": escalation.kind, "fired": fired},
                )
    return result


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
    new_calls: Sequence[ToolCall] = (),
    keep_lease: bool = False,
    durable: bool = True,
) -> tuple[str, Escalation | None]:
    """Write the turn's outcome in one transaction and move the run on: the run row (its
    compact state, status, lease released, seal), the turn (its steps, what the guardian
    saw), the calls that never ran, `call_results` (the outcomes of calls another loop ran,
    which land with the decision), the decision, sealed under the log's key (runs/chain.py),
    and any escalation. `last` is the last decided turn before this one: the chain's previous
    link, and what people decided on it, which this decision seals. Durability: this is the
    commit that makes the turn count; until it lands a retry replays the recorded proposal.

    `new_calls` (with `turn` not written yet): a read-only step run in process
    (runs/external.py _read_step, or a worker's step kept in memory, runs/ports.py
    CallRecorder): the turn and these calls, with their outcomes, are written here too.

    `keep_lease`: a worker going on with the run in its time slice keeps the lease, renewed
    here, when the run continues (runs/services.py run_advance_slice): the next turn then
    reads the run instead of claiming it, a commit saved. `durable` False: the one-statement
    write of a continuing turn may commit without waiting for its WAL flush (the caller says
    why that is safe); anything else this writes is flushed as usual."""
    # Calls this turn's recorder ran whose result waits for the decision (runs/ports.py).
    own_results = list(recorder.unwritten.values())
    now = timezone.now()
    # From the record alone: a few histogram observations, no query (docs/OPERATIONS.md).
    metrics.turn_observe(
        kind="external" if run.actor == "external" else "agent",
        adapter=run.guardian,
        model_version=record.guardian_model_version,
        timings=record.timings,
        answers=record.answers,
        risk_answers=record.risk_answers,
    )
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
        decision_id = _finish_in_one_statement(
            run,
            token,
            turn,
            record,
            fields,
            now,
            sealed,
            [*call_results, *own_results],
            new_calls,
            lease_until=_lease_until(now) if keep_lease else None,
            durable=durable,
        )
        if decision_id is not None:
            recorder.unwritten = {}
            if enqueue_next:
                enqueue_after_commit(run.pk)
            # After the turn's commit, in a statement of its own: most turns are not drawn and
            # write nothing more. A worker that dies in between loses this turn's draw.
            _audit_sample(run, turn, decision_id, sealed, now)
            return "continued", None
    outcome: Outcome | None = decision.outcome
    keep = keep_lease and outcome in (Outcome.CONTINUE, Outcome.REPLAN)
    changes = {
        "state": mapping.state_to_json(record.state_after),
        "lease_token": token if keep else "",
        "lease_expires_at": _lease_until(now) if keep else None,
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
        if turn.pk is None:
            _turn_write(turn, new_calls, recorder)
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
        recorder.write_unwritten()
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
        written = Decision.objects.create(
            turn=turn, policy_version_id=run.policy_version_id, **sealed
        )
        if outcome is not None:  # a turn cut short by a cancel is not drawn
            _audit_sample(run, turn, written.pk, sealed, now)
        if record.judged:
            judging.judge_examples_record(
                run=run, record=record, policy=mapping.policy_for_run(run)
            )
        result, opened_escalation = "finished", None
        if outcome in (Outcome.CONTINUE, Outcome.REPLAN):
            if enqueue_next:
                enqueue_after_commit(run.pk)
            result = "continued"
        elif outcome == Outcome.ESCALATE:
            opened_escalation = _escalation_open(run, turn, escalation)
            result = "waiting"
        if outcome is None:
            sealing.run_reseal(run.pk)  # cancelled meanwhile: sealed as the cancel left it
        elif "seal" not in changes:
            Run.objects.filter(pk=run.pk).update(seal=run_seal(sealed))
    return result, opened_escalation


def _audit_sample(run: Run, turn: Turn, decision_id: int, sealed: dict, now) -> None:
    """Draw the decided turn for audit (escalations/audit_samples.py): a turn that escalated
    is never drawn, and one drawn opens an item that holds nothing."""
    audit_sample_open(
        run=run,
        turn=turn,
        decision_id=decision_id,
        content_hash=sealed["content_hash"],
        outcome=sealed["outcome"],
        answers=sealed["answers"],
        reasons=sealed["reasons"],
        now=now,
    )


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
# finds out which and records it. {calls} writes call results given with the turn, {turn}
# updates the turn begun earlier or (a read-only step run in process) inserts it, and
# {new_calls} then inserts its calls with their outcomes (_FINISH_SQL goes through str.format:
# a literal brace is doubled there, not in the parts put in its place).
_FINISH_SQL = """
WITH moved AS (
    UPDATE runs_run
    SET state = %(state)s::jsonb, lease_token = %(lease_token)s,
        lease_expires_at = %(lease_expires_at)s, failures = 0,
        last_error = '', unbilled = '{{}}', updated_at = %(now)s, seal = %(seal)s::jsonb
    WHERE id = %(run_id)s AND lease_token = %(token)s AND status = 'running' {no_flush_wait}
    RETURNING id
),{calls} turn AS ({turn}
){new_calls}
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
RETURNING id, turn_id
"""
_FINISH_CALLS_SQL = """ calls AS (
    UPDATE runs_toolcall
    SET status = c.status, result = c.result, error = c.error, finished_at = %(now)s
    FROM jsonb_to_recordset(%(calls)s::jsonb) AS c(id bigint, status text, result text, error text)
    WHERE runs_toolcall.id = c.id AND EXISTS (SELECT 1 FROM moved)
    RETURNING runs_toolcall.id
),"""
_FINISH_TURN_UPDATE_SQL = """
    UPDATE runs_turn
    SET state_hash = %(state_hash)s, steps = %(steps)s::jsonb, projection = %(projection)s::jsonb,
        risk_projections = %(risk_projections)s::jsonb, usage = %(usage)s::jsonb,
        feedback = %(feedback)s::jsonb, timings = %(timings)s::jsonb, finished_at = %(now)s
    WHERE id = %(turn_id)s AND EXISTS (SELECT 1 FROM moved)
    RETURNING id"""
_FINISH_TURN_INSERT_SQL = """
    INSERT INTO runs_turn (
        run_id, index, state_hash, proposal, projection, risk_projections, steps, state,
        usage, feedback, gate, timings, started_at, finished_at
    )
    SELECT moved.id, %(index)s, %(state_hash)s, %(proposal)s::jsonb, %(projection)s::jsonb,
        %(risk_projections)s::jsonb, %(steps)s::jsonb, '{}', %(usage)s::jsonb,
        %(feedback)s::jsonb, %(gate)s::jsonb, %(timings)s::jsonb, %(started_at)s, %(now)s
    FROM moved
    RETURNING id"""
_FINISH_NEW_CALLS_SQL = """, new_calls AS (
    INSERT INTO runs_toolcall (
        turn_id, position, tool, arguments, intent, risk_class, status, idempotency_key,
        result, error, started_at, finished_at
    )
    SELECT turn.id, c.position, c.tool, c.arguments, c.intent, c.risk_class, c.status,
        c.idempotency_key, c.result, c.error, %(started_at)s, %(now)s
    FROM turn, jsonb_to_recordset(%(new_calls)s::jsonb) AS c(
        position int, tool text, arguments jsonb, intent text, risk_class text, status text,
        idempotency_key text, result text, error text
    )
)"""


def _finish_in_one_statement(
    run,
    token,
    turn,
    record,
    fields: dict,
    now,
    sealed: dict,
    call_results=(),
    new_calls=(),
    *,
    lease_until=None,
    durable: bool = True,
) -> int | None:
    """Write a continuing turn (_one_statement_applies) with _FINISH_SQL: its columns
    `fields`, its decision `sealed` (runs.chain) and the run's seal, made here in memory for
    a running run whose last decision this is; with `new_calls`, the turn (not written yet,
    given its id here) and those calls too. The lease is given back, or with `lease_until`
    kept and renewed to then. Returns the decision's id, or None when it wrote nothing (the
    caller then takes the ORM path, which handles every case). `durable` False commits
    without waiting for the WAL flush (synchronous_commit off for this transaction only)."""
    params = {
        "run_id": run.pk,
        "token": token,
        "lease_token": token if lease_until is not None else "",
        "lease_expires_at": lease_until,
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
    parts = {
        "calls": "",
        "turn": _FINISH_TURN_UPDATE_SQL,
        "new_calls": "",
        "no_flush_wait": "" if durable else NO_FLUSH_WAIT,
    }
    if call_results:
        parts["calls"] = _FINISH_CALLS_SQL
        params["calls"] = json.dumps([call.__dict__ for call in call_results])
    if turn.pk is None:
        parts["turn"], parts["new_calls"] = _FINISH_TURN_INSERT_SQL, _FINISH_NEW_CALLS_SQL
        params.update(
            index=turn.index,
            proposal=json.dumps(turn.proposal),
            gate=json.dumps(turn.gate),
            started_at=turn.started_at,
            new_calls=json.dumps(
                [{name: getattr(row, name) for name in sealing.CALL_COLUMNS} for row in new_calls]
            ),
        )
    with connection.cursor() as cursor:
        cursor.execute(_FINISH_SQL.format(**parts), params)
        row = cursor.fetchone()
    if row is None:
        return None
    if row[1] != turn.pk:
        turn.pk = row[1]
        turn._state.adding, turn._state.db = False, connection.alias
    return row[0]


def _lease_until(now):
    """When a lease taken or renewed `now` expires."""
    return now + timedelta(seconds=settings.GUARDIAN_TURN_LEASE_SECONDS)


def _turn_write(turn: Turn, rows: Sequence[ToolCall], recorder: CallRecorder) -> None:
    """Write a turn not written yet and its calls, with their outcomes (inside the turn's
    transaction), and tell the recorder their rows."""
    turn.save(force_insert=True)
    for row in rows:
        row.turn = turn
    ToolCall.objects.bulk_create(rows)
    for row in rows:
        recorder.rows[row.position] = _Row(row.pk, turn.pk, row.risk_class)


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
