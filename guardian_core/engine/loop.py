"""One turn of a guarded run, against ports: propose → validate → risk check → gate → execute
→ guardian → decide. Returns a complete TurnRecord; nothing here touches a database or a clock
of its own.

Fail closed everywhere: an invalid call stops the whole step (the actor hears every problem);
a held step runs nothing; a tool that raises stops the rest of the step and escalates (but a
StepStopped, raised when the run may no longer act, ends the turn undecided); a guardian
that raises or times out gives malformed answers, which escalate.
"""

import json
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Protocol

from guardian_core.engine.canonical import canonical_json
from guardian_core.engine.conditions import Condition, Malformed, RiskClass
from guardian_core.engine.gate import GateDecision, StepCall, gate_step
from guardian_core.engine.judge import Judge, ask_judge, decide_judged, to_judge
from guardian_core.engine.policy import (
    POST_EXECUTION_CONDITIONS,
    Outcome,
    PastTurn,
    PolicyDecision,
    Reason,
    Usage,
)
from guardian_core.engine.state import (
    SAME_RESULT,
    HistoryItem,
    LoopState,
    PendingCall,
    project,
    state_apply,
    state_hash,
    state_step,
    user_message_item,
)
from guardian_core.engine.thresholds import Policy
from guardian_core.engine.tools import (
    CheckedCall,
    StepStopped,
    Tool,
    call_signature,
    idempotency_key,
    is_text,
    text_problems,
    validate_call,
)

# ---- ports ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProposedCall:
    tool: str
    arguments: object  # a JSON string as models send it, or a decoded value
    intent: str = ""
    call_id: str = ""  # the model's own id for the call, echoed back in feedback


@dataclass(frozen=True)
class Feedback:
    """What the actor is told about one call it proposed (invalid, not approved, rejected),
    with the call itself so a chat model can be answered with a tool message."""

    call: ProposedCall
    message: str


@dataclass(frozen=True)
class Proposal:
    """The actor's next step. It has no authority to stop the run; `message` becomes the
    run's answer only if the guardian finds the goal reached. `user_messages` are what the
    user said to the agent since its last step (oldest first: answers to a confirmation, a
    missing detail): written to the history before the step's calls, so the risk check and
    the guardian read the conversation; untrusted text, never instructions to Guardian."""

    calls: tuple[ProposedCall, ...]
    message: str = ""
    tokens: int = 0
    cost: float = 0.0
    user_messages: tuple[str, ...] = ()


def proposal_as_text(proposal: Proposal) -> Proposal:
    """The proposal in a form every store takes, with nothing that would change what runs.

    Models can emit a NUL or an unpaired surrogate, which no database column takes. Prose
    (message, intent, the call's id, the tool's name) gets U+FFFD in their place; arguments
    holding them become JSON text with the characters escaped, which decodes back to the
    same value, so validation still finds them and the call never runs."""

    def prose(text: str) -> str:
        return text if is_text(text) else _NOT_TEXT_CHARS.sub("\ufffd", text)

    def arguments(value: object) -> object:
        if isinstance(value, str):
            return value if is_text(value) else _NOT_TEXT_CHARS.sub(_escaped, value)
        if not text_problems(value):
            return value
        try:
            return json.dumps(value, ensure_ascii=True, sort_keys=True)
        except (TypeError, ValueError):
            return repr(value)

    calls = tuple(
        replace(
            call,
            tool=prose(call.tool) if isinstance(call.tool, str) else call.tool,
            intent=prose(call.intent),
            call_id=prose(call.call_id),
            arguments=arguments(call.arguments),
        )
        for call in proposal.calls
    )
    return replace(
        proposal,
        calls=calls,
        message=prose(proposal.message),
        user_messages=tuple(prose(text) for text in proposal.user_messages),
    )


_NOT_TEXT_CHARS = re.compile("[\x00\ud800-\udfff]")


def _escaped(match: re.Match) -> str:
    return f"\\u{ord(match.group()):04x}"


class Actor(Protocol):
    def propose(self, projection: Mapping, feedback: tuple[Feedback, ...]) -> Proposal:
        """The next step, given the bounded projection and what became of earlier calls."""
        ...


