"""What Guardian answers, as small frozen dataclasses read from its JSON (the raw dict kept)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# Outcomes of a decided step, in the protocol's words.
CONTINUE, REPLAN, ESCALATE = "continue", "replan", "escalate"
STOP_SUCCESS, STOP_FAILURE = "stop_success", "stop_failure"


@dataclass(frozen=True)
class Tool:
    """A tool the run may call, defined by the caller: Guardian validates every call against
    `parameters` (a JSON Schema for the arguments object) and holds a step with a call whose
    `risk_class` is irreversible or regulated until a person approves it."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    risk_class: str = "read_only"  # read_only | reversible_write | irreversible | regulated

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
            "risk_class": self.risk_class,
        }


@dataclass(frozen=True)
class Call:
    """One call the model proposes: the tool's name and its arguments (an object, or the JSON
    text a model sends); `call_id` is the model's own id, echoed back."""

    tool: str
    arguments: Any = field(default_factory=dict)
    call_id: str = ""
    intent: str = ""

    def as_json(self) -> dict:
        return {
            "tool": self.tool,
            "arguments": self.arguments,
            "call_id": self.call_id,
            "intent": self.intent,
        }


@dataclass(frozen=True)
class UserMessage:
    """What the user said to the agent since its last step (a confirmation, a missing
    detail), sent with the next step: Guardian writes it to the run's history as
    "user said: <text>" before the step's calls, so the guardian reads the conversation."""

    text: str

    def as_json(self) -> dict:
        return {"text": self.text}


@dataclass(frozen=True)
class Result:
    """What one call that was allowed to run returned (`result`, verbatim), or its `error`."""

    position: int
    result: str | None = None
    error: str | None = None

    def as_json(self) -> dict:
        if self.error is not None:
            return {"position": self.position, "error": self.error}
        return {"position": self.position, "result": "" if self.result is None else self.result}


@dataclass(frozen=True)
class GateCall:
    """Guardian's answer for one call: `run` (under `idempotency_key`, with exactly these
    `arguments`: a reviewer may have edited them), `invalid` (`problems`), `held` (a person
    decides first) or `not_approved`; `message` says why to the model when it does not run."""

    position: int
    call_id: str
    tool: str
    status: str
    arguments: Any
    idempotency_key: str | None
    risk_class: str | None
    problems: tuple[str, ...]
    message: str

    @property
    def may_run(self) -> bool:
        return self.status == "run"

    @classmethod
    def from_json(cls, data: Mapping) -> GateCall:
        return cls(
            position=data["position"],
            call_id=data.get("call_id", ""),
            tool=data["tool"],
            status=data["status"],
            arguments=data.get("arguments"),
            idempotency_key=data.get("idempotency_key"),
            risk_class=data.get("risk_class"),
            problems=tuple(data.get("problems", ())),
            message=data.get("message", ""),
        )


@dataclass(frozen=True)
class Escalation:
    """A person's turn: `url` is the reviewer's page, `wait_url` the long poll."""

    id: int
    kind: str
    summary: str
    url: str
    wait_url: str

    @classmethod
    def from_json(cls, data: Mapping) -> Escalation:
        return cls(
            id=data["id"],
            kind=data.get("kind", ""),
            summary=data.get("summary", ""),
            url=data.get("url", ""),
            wait_url=data.get("wait_url", ""),
        )


@dataclass(frozen=True)
class Reason:
    source: str
    band: str
    outcome: str
    detail: str
    words: str = ""

    @classmethod
    def from_json(cls, data: Mapping) -> Reason:
        return cls(
            source=data.get("source", ""),
            band=data.get("band", ""),
            outcome=data.get("outcome", ""),
            detail=data.get("detail", ""),
            words=data.get("words", ""),
        )


@dataclass(frozen=True)
class Feedback:
    """What to tell the model about one of its calls (rejected, invalid, not approved, an
    output withheld)."""

    call_id: str
    tool: str
    message: str

    @classmethod
    def from_json(cls, data: Mapping) -> Feedback:
        return cls(data.get("call_id", ""), data.get("tool", ""), data.get("message", ""))


