"""The one seam between the ORM and the engine: rows in, frozen dataclasses out, and back."""

import json
from dataclasses import replace

from escalations.models import EscalationKind, Verdict, VerdictDecision
from guardian_core.engine.conditions import Condition, Malformed
from guardian_core.engine.loop import Feedback, Proposal, ProposedCall
from guardian_core.engine.policy import Outcome, PastTurn, Usage
from guardian_core.engine.state import (
    ANSWERED_BY_REVIEWER,
    APPROVED_BY_REVIEWER,
    CONFIRMED_DONE_BY_REVIEWER,
    NOT_DONE_PER_REVIEWER,
    REJECTED_BY_REVIEWER,
    HistoryItem,
    LoopState,
    state_from_dict,
    state_hash,
    state_rebuild,
    verdict_item,
)
from guardian_core.engine.thresholds import Budgets, Hysteresis, Policy, Threshold
from guardian_core.engine.tools import idempotency_key
from guardian_core.models import PolicyVersion
from guardian_core.policy_validation import HYSTERESIS_KEYS, hysteresis_of, limits_with_defaults
from runs.models import Run, Turn


def policy_from_version(version: PolicyVersion, *, budgets: dict) -> Policy:
    """The engine's Policy for a pinned version, with the run's own budgets.

    Raises ValueError naming every problem of a version that is invalid (one stored before
    versions were validated): the run's error then says what is wrong, not a TypeError.
    """
    problems = version.problems()
    if problems:
        raise ValueError(f"policy version {version} is invalid: " + "; ".join(problems))
    thresholds = {
        Condition(name): Threshold(
            c_stop=values["c_stop"], c_cont=values["c_cont"], delta=values["delta"]
        )
        for name, values in version.thresholds.items()
    }
    limits = version.limits or {}
    resolved = hysteresis_of(limits)
    return Policy(
        thresholds=thresholds,
        question_set_version=version.question_set_version,
        **limits_with_defaults(limits),
        budgets=Budgets(**{key: budgets[key] for key in budgets if key in _BUDGET_KEYS}),
        # Only a condition the version names a window or count for: a version stored before
        # them gives the engine exactly the Policy it always had.
        hysteresis={
            Condition(condition): Hysteresis(*resolved[condition])
            for condition, keys in HYSTERESIS_KEYS.items()
            if any(key in limits for key in keys)
        },
    )


_BUDGET_KEYS = ("max_turns", "max_tokens", "max_cost", "max_wall_seconds")


def state_to_json(state: LoopState) -> dict:
    return state.to_dict()


def state_from_json(data: dict) -> LoopState:
    return state_from_dict(data)


def initial_state(run: Run) -> LoopState:
    return LoopState(goal=run.goal, acceptance_criteria=tuple(run.acceptance_criteria))


def run_state(run: Run) -> LoopState:
    """The run's current compact state: what its last turn left, or its first version."""
    return state_from_dict(run.state) if run.state else initial_state(run)


def turn_state(turn: Turn) -> LoopState:
    """The state after `turn`, rebuilt from the run's start and the steps of every turn up to
    it (for the auditors and replay: O(turns)); its hash is the one the turn stored, or
    TurnStateMismatch says the record was altered."""
    steps = (
        Turn.objects.filter(run_id=turn.run_id, index__lte=turn.index)
        .order_by("index")
        .values_list("steps", "state_hash", "index")
    )
    state = initial_state(turn.run)
    for turn_steps, stored_hash, index in steps:
        state = state_rebuild(state, turn_steps)
        if any(step.get("migrated") for step in turn_steps):
            # Recorded before steps were: its hash was made under the old scheme, and the
            # chain of later turns continues from it.
            state = replace(state, hash=stored_hash)
        elif state_hash(state) != stored_hash:
            raise TurnStateMismatch(f"turn {index}: its steps do not give its stored hash")
    return state


class TurnStateMismatch(ValueError):
    """A turn's recorded steps do not rebuild the hash it stored: the record was altered."""


_POLICIES: dict[tuple, Policy] = {}


def policy_for_run(run: Run) -> Policy:
    """The run's Policy: its pinned version with its own budgets, built once per process.
    Versions are immutable once a run pins them (a trigger refuses any change, and PROTECT
    keeps the row), so the version is read only the first time its id is seen."""
    key = (run.policy_version_id, json.dumps(run.budgets, sort_keys=True))
    policy = _POLICIES.get(key)
    if policy is None:
        if len(_POLICIES) > 1024:
            _POLICIES.clear()
        policy = _POLICIES[key] = policy_from_version(run.policy_version, budgets=run.budgets)
    return policy


def forget_policies() -> None:
    """Drop the per-process policies (tests, whose rolled-back ids can come back)."""
    _POLICIES.clear()


def proposal_to_json(proposal: Proposal) -> dict:
    data = {
        "calls": [_call_to_json(call) for call in proposal.calls],
        "message": proposal.message,
        "tokens": proposal.tokens,
        "cost": proposal.cost,
    }
    # Only when the user spoke: every proposal recorded before user messages existed (and
    # every one without them) keeps its exact recorded form, which the decision log seals.
    if proposal.user_messages:
        data["user_messages"] = [{"text": text} for text in proposal.user_messages]
    return data


def proposal_from_json(data: dict) -> Proposal:
    return Proposal(
        calls=tuple(_call_from_json(call) for call in data.get("calls", ())),
        message=data.get("message", ""),
        tokens=data.get("tokens", 0),
        cost=data.get("cost", 0.0),
        user_messages=tuple(
            str(item.get("text", "")) if isinstance(item, dict) else str(item)
            for item in data.get("user_messages", ())
        ),
    )