class Guardian(Protocol):
    model_version: str
    # The question set it actually asks (the pinned policy version's wording, or its own
    # fixed set when it cannot take question text); recorded with every decision.
    question_set_version: str
    # Optional: `spend.tokens` and `spend.cost`, cumulative over its calls, counted against
    # the run's budgets.

    def assess_risk(self, projections: Sequence[Mapping]) -> Sequence[object]:
        """One raw risk answer per projection (each shows one pending call)."""
        ...

    def answer(self, projection: Mapping, conditions: Sequence[Condition]) -> Mapping:
        """Raw answers keyed by condition, asked concurrently under one deadline."""
        ...


class Clock(Protocol):
    def now(self) -> datetime: ...

    def monotonic(self) -> float: ...


# ---- the record -----------------------------------------------------------------------------


@dataclass(frozen=True)
class CallRecord:
    position: int
    tool: str
    arguments: object
    intent: str
    problems: tuple[str, ...]
    declared_risk: RiskClass | None
    idempotency_key: str | None
    # invalid | held | not_approved | done | failed | not_run
    status: str
    result: str | None = None  # verbatim, untrusted
    error: str | None = None


@dataclass(frozen=True)
class TurnRecord:
    """Everything the decision log needs to show and replay one turn."""

    run_id: str
    index: int
    started_at: datetime
    state_hash_before: str
    state_hash_proposed: str  # the state with the proposal written, before anything ran
    state_hash_after: str
    proposal: Proposal
    calls: tuple[CallRecord, ...]
    gate: GateDecision | None
    risk_answers: tuple[object, ...]
    answers: Mapping[str, object]
    decision: PolicyDecision
    thresholds: Mapping[str, dict]
    question_set_version: str
    guardian_model_version: str
    feedback: tuple[Feedback, ...]  # for the actor's next proposal
    quarantined: bool  # the tool outputs of this turn are withheld from the actor
    final_answer: str | None  # only on stop_success: nothing is assembled from partial output
    usage: Usage
    state_after: LoopState
    timings: Mapping[str, float] = field(default_factory=dict)
    # Exactly what the guardian was shown: the post-execution projection (before any output
    # was withheld; None when the step was held and it was not asked) and one projection per
    # call for the risk check. Labelled examples are built from these.
    guardian_projection: Mapping | None = None
    risk_projections: tuple[Mapping, ...] = ()
    # The state steps this turn made, in order: state_rebuild(state before, steps) is
    # state_after, hash included.
    state_steps: tuple[dict, ...] = ()
    # The second-tier judge's raw answers, per condition it was asked (guardian answers in
    # the band), and its model version; `answers` stays the guardian's. The decision was
    # taken with judge.decide_judged over both, which replay does again.
    judged: Mapping[str, object] = field(default_factory=dict)
    judge_model_version: str = ""

    @property
    def past_turn(self) -> PastTurn:
        """What the policy keeps of this turn for the next ones."""
        signatures = tuple(call_signature(c.tool, c.arguments) for c in self.calls)
        return PastTurn(self.decision.outcome, self.decision.fired, signatures)


# ---- the step -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PreparedStep:
    """A step checked and gated, nothing run yet: what `finish_step` needs once its calls
    have run (here, or in a caller's own loop that reports their results). Built again from
    the same inputs (the proposal, the risk answers, the approvals and keys) it is the same."""

    run_id: str
    index: int
    state: LoopState  # before the step
    started_at: datetime
    hash_before: str
    proposal: Proposal
    checked: tuple[CheckedCall, ...]
    proposed_state: LoopState
    hash_proposed: str
    gate: GateDecision | None
    risk_answers: tuple[object, ...]
    projections: tuple[Mapping, ...]
    extra: tuple[Reason, ...]
    feedback: tuple[Feedback, ...]
    # Every call's status so far: invalid, held, not_approved, or not_run for the ones that
    # may run (`runnable`), which running makes done or failed.
    statuses: Mapping[int, str]
    runnable: tuple[int, ...]
    keys: Mapping[int, str | None]
    steps: tuple[dict, ...]
    timings: Mapping[str, float]
    risk_spend: tuple[float, float] = (0, 0.0)  # what asking the risk question cost

    @property
    def held(self) -> bool:
        return self.gate is not None and self.gate.held


