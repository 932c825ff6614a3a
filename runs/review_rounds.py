"""The coder ⇄ reviewer run kind (actor "coder_reviewer"): one durable turn per model call.

Each step of guardian_core/engine/reviewer_loop.py — the coder's answer, the reviewer's
verdict, the reviewer's repair turn — is its own Turn with its own Decision, driven through
Celery like the agent loop's turns and under the same lease (runs.services.run_advance claims
the run, calls review_round_advance, and records any failure):

* The step's request (whose step, which round, the messages new to that role's history, a hash
  of the whole history sent) is the Turn's proposal, written before the model is called. A
  turn found written but undecided (the worker died, or the call failed) is that same step
  asked again with the same history: same index, no second Turn, never "skipped".
* The loop's state after a step is stored whole in the Turn (`state["loop"]`: both histories,
  every message verbatim as sent and answered) next to the reply itself (`state["reply"]`).
  The next step starts from the last decided turn; nothing is kept in memory in between.
* A model that fails to answer (timeout, HTTP error, truncated or empty output) raises:
  run_advance counts the failure and releases the lease, the sweeper retries, and after
  GUARDIAN_MAX_ADVANCE_FAILURES in a row the run stops "advance_failed". A refusal, an invalid
  verdict after its repair turn, or the round cap escalates to a person (REVIEW_LOOP, who may
  accept the coder's last code); an approval ends the run with the code as its answer.
* Budgets (run.budgets) are checked after every step (engine budget_stop): a run that spent one
  stops failed, with no answer.

Replies are untrusted text: stored as data, never read here beyond what the engine parses.
"""

import time
from dataclasses import fields
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.utils import timezone

from escalations.models import Escalation, EscalationKind
from escalations.notifications import escalation_notify_after_commit
from guardian_core import metrics
from guardian_core.engine.canonical import sha256_hex
from guardian_core.engine.policy import Outcome, Usage
from guardian_core.engine.reviewer_loop import (
    AgentOutputError,
    Applied,
    CodeFormatError,
    Message,
    ModelReply,
    ReviewState,
    Status,
    StepRequest,
    apply_reply,
    budget_stop,
    extract_code,
    next_step,
    review_start,
)
from guardian_core.engine.thresholds import Budgets
from guardian_core.policy_validation import escalation_hours
from runs import chain, mapping, sealing
from runs.models import Decision, Run, RunStatus, Turn
from runs.ports import build_review_agents, close_review_agents
from runs.queue import enqueue_after_commit
from runs.turns import _with_unbilled
from runs.vocabulary import review_summary

DEFAULT_MAX_ROUNDS = 3
# What the decision log names as "asked": the engine's coder/reviewer prompts, not a guardian
# question set. Change it when the wording in reviewer_loop.py changes.
PROMPT_VERSION = "review-loop-1"
_BUDGET_KEYS = tuple(field.name for field in fields(Budgets))


def review_round_advance(run: Run, token: str, *, enqueue_next: bool = True) -> str:
    """Advance a claimed coder ⇄ reviewer run by one step. Returns "continued", "waiting" or
    "finished"; raises when the step could not be taken (the caller records the failure)."""
    decided = list(run.turns.filter(decision__isnull=False).order_by("index"))
    unfinished = run.turns.filter(decision__isnull=True).order_by("index").first()
    last = decided[-1] if decided else None
    if last is not None and last.decision.outcome != Outcome.CONTINUE:
        raise RuntimeError(f"run {run.pk}: the coder/reviewer loop ended at turn {last.index}")
    index = len(decided)
    if last is not None:
        state = ReviewState.from_dict(last.state["loop"])
        usage = mapping.usage_from_json(last.usage)
        models = dict(last.state["models"])
    else:
        state = review_start(run.goal, max_rounds=review_max_rounds(run))
        usage, models = Usage(turns=0), {}
    usage = _with_unbilled(usage, run)  # failed replies since the last step, paid for

    coder, reviewer = build_review_agents(run)
    try:
        models = {"coder": coder.model, "reviewer": reviewer.model} | models
        step = next_step(state)
        agent = coder if step.role == "coder" else reviewer
        turn = _step_turn(run, index, unfinished, _request_json(step, agent.model))
        started = time.monotonic()
        reply = agent.reply(step.history)  # no lock or transaction is held here
        seconds = time.monotonic() - started
    finally:
        close_review_agents(coder, reviewer)
    try:
        applied = apply_reply(state, reply)  # raises on truncated or empty output
    except AgentOutputError as exc:
        # The reply was paid for: runs/services.py keeps its spend on the run (unbilled) and
        # the next recorded step counts it.
        exc.tokens, exc.cost = reply.tokens, reply.cost
        raise
    models[step.role] = reply.model_version or models[step.role]
    prev_hash = last.decision.content_hash if last else ""  # the chain's previous link
    return _step_finish(
        run.pk, token, turn, step, reply, applied, usage, models, seconds, enqueue_next,
        prev_hash=prev_hash,
    )  # fmt: skip