def feedback_to_json(feedback: tuple[Feedback, ...]) -> list[dict]:
    return [{"call": _call_to_json(item.call), "message": item.message} for item in feedback]


def feedback_from_json(data: list) -> tuple[Feedback, ...]:
    return tuple(Feedback(_call_from_json(item["call"]), item["message"]) for item in data)


def usage_from_json(data: dict) -> Usage:
    return Usage(
        turns=data.get("turns", 0),
        tokens=data.get("tokens", 0),
        cost=data.get("cost", 0.0),
        wall_seconds=data.get("wall_seconds", 0.0),
    )


def usage_to_json(usage: Usage) -> dict:
    return {
        "turns": usage.turns,
        "tokens": usage.tokens,
        "cost": usage.cost,
        "wall_seconds": usage.wall_seconds,
    }


def past_turn(turn: Turn) -> PastTurn:
    """What the policy remembers of a decided turn (its decision and call signatures)."""
    decision = turn.decision
    return PastTurn(
        outcome=Outcome(decision.outcome),
        fired=frozenset(Condition(name) for name in decision.fired),
        calls=tuple(decision.call_signatures),
    )


def answers_to_json(answers) -> dict:
    """Raw answers as recorded: a malformed one keeps its reason and stays malformed on replay."""
    return {str(key): answer_to_json(value) for key, value in answers.items()}


def human_feedback(verdict: Verdict, proposal: Proposal, held_positions: list[int]) -> tuple:
    """Feedback for the actor after a person rejected a held step: every held call, and why."""
    if verdict.decision != VerdictDecision.REJECT:
        return ()
    return tuple(
        Feedback(proposal.calls[position], f"Rejected by a reviewer: {verdict.reason}")
        for position in held_positions
        if position < len(proposal.calls)
    )


def approval_key(
    *, run_id: int | str, held_turn_index: int, position: int, tool: str, arguments: dict
) -> str:
    """The idempotency key a held call runs under once approved: the engine's key for it on
    the turn that resumes the run (the held turn's next, which replays the held step), from
    the arguments as approved. An approval hashes this key; the worker runs the call under the
    key it derives the same way, so the two agree or the call does not run."""
    return idempotency_key(
        run_id=str(run_id),
        turn_index=held_turn_index + 1,
        position=position,
        tool=tool,
        arguments=arguments,
    )


def verdict_history(escalation, verdict: Verdict, proposal: Proposal) -> tuple[HistoryItem, ...]:
    """The history items that record a person's verdict on the escalated turn."""
    turn = escalation.turn.index
    reason = verdict.reason or ""

    def tools(positions) -> str:
        names = [proposal.calls[p].tool for p in sorted(positions) if p < len(proposal.calls)]
        return ", ".join(names) or "the step"

    held = set(escalation.reason.get("held_calls", []))
    if escalation.kind == EscalationKind.GATED_STEP:
        if verdict.decision == VerdictDecision.APPROVE:
            approved = set(verdict.approved_calls) & held
            items = []
            if approved:
                items.append(
                    verdict_item(turn, subject=tools(approved), verdict=APPROVED_BY_REVIEWER)
                )
            if held - approved:
                items.append(
                    verdict_item(
                        turn,
                        subject=tools(held - approved),
                        verdict=REJECTED_BY_REVIEWER,
                        reason=reason,
                    )
                )
            return tuple(items)
        return (
            verdict_item(turn, subject=tools(held), verdict=REJECTED_BY_REVIEWER, reason=reason),
        )
    if escalation.kind == EscalationKind.AMBIGUOUS_CALL:
        ambiguous = escalation.reason.get("ambiguous_calls", [])
        subject = tools(ambiguous) if ambiguous else "the ambiguous call"
        said = (
            CONFIRMED_DONE_BY_REVIEWER
            if verdict.decision == VerdictDecision.APPROVE
            else NOT_DONE_PER_REVIEWER
        )
        return (verdict_item(turn, subject=subject, verdict=said, reason=reason),)
    if verdict.decision == VerdictDecision.ANSWER:
        labels = ", ".join(
            f"{c}={_label_text(v)}" for c, v in sorted((verdict.answer or {}).items())
        )
        return (
            verdict_item(
                turn,
                subject=f"guardian's question ({labels})",
                verdict=ANSWERED_BY_REVIEWER,
                reason=reason,
            ),
        )
    return ()


def _label_text(label: object) -> str:
    if isinstance(label, bool):
        return "yes" if label else "no"
    return str(label)


def answer_to_json(value: object) -> object:
    if isinstance(value, Malformed):
        return {"malformed": value.reason}
    return value


def answer_from_json(value: object) -> object:
    """An answer as recorded, back: a malformed one is Malformed again, with its reason."""
    if isinstance(value, dict) and set(value) == {"malformed"}:
        return Malformed(str(value["malformed"]))
    return value


def _call_to_json(call: ProposedCall) -> dict:
    return {
        "tool": call.tool,
        "arguments": call.arguments,
        "intent": call.intent,
        "call_id": call.call_id,
    }


def _call_from_json(data: dict) -> ProposedCall:
    return ProposedCall(
        tool=data["tool"],
        arguments=data.get("arguments"),
        intent=data.get("intent", ""),
        call_id=data.get("call_id", ""),
    )