def prepare_step(
    state: LoopState,
    *,
    run_id: str,
    index: int,
    guardian: Guardian,
    tools: Mapping[str, Tool],
    clock: Clock,
    policy: Policy,
    proposal: Proposal,
    approved: frozenset[int] | None = None,
    idempotency_keys: Mapping[int, str] | None = None,
    refusals: Mapping[int, str] | None = None,
    risk_answers: Sequence[object] | None = None,
    timings: Mapping[str, float] | None = None,
) -> PreparedStep:
    """Validate every call of `proposal`, ask the risk question, gate the whole step and give
    each call its idempotency key: everything before any call runs. `risk_answers`, when
    given, are the answers an earlier preparation of the same step received (the guardian is
    not asked again); see `run_turn` for the other arguments."""
    timings = dict(timings or {})
    spent_before = _spend(guardian)
    tick = clock.monotonic()
    started_at = clock.now()
    hash_before = state_hash(state)
    checked = tuple(validate_call(tools, call.tool, call.arguments) for call in proposal.calls)
    step_changes = state_step(
        # What the user said came before this proposal: the history shows it first.
        add_history=tuple(user_message_item(index, text) for text in proposal.user_messages),
        pending=tuple(
            PendingCall(
                tool=call.tool,
                description=tools[call.tool].description if call.tool in tools else "",
                arguments=check.arguments if check.ok else _as_recorded(call.arguments),
                intent=call.intent,
            )
            for call, check in zip(proposal.calls, checked, strict=True)
        ),
    )
    proposed_state = state_apply(state, step_changes)
    hash_proposed = state_hash(proposed_state)
    tick = _lap(timings, "validate", clock, tick)

    gate = None
    answers: tuple[object, ...] = ()
    projections: list[Mapping] = []
    extra: list[Reason] = []
    feedback: list[Feedback] = []
    invalid = [check for check in checked if not check.ok]
    if invalid:
        feedback = [
            Feedback(call, check.feedback())
            for call, check in zip(proposal.calls, checked, strict=True)
            if not check.ok
        ]
        extra.append(_invalid_reason(invalid))
        statuses = {i: ("invalid" if not checked[i].ok else "not_run") for i in range(len(checked))}
        runnable: tuple[int, ...] = ()
    else:
        step = [
            StepCall(i, call.tool, tools[call.tool].risk_class)
            for i, call in enumerate(proposal.calls)
        ]
        projections = [project(proposed_state, pending_index=i).data for i in range(len(step))]
        answers = (
            tuple(risk_answers)
            if risk_answers is not None and len(risk_answers) == len(projections)
            else _ask_risk(guardian, projections)
        )
        tick = _lap(timings, "risk", clock, tick)
        gate = gate_step(step, answers, policy.thresholds[Condition.RISK], approved=approved)
        extra.extend(gate.reasons())
        runnable = gate.runnable
        statuses = {}
        for call in gate.calls:
            if gate.held:
                statuses[call.position] = "held"
            elif call.position not in runnable:
                statuses[call.position] = "not_approved"
                why = (refusals or {}).get(call.position)
                message = f"Call {call.position} ({call.tool}) was not approved" + (
                    f": {why}." if why else "."
                )
                feedback.append(Feedback(proposal.calls[call.position], message))
            else:
                statuses[call.position] = "not_run"

    keys = {
        i: (idempotency_keys or {}).get(i) or _key(run_id, index, i, call.tool, checked[i])
        for i, call in enumerate(proposal.calls)
    }
    keys = {i: key if checked[i].ok else None for i, key in keys.items()}
    spent_after = _spend(guardian)
    return PreparedStep(
        run_id=run_id,
        index=index,
        state=state,
        started_at=started_at,
        hash_before=hash_before,
        proposal=proposal,
        checked=checked,
        proposed_state=proposed_state,
        hash_proposed=hash_proposed,
        gate=gate,
        risk_answers=answers,
        projections=tuple(projections),
        extra=tuple(extra),
        feedback=tuple(feedback),
        statuses=statuses,
        runnable=tuple(runnable),
        keys=keys,
        steps=(step_changes,),
        timings=timings,
        risk_spend=(spent_after[0] - spent_before[0], spent_after[1] - spent_before[1]),
    )