def review_max_rounds(run: Run) -> int:
    script = run.config.get("review_loop")
    scripted = script.get("max_rounds") if isinstance(script, dict) else None
    return run.config.get("max_rounds") or scripted or DEFAULT_MAX_ROUNDS


def _request_json(step: StepRequest, model: str) -> dict:
    """The Turn's proposal: what this step asks, recorded before the model is called. `asked`
    holds the messages new to the role's history since its last reply (with the replies in
    the turns' states, they rebuild both histories); the hash covers the whole history sent.
    "calls" and "message" keep the agent loop's proposal shape for readers of any turn."""
    history = [_message_json(message) for message in step.history]
    since_reply = max(
        (i + 1 for i, m in enumerate(step.history) if m.role == "assistant"), default=0
    )
    return {
        "kind": "review_step",
        "step": step.kind.value,
        "role": step.role,
        "round": step.round,
        "model": model,
        "asked": history[since_reply:],
        "history_length": len(history),
        "history_sha256": sha256_hex(history),
        "calls": [],
        "message": f"round {step.round}: {_STEP_NAMES[step.kind.value]}",
    }


_STEP_NAMES = {
    "coder": "the coder's answer",
    "reviewer": "the reviewer's verdict",
    "repair": "the reviewer's repair turn",
}


def _message_json(message: Message) -> dict:
    return {"role": message.role, "content": message.content, "blocks": list(message.blocks)}


def _step_turn(run: Run, index: int, unfinished: Turn | None, request: dict) -> Turn:
    """The Turn of this step: the one left undecided by a failed or killed attempt (the same
    step, asked again), or a new one with the request written before the model is called."""
    if unfinished is not None:
        recorded = unfinished.proposal
        same = (
            unfinished.index == index
            and recorded.get("step") == request["step"]
            and recorded.get("round") == request["round"]
            and recorded.get("history_sha256") == request["history_sha256"]
        )
        if not same:
            raise RuntimeError(
                f"run {run.pk}: undecided turn {unfinished.index} asked {recorded.get('step')!r} "
                f"in round {recorded.get('round')!r}, but the loop is at turn {index}, "
                f"{request['step']!r} in round {request['round']}"
            )
        return unfinished
    try:
        with transaction.atomic():
            return Turn.objects.create(
                run=run, index=index, state_hash="", proposal=request, started_at=timezone.now()
            )
    except IntegrityError as exc:  # under the lease only a racing takeover gets here
        raise RuntimeError(f"run {run.pk}: turn {index} was recorded by another worker") from exc


def _step_finish(
    run_id: int,
    token: str,
    turn: Turn,
    step: StepRequest,
    reply: ModelReply,
    applied: Applied,
    usage: Usage,
    models: dict,
    seconds: float,
    enqueue_next: bool = True,
    *,
    prev_hash: str = "",
) -> str:
    """Write the step's outcome in one short transaction and move the run on."""
    now = timezone.now()
    ended = applied.outcome
    with transaction.atomic():
        run = Run.objects.select_for_update().select_related("policy_version").get(pk=run_id)
        if run.lease_token != token:
            # The lease expired and another worker took the run over: its turn counts.
            raise RuntimeError(f"run {run_id}: lease lost before the turn was recorded")
        usage = Usage(
            turns=usage.turns + 1,
            tokens=usage.tokens + reply.tokens,
            cost=usage.cost + reply.cost,
            wall_seconds=(now - run.created_at).total_seconds(),
        )
        budgets = Budgets(**{key: run.budgets[key] for key in _BUDGET_KEYS if key in run.budgets})
        budget = budget_stop(usage, budgets, ended=ended is not None)
        if budget is not None:
            outcome, stop_reason = Outcome.STOP_FAILURE, budget.source
        elif ended is None:
            outcome, stop_reason = Outcome.CONTINUE, ""
        elif ended.status == Status.APPROVED:
            outcome, stop_reason = Outcome.STOP_SUCCESS, "review_approved"
        else:
            outcome, stop_reason = Outcome.ESCALATE, ""
        review = _review_reason(step, reply, applied, outcome)
        loop = applied.state.to_dict()
        Turn.objects.filter(pk=turn.pk).update(
            state_hash=sha256_hex(loop),
            state={
                "kind": "review_loop",
                "loop": loop,
                "reply": _reply_json(reply),
                "models": models,
            },
            usage=mapping.usage_to_json(usage),
            timings={"model_seconds": seconds},
            finished_at=now,
        )
        metrics.TURN_SECONDS.labels("coder_reviewer").observe(seconds)
        decision = Decision(
            turn=turn,
            outcome=outcome.value,
            answers={},
            thresholds={},
            reasons=[review, *([budget.as_dict()] if budget else [])],
            stop_reason=stop_reason,
            policy_version=run.policy_version,
            question_set_version=PROMPT_VERSION,
            guardian_model_version=f"coder={models['coder']} reviewer={models['reviewer']}"[:120],
            state_hash=sha256_hex(loop),
        )
        # The turn as just written, read back (a model round is slow; one query is nothing
        # beside it). A review round follows only a round that went on: nothing was decided
        # by people on the turn before it.
        written, calls = sealing.turn_seal_inputs(turn.pk)
        chain.seal(
            decision,
            run=run,
            turn_index=turn.index,
            prev_hash=prev_hash,
            turn=written,
            calls=chain.calls_content(calls),
        )
        decision.save(force_insert=True)
        result = _move_run(run, turn, outcome, stop_reason, applied, now, enqueue_next)
        run.lease_token, run.lease_expires_at = "", None
        run.failures, run.last_error, run.unbilled = 0, "", {}
        run.save()
        sealing.run_reseal(run.pk)
    return result