@dataclass(frozen=True)
class Decision:
    """The policy's one outcome for a step, after its results (or at once, for a step that ran
    nothing). `may_continue` says whether the loop may propose its next step; `results` are the
    outputs the model may see (None where one is withheld until a person clears it)."""

    step: int
    outcome: str
    may_continue: bool
    run_status: str
    summary: str
    reasons: tuple[Reason, ...]
    feedback: tuple[Feedback, ...]
    quarantined: bool
    results: tuple[tuple[int, str | None], ...]
    escalation: Escalation | None
    final_answer: str | None
    raw: Mapping = field(repr=False, compare=False, default_factory=dict)

    @property
    def stopped(self) -> bool:
        return self.outcome in (STOP_SUCCESS, STOP_FAILURE) or self.run_status in (
            "succeeded",
            "failed",
            "cancelled",
        )

    @classmethod
    def from_json(cls, data: Mapping) -> Decision:
        escalation = data.get("escalation")
        return cls(
            step=data["step"],
            outcome=data["outcome"],
            may_continue=bool(data.get("may_continue")),
            run_status=data.get("run_status", ""),
            summary=data.get("summary", ""),
            reasons=tuple(Reason.from_json(r) for r in data.get("reasons", ())),
            feedback=tuple(Feedback.from_json(f) for f in data.get("feedback", ())),
            quarantined=bool(data.get("quarantined")),
            results=tuple((r["position"], r.get("result")) for r in data.get("results", ())),
            escalation=Escalation.from_json(escalation) if escalation else None,
            final_answer=data.get("final_answer"),
            raw=data,
        )


@dataclass(frozen=True)
class Gate:
    """Guardian's answer before a step runs. `status` is `run` (the `runnable` calls may run:
    run them, then report with Run.after), `held` (a person decides: Run.wait), or `decided`
    (nothing is to run: the step was invalid, or proposed no call; `decision` is its outcome)."""

    step: int
    status: str
    calls: tuple[GateCall, ...]
    escalation: Escalation | None
    decision: Decision | None
    raw: Mapping = field(repr=False, compare=False, default_factory=dict)

    @property
    def held(self) -> bool:
        return self.status == "held"

    @property
    def runnable(self) -> tuple[GateCall, ...]:
        return tuple(c for c in self.calls if c.may_run)

    @property
    def not_run(self) -> tuple[GateCall, ...]:
        return tuple(c for c in self.calls if not c.may_run)

    @classmethod
    def from_json(cls, data: Mapping) -> Gate:
        escalation, decision = data.get("escalation"), data.get("decision")
        return cls(
            step=data["step"],
            status=data["status"],
            calls=tuple(GateCall.from_json(c) for c in data.get("calls", ())),
            escalation=Escalation.from_json(escalation) if escalation else None,
            decision=Decision.from_json(decision) if decision else None,
            raw=data,
        )


@dataclass(frozen=True)
class Verdict:
    """What became of an escalation. `decided` is False when the wait timed out first. An
    approved held step comes back `resumed`: the next step, with the approved calls to run."""

    escalation_id: int
    status: str  # open | resolved | expired | cancelled
    decision: str | None  # approve | reject | answer | None
    reason: str
    run_status: str
    may_continue: bool
    feedback: tuple[Feedback, ...]
    released: tuple[str, ...]
    resumed: Gate | None
    raw: Mapping = field(repr=False, compare=False, default_factory=dict)

    @property
    def decided(self) -> bool:
        return self.status != "open"

    @classmethod
    def from_json(cls, data: Mapping) -> Verdict:
        resumed = data.get("resumed")
        return cls(
            escalation_id=data["escalation"],
            status=data["status"],
            decision=data.get("decision"),
            reason=data.get("reason", ""),
            run_status=data.get("run_status", ""),
            may_continue=bool(data.get("may_continue")),
            feedback=tuple(Feedback.from_json(f) for f in data.get("feedback", ())),
            released=tuple(data.get("released") or ()),
            resumed=Gate.from_json(resumed) if resumed else None,
            raw=data,
        )


def calls_json(calls: Sequence[Call | Mapping]) -> list[dict]:
    return [c.as_json() if isinstance(c, Call) else dict(c) for c in calls]


def user_messages_json(messages: str | Sequence[UserMessage | str | Mapping]) -> list[dict]:
    """Each message as the protocol's item: a UserMessage, its text alone, or the item itself
    (a lone string is one message, not one message per character)."""
    if isinstance(messages, str):
        messages = [messages]
    return [
        m.as_json()
        if isinstance(m, UserMessage)
        else {"text": m}
        if isinstance(m, str)
        else dict(m)
        for m in messages
    ]