def finish_step(
    prepared: PreparedStep,
    *,
    results: Mapping[int, tuple[str | None, str | None]],
    statuses: Mapping[int, str],
    errors: Sequence[str],
    guardian: Guardian,
    tools: Mapping[str, Tool],
    clock: Clock,
    policy: Policy,
    history: Sequence[PastTurn] = (),
    usage: Usage | None = None,
    run_started_at: datetime | None = None,
    judge: Judge | None = None,
    judge_conditions: Collection[Condition | str] = (),
    judge_deadline_seconds: float | None = None,
) -> TurnRecord:
    """The rest of the turn once the runnable calls ran: `results` maps a position to its
    (verbatim result, error), `statuses` is every call's status (the runnable ones done or
    failed, or not_run when an earlier call failed), `errors` one line per failed call. Asks
    the guardian, the judge on the band, decides, withholds outputs when integrity escalates."""
    usage = usage or Usage(turns=0)
    guardian_spent_before = _spend(guardian)
    judge_spent_before = _spend(judge)
    timings = dict(prepared.timings)
    tick = clock.monotonic()
    steps = list(prepared.steps)
    proposal, checked, gate, index = (
        prepared.proposal,
        prepared.checked,
        prepared.gate,
        prepared.index,
    )

    def state_next(current: LoopState, **change) -> LoopState:
        # Every step this turn makes is kept: the turn records them, and any version of the
        # state is rebuilt from them (and its chained hash checked).
        step = state_step(**change)
        steps.append(step)
        return state_apply(current, step)

    extra = list(prepared.extra)
    if errors:
        extra.append(Reason("tool_error", "fired", Outcome.ESCALATE, "; ".join(errors)[:1000]))
    calls = tuple(
        CallRecord(
            position=i,
            tool=call.tool,
            arguments=checked[i].arguments if checked[i].ok else _as_recorded(call.arguments),
            intent=call.intent,
            problems=tuple(p.message for p in checked[i].problems),
            declared_risk=tools[call.tool].risk_class if call.tool in tools else None,
            idempotency_key=prepared.keys[i],
            status=statuses.get(i, "not_run"),
            result=results.get(i, (None, None))[0],
            error=results.get(i, (None, None))[1],
        )
        for i, call in enumerate(proposal.calls)
    )
    ran = [c for c in calls if c.status in ("done", "failed")]
    summary = _summary(index, proposal, calls, gate, prepared.proposed_state.last_results)
    held_step = prepared.held
    after = state_next(
        prepared.proposed_state,
        add_history=(HistoryItem(index, summary),),
        last_results=tuple(c.result if c.result is not None else f"error: {c.error}" for c in ran)
        if ran
        else (),
        pending=prepared.proposed_state.pending if held_step else (),
    )

    # A held step changed nothing in the world: the gate's reasons decide, the guardian is
    # not asked again until the step has run.
    guardian_projection = None if held_step else project(after).data
    answers = {} if guardian_projection is None else _ask_guardian(guardian, guardian_projection)
    tick = _lap(timings, "guardian", clock, tick)
    judged: dict[str, object] = {}
    asked = to_judge(answers, policy, judge_conditions) if judge is not None else ()
    if asked and guardian_projection is not None:
        judged = ask_judge(
            judge, guardian_projection, asked, clock=clock, deadline_seconds=judge_deadline_seconds
        )
        tick = _lap(timings, "judge", clock, tick)

    tokens_now, cost_now = _spend(guardian)
    guardian_tokens = tokens_now - guardian_spent_before[0] + prepared.risk_spend[0]
    guardian_cost = cost_now - guardian_spent_before[1] + prepared.risk_spend[1]
    judge_tokens_now, judge_cost_now = _spend(judge)
    guardian_tokens += judge_tokens_now - judge_spent_before[0]
    guardian_cost += judge_cost_now - judge_spent_before[1]
    if run_started_at is not None:
        wall_seconds = max(0.0, (clock.now() - run_started_at).total_seconds())
    else:
        wall_seconds = usage.wall_seconds + sum(timings.values())
    spent = Usage(
        turns=usage.turns + 1,
        tokens=usage.tokens + proposal.tokens + int(guardian_tokens),
        cost=usage.cost + proposal.cost + guardian_cost,
        wall_seconds=wall_seconds,
    )
    signatures = tuple(call_signature(c.tool, c.arguments) for c in calls)
    decision = decide_judged(
        answers,
        judged,
        policy,
        history,
        spent,
        calls=signatures,
        conditions=() if held_step else POST_EXECUTION_CONDITIONS,
        extra_reasons=tuple(extra),
        replans=prepared.state.replans,
    )
    _lap(timings, "decide", clock, tick)

    quarantined = Condition.INTEGRITY.value in {
        r.source for r in decision.reasons if r.outcome == Outcome.ESCALATE
    }
    if quarantined and ran:
        # The verbatim outputs stay in the record for the reviewer; the actor sees none.
        withheld = tuple(f"[output of {c.tool} withheld: integrity check]" for c in ran)
        after = state_next(after, last_results=withheld)
    if decision.outcome == Outcome.REPLAN:
        after = state_next(after, replanned=True)

    return TurnRecord(
        run_id=prepared.run_id,
        index=index,
        started_at=prepared.started_at,
        state_hash_before=prepared.hash_before,
        state_hash_proposed=prepared.hash_proposed,
        state_hash_after=state_hash(after),
        proposal=proposal,
        calls=calls,
        gate=gate,
        risk_answers=prepared.risk_answers,
        answers=answers,
        decision=decision,
        thresholds={c.value: t.as_dict() for c, t in policy.thresholds.items()},
        question_set_version=str(
            getattr(guardian, "question_set_version", policy.question_set_version)
        ),
        guardian_model_version=str(getattr(guardian, "model_version", "unknown")),
        feedback=prepared.feedback,
        quarantined=quarantined,
        final_answer=proposal.message if decision.outcome == Outcome.STOP_SUCCESS else None,
        usage=spent,
        state_after=after,
        timings=timings,
        guardian_projection=guardian_projection,
        risk_projections=prepared.projections,
        state_steps=tuple(steps),
        judged=judged,
        judge_model_version=str(getattr(judge, "model_version", "unknown")) if judged else "",
    )