def _move_run(
    run: Run, turn: Turn, outcome: Outcome, stop_reason: str, applied, now, enqueue_next: bool
) -> str:

    if run.status != RunStatus.RUNNING:
        return "finished"  # cancelled while the model answered: recorded, nothing follows
    if outcome == Outcome.CONTINUE:
        if enqueue_next:
            enqueue_after_commit(run.pk)
        return "continued"
    if outcome == Outcome.ESCALATE:
        run.status = RunStatus.WAITING
        _escalation_open(run, turn, applied.outcome, now)
        return "waiting"
    run.status = RunStatus.SUCCEEDED if outcome == Outcome.STOP_SUCCESS else RunStatus.FAILED
    run.stop_reason = stop_reason
    # Only an approval carries an answer: a run stopped by a budget has none at all.
    run.final_answer = applied.outcome.code if outcome == Outcome.STOP_SUCCESS else None
    run.finished_at = now
    return "finished"


def _escalation_open(run: Run, turn: Turn, ended, now) -> Escalation:
    escalation = Escalation.objects.create(
        run=run,
        turn=turn,
        kind=EscalationKind.REVIEW_LOOP,
        summary=review_summary(
            end_reason=ended.reason.value, rounds=ended.rounds, last_reasons=ended.last_reasons
        )[:300],
        reason={
            "end_reason": ended.reason.value,
            "last_reasons": list(ended.last_reasons),
            "rounds": ended.rounds,
            "detail": ended.detail,
            # What a reviewer may accept in the reviewer agent's place.
            "last_code": _last_code(ended.coder_history),
        },
        conditions=",review_loop,",
        # The deadline the run's pinned version sets (the setting's when it sets none).
        deadline=now + timedelta(hours=escalation_hours(run.policy_version.limits or {})),
    )
    escalation_notify_after_commit(escalation.pk)
    return escalation


def _review_reason(step: StepRequest, reply: ModelReply, applied: Applied, outcome) -> dict:
    """The decision's reason: what the step was and what it gave, for the log and replay."""
    verdict = applied.verdict
    ended = applied.outcome
    if ended is not None:
        detail = ended.detail
    elif applied.parse_error is not None:
        detail = f"invalid verdict, the reviewer gets one repair turn: {applied.parse_error}"
    elif applied.code_error is not None:
        detail = f"the coder's answer holds no single code block: {applied.code_error}"
    elif verdict is not None:
        detail = f"changes requested: {'; '.join(verdict.reasons)}"
    else:
        detail = "the coder answered; the reviewer reviews the code next"
    return {
        "source": "review_loop",
        "band": "clear" if outcome == Outcome.CONTINUE else "fired",
        "outcome": outcome.value,
        "detail": f"round {step.round}, {step.kind.value}: {detail}"[:1000],
        "value": None,
        "t_star": None,
        "delta": None,
        "review": {
            "step": step.kind.value,
            "role": step.role,
            "round": step.round,
            "verdict": None
            if verdict is None
            else ("APPROVED" if verdict.approved else "CHANGES_REQUESTED"),
            "reasons": [] if verdict is None else list(verdict.reasons),
            "parse_error": applied.parse_error,
            "code_error": applied.code_error,
            "refused": applied.refused,
            "end_reason": None if ended is None else ended.reason.value,
            "model_version": reply.model_version,
            "tokens": reply.tokens,
            "cost": reply.cost,
        },
    }


def _reply_json(reply: ModelReply) -> dict:
    return {
        "text": reply.text,
        "stop_reason": reply.stop_reason,
        "blocks": list(reply.blocks),
        "tokens": reply.tokens,
        "cost": reply.cost,
        "model_version": reply.model_version,
    }


def _last_code(coder_history) -> str | None:
    """The code of the coder's latest answer that had exactly one code block, if any."""
    for message in reversed(coder_history):
        if message.role == "assistant":
            try:
                return extract_code(message.content)
            except CodeFormatError:
                continue
    return None
