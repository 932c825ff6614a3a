"""Scripted ports for engine tests: an actor, a guardian, a clock and tools that keep a ledger.

A script that runs out fails loudly with its own message, so no test can pass or fail because
a fake had too few answers (the reference article's "right verdict, wrong cause").
"""

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from guardian_core.engine.conditions import Condition, RiskClass
from guardian_core.engine.loop import Proposal, ProposedCall
from guardian_core.engine.tools import Tool

SAFE = {"read_only": 0.97, "reversible_write": 0.03, "irreversible": 0.0, "regulated": 0.0}
DRIFT_OK = {"0": 0.0, "1": 0.0, "2": 0.1, "3": 0.4, "4": 0.5}
CALM = {
    "integrity": 0.01,
    "infeasible": 0.05,
    "goal_reached": 0.1,
    "drift": DRIFT_OK,
    "stagnation": 0.1,
}


class ScriptRanOut(AssertionError):
    pass


@dataclass
class ScriptedActor:
    proposals: list[Proposal]
    seen: list[tuple[Mapping, tuple[str, ...]]] = field(default_factory=list)

    def propose(self, projection: Mapping, feedback: tuple[str, ...]) -> Proposal:
        self.seen.append((projection, feedback))
        if not self.proposals:
            raise ScriptRanOut(f"the actor's script ran out at proposal {len(self.seen)}")
        return self.proposals.pop(0)


@dataclass
class ScriptedGuardian:
    """Risk answers by tool name (SAFE by default); post-execution answers turn by turn."""

    answers: list[Mapping] = field(default_factory=list)
    risk: Mapping[str, object] = field(default_factory=dict)
    fail_answer: Exception | None = None
    fail_risk: Exception | None = None
    model_version: str = "scripted-1"
    asked: list[Mapping] = field(default_factory=list)

    def assess_risk(self, projections: Sequence[Mapping]) -> list[object]:
        if self.fail_risk:
            raise self.fail_risk
        return [self.risk.get(p["pending_proposal"]["tool"], SAFE) for p in projections]

    def answer(self, projection: Mapping, conditions: Sequence[Condition]) -> Mapping:
        self.asked.append(projection)
        if self.fail_answer:
            raise self.fail_answer
        if not self.answers:
            raise ScriptRanOut(f"the guardian's script ran out at answer {len(self.asked)}")
        return self.answers.pop(0)


class FakeClock:
    def __init__(self) -> None:
        self.start = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
        self.ticks = 0

    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.ticks)

    def monotonic(self) -> float:
        self.ticks += 1
        return float(self.ticks) / 100


@dataclass
class Ledger:
    """What the tools really did, in order: (tool, arguments, idempotency key)."""

    entries: list[tuple[str, dict, str]] = field(default_factory=list)

    def tool(self, name: str, risk: RiskClass, schema: Mapping, *, output=None, error=None):
        def run(arguments: dict, *, idempotency_key: str):
            self.entries.append((name, arguments, idempotency_key))
            if error is not None:
                raise error
            return output if output is not None else f"{name} ok"

        return Tool(name=name, description=f"{name} tool", schema=schema, risk_class=risk, func=run)

    def ran(self, name: str) -> list[dict]:
        return [arguments for tool, arguments, _ in self.entries if tool == name]


ORDER_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}},
    "required": ["order_id"],
}
REFUND_SCHEMA = {
    "type": "object",
    "properties": {"order_id": {"type": "string"}, "amount": {"type": "number"}},
    "required": ["order_id", "amount"],
}


def desk(ledger: Ledger, **overrides) -> dict[str, Tool]:
    """The refund desk: read an order (read-only), issue a refund (irreversible)."""
    tools = {
        "read_order": ledger.tool(
            "read_order",
            RiskClass.READ_ONLY,
            ORDER_SCHEMA,
            output='{"order_id": "ord_4472", "total": 49.9}',
        ),
        "issue_refund": ledger.tool("issue_refund", RiskClass.IRREVERSIBLE, REFUND_SCHEMA),
    }
    tools.update(overrides)
    return tools


def call(tool: str, **arguments) -> ProposedCall:
    import json

    return ProposedCall(tool=tool, arguments=json.dumps(arguments), intent=f"use {tool}")


def step(*calls: ProposedCall, message: str = "", tokens: int = 10) -> Proposal:
    return Proposal(calls=tuple(calls), message=message, tokens=tokens)