def run_turn(
    state: LoopState,
    *,
    run_id: str,
    index: int,
    actor: Actor,
    guardian: Guardian,
    tools: Mapping[str, Tool],
    clock: Clock,
    policy: Policy,
    history: Sequence[PastTurn] = (),
    usage: Usage | None = None,
    feedback: tuple[Feedback, ...] = (),
    proposal: Proposal | None = None,
    approved: frozenset[int] | None = None,
    idempotency_keys: Mapping[int, str] | None = None,
    run_started_at: datetime | None = None,
    refusals: Mapping[int, str] | None = None,
    judge: Judge | None = None,
    judge_conditions: Collection[Condition | str] = (),
    judge_deadline_seconds: float | None = None,
    before_calls: Callable[[PreparedStep], None] | None = None,
) -> TurnRecord:
    """Run turn `index` of run `run_id` and return its record: prepare the step, run its
    runnable calls here, finish it.

    `usage` is what earlier turns spent. A given `proposal` is used instead of asking the
    actor: to retry a turn whose proposal was already recorded, or to resume a held step
    after a person's verdict, with the approved call positions as `approved` (exactly those
    calls run). `idempotency_keys` gives a resumed call the key it first ran under (a call
    a person says did not go through, re-run at their explicit request), so a tool that did
    see it dedupes it.

    Budgets count everything the run spent: the actor's tokens and cost (in its proposal),
    the guardian's (its `spend`, when it keeps one), and wall time since `run_started_at`
    (actor latency, queueing and waiting on people included), or, without it, the time of
    the turns themselves.

    `refusals` says why a call a person approved may not run after all (its approval expired,
    was used, or no longer matches the call): it is left out of `approved` by the caller, so
    it is "not_approved", and the actor is told why.

    `judge`, when given, is asked each of `judge_conditions` whose guardian answer is in the
    uncertain band (engine/judge.py): a confident judge answer settles it, anything else
    leaves it to a person. It is never asked about risk, nor on a step held at the gate.

    `before_calls`, when given, sees the prepared step (its gate's classes) before any call
    runs: the shell decides there how durably each call must be recorded.
    """
    timings: dict[str, float] = {}
    tick = clock.monotonic()
    if proposal is None:
        proposal = actor.propose(project(state).data, feedback)
    _lap(timings, "propose", clock, tick)
    prepared = prepare_step(
        state,
        run_id=run_id,
        index=index,
        guardian=guardian,
        tools=tools,
        clock=clock,
        policy=policy,
        proposal=proposal,
        approved=approved,
        idempotency_keys=idempotency_keys,
        refusals=refusals,
        timings=timings,
    )
    if before_calls is not None:
        before_calls(prepared)
    tick = clock.monotonic()
    statuses = dict(prepared.statuses)
    results, errors = _execute(
        proposal, prepared.checked, prepared.runnable, tools, prepared.keys, statuses
    )
    timings = dict(prepared.timings)
    _lap(timings, "execute", clock, tick)
    return finish_step(
        replace(prepared, timings=timings),
        results=results,
        statuses=statuses,
        errors=errors,
        guardian=guardian,
        tools=tools,
        clock=clock,
        policy=policy,
        history=history,
        usage=usage,
        run_started_at=run_started_at,
        judge=judge,
        judge_conditions=judge_conditions,
        judge_deadline_seconds=judge_deadline_seconds,
    )


def _spend(guardian: Guardian | Judge | None) -> tuple[float, float]:
    """(tokens, cost) the guardian reports having spent so far; (0, 0) if it keeps no count."""
    spend = getattr(guardian, "spend", None)
    tokens, cost = getattr(spend, "tokens", 0), getattr(spend, "cost", 0.0)
    ok = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (tokens, cost))
    return (tokens, cost) if ok else (0, 0.0)


def _execute(proposal, checked, runnable, tools, keys, statuses):
    """Run the runnable calls in order, each with its idempotency key; a raising tool stops
    the rest of the step (a StepStopped goes through to the caller). Returns
    ({position: (result, error)}, [error summaries])."""
    results: dict[int, tuple[str | None, str | None]] = {}
    errors: list[str] = []
    for position in runnable:
        if errors:
            statuses[position] = "not_run"
            continue
        call, check = proposal.calls[position], checked[position]
        try:
            output = tools[call.tool].func(check.arguments, idempotency_key=keys[position])
        except StepStopped:
            raise  # the run may no longer act: nothing more of this step runs or is decided
        except Exception as exc:  # a tool's failure is recorded and escalates; never swallowed
            statuses[position] = "failed"
            message = f"{type(exc).__name__}: {exc}"[:1000]
            results[position] = (None, message)
            errors.append(f"call {position} {call.tool} failed: {message}")
            continue
        statuses[position] = "done"
        results[position] = (output if isinstance(output, str) else _as_text(output), None)
    return results, errors


def _ask_risk(guardian: Guardian, projections: list[Mapping]) -> tuple[object, ...]:
    try:
        answers = tuple(guardian.assess_risk(projections))
    except Exception as exc:  # timeout or error: every call's risk is unknown, so held
        return tuple(Malformed(f"guardian failed: {type(exc).__name__}") for _ in projections)
    if len(answers) != len(projections):
        return tuple(
            Malformed("guardian gave the wrong number of risk answers") for _ in projections
        )
    return answers


def _ask_guardian(guardian: Guardian, projection: Mapping) -> dict:
    try:
        raw = dict(guardian.answer(projection, POST_EXECUTION_CONDITIONS))
    except Exception as exc:  # timeout or error: every answer is malformed, so the turn escalates
        failure = Malformed(f"guardian failed: {type(exc).__name__}: {exc}"[:300])
        return {c.value: failure for c in POST_EXECUTION_CONDITIONS}
    return {str(key): value for key, value in raw.items()}


def _invalid_reason(invalid: list[CheckedCall]) -> Reason:
    detail = "invalid calls, nothing in the step ran: " + "; ".join(c.feedback() for c in invalid)
    # Not a breaking condition: the actor is told every problem and proposes again.
    return Reason("validation", "fired", Outcome.CONTINUE, detail[:1000])


def _key(run_id, index, position, tool, check: CheckedCall) -> str | None:
    if not check.ok:
        return None
    return idempotency_key(
        run_id=run_id, turn_index=index, position=position, tool=tool, arguments=check.arguments
    )


def _summary(
    index: int, proposal: Proposal, calls, gate: GateDecision | None, before: tuple[str, ...]
) -> str:
    if not calls:
        return f"turn {index}: no tool call; said: {proposal.message[:200]}"
    parts = [
        f"{c.tool} {c.status} {SAME_RESULT}"
        if c.status == "done" and c.result is not None and c.result in before
        else f"{c.tool} {c.status}"
        for c in calls
    ]
    prefix = "step held for approval: " if gate and gate.held else ""
    return f"turn {index}: {prefix}{', '.join(parts)}"


def _as_recorded(arguments: object) -> object:
    try:
        canonical_json(arguments)
    except (TypeError, ValueError):
        return repr(arguments)
    return arguments


def _as_text(output: object) -> str:
    try:
        return canonical_json(output)
    except (TypeError, ValueError):
        return repr(output)


def _lap(timings: dict, name: str, clock: Clock, since: float) -> float:
    now = clock.monotonic()
    timings[name] = max(0.0, now - since)
    return now
