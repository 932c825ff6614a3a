"""A deterministic actor and guardian that play a scenario: the actor for demos and offline
runs, the guardian for tests only (the demo's runs are judged by the real local guardian).

A scenario is a plain dict (the caller loads it from JSON):

    {"name": "refund_waits_for_approval", "goal": "...", "acceptance_criteria": ["..."],
     "tools": ["read_order", "issue_refund"], "budgets": {"max_turns": 6},
     "actor": {
       "turns": [{"calls": [{"tool": "read_order", "arguments": {"order_id": "ord_4472"},
                             "intent": "look up the order"}],
                  "message": "", "tokens": 120}],
       "after_feedback": {"calls": [], "message": "I will not issue that refund."}},
     "guardian": {
       "model_version": "scripted-1",
       "risk": {"issue_refund": {"read_only": 0, "reversible_write": 0,
                                 "irreversible": 0.97, "regulated": 0.03}},
       "turns": [{"integrity": 0.01, "infeasible": 0.02, "goal_reached": 0.05,
                  "drift": {"0": 0, "1": 0, "2": 0.1, "3": 0.3, "4": 0.6},
                  "stagnation": 0.05}],
       "default": {"integrity": 0.01, ...},
       "delay_seconds": 0}}

Actor turns are steps: `calls` (each `tool`; `arguments`, default {}, any JSON passed on as is
so a scenario can show validation failing; optional `intent` and `call_id`), `message`,
`tokens`, `cost`, and `user_messages` (what the user said before the step, each a string: the
history records "user said: …"). Guardian entries map condition names to raw answers, passed
through untouched, so a scenario can answer null, 1.7 or a broken distribution on purpose; the
string "timeout" means "sleep past the deadline". `delay_seconds` sleeps before every answer.

Which step or answers: at turn n (n = the newest history item's turn, plus one) the actor
plays `actor.turns[n]`, or `after_feedback` when it is told about earlier calls, and proposes
nothing with "(script ended)" past the end. The guardian is asked after the turn's
history item is written, so it answers from `guardian.turns[n - 1]`; a condition that entry
does not name comes from `default`, then from CALM_ANSWERS. Once a person has rejected a step,
the guardian answers from `after_rejection` instead of `turns`, when the script has one: a
script cannot know in advance which way a reviewer decides. Risk comes from `risk[tool]`, or
SAFE_RISK for a tool the script does not name.

Both adapters are stateless: a run is advanced by different worker processes and a crashed
turn is retried, so the script position comes from the projection (`turn_number`), never from
a counter kept between calls.
"""

import copy
import time
from collections.abc import Callable, Mapping, Sequence

from jsonschema import Draft202012Validator

from guardian_core.adapters.pricing import NOTHING, Spend
from guardian_core.adapters.timing import ask_concurrently
from guardian_core.engine.conditions import Condition
from guardian_core.engine.loop import Feedback, Proposal, ProposedCall
from guardian_core.engine.state import REJECTED_BY_REVIEWER

DEFAULT_MODEL_VERSION = "scripted-1"
# A script answers without reading any question text, so a run's policy wording is not what it
# asks; the log records this fixed version instead.
QUESTION_SET_VERSION = "scripted-1"
DEFAULT_DEADLINE_SECONDS = 2.0
TIMEOUT_ANSWER = "timeout"
# How far past the deadline a "timeout" answer sleeps: long enough to be late for sure, short
# enough that the abandoned thread does not hold up the interpreter's exit for long.
TIMEOUT_OVERSHOOT_SECONDS = 2.0
SCRIPT_ENDED = "(script ended)"

# What an unscripted turn or tool gets: a calm guardian and a read-only call.
CALM_ANSWERS: dict[str, object] = {
    "integrity": 0.01,
    "infeasible": 0.02,
    "goal_reached": 0.05,
    "drift": {"0": 0.0, "1": 0.0, "2": 0.05, "3": 0.25, "4": 0.7},
    "stagnation": 0.05,
}
SAFE_RISK: dict[str, float] = {
    "read_only": 0.97,
    "reversible_write": 0.03,
    "irreversible": 0.0,
    "regulated": 0.0,
}

_STEP = {
    "type": "object",
    "properties": {
        "calls": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "tool": {"type": "string", "minLength": 1},
                    "arguments": {},  # anything: a scenario may show invalid arguments
                    "intent": {"type": "string"},
                    "call_id": {"type": "string"},
                },
                "required": ["tool"],
                "additionalProperties": False,
            },
        },
        "message": {"type": "string"},
        "tokens": {"type": "integer", "minimum": 0},
        "cost": {"type": "number", "minimum": 0},
        # What the user said before this step (the script plays both sides of a chat).
        "user_messages": {"type": "array", "items": {"type": "string", "minLength": 1}},
    },
    "required": ["calls"],
    "additionalProperties": False,
}
# Answers themselves may be anything (malformed on purpose), but a misspelt condition is a bug.
_ANSWERS = {
    "type": "object",
    "propertyNames": {"enum": sorted(CALM_ANSWERS)},
}
SCENARIO_SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9][a-z0-9_-]*$"},
        "description": {"type": "string"},
        "goal": {"type": "string", "minLength": 1},
        "acceptance_criteria": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "tools": {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "uniqueItems": True,
        },
        "budgets": {
            "type": "object",
            "properties": {
                "max_turns": {"type": "integer", "minimum": 1},
                "max_tokens": {"type": "integer", "minimum": 1},
                "max_cost": {"type": "number", "exclusiveMinimum": 0},
                "max_wall_seconds": {"type": "number", "exclusiveMinimum": 0},
            },
            "additionalProperties": False,
        },
        "actor": {
            "type": "object",
            "properties": {"turns": {"type": "array", "items": _STEP}, "after_feedback": _STEP},
            "required": ["turns"],
            "additionalProperties": False,
        },
        "guardian": {
            "type": "object",
            "properties": {
                "model_version": {"type": "string", "minLength": 1},
                "risk": {"type": "object"},
                "turns": {"type": "array", "items": _ANSWERS},
                "default": _ANSWERS,
                "after_rejection": _ANSWERS,
                "delay_seconds": {"type": "number", "minimum": 0},
            },
            "additionalProperties": False,
        },
    },
    # No guardian script means a calm guardian (or the caller pairs the actor with another one).
    "required": ["name", "goal", "actor"],
    "additionalProperties": False,
}
_VALIDATOR = Draft202012Validator(SCENARIO_SCHEMA)


def scenario_problems(scenario: object) -> list[str]:
    """Every problem with `scenario`, each as "where: what", sorted by where; [] if valid."""
    errors = sorted(_VALIDATOR.iter_errors(scenario), key=_error_order)
    return [f"{_where(error.absolute_path)}: {error.message}" for error in errors]


class ScenarioError(ValueError):
    """A scenario that does not match SCENARIO_SCHEMA; the message lists every problem."""


def check_scenario(scenario: object) -> None:
    """Raise ScenarioError naming every problem, so a bad scenario file fails with all of them."""
    problems = scenario_problems(scenario)
    if problems:
        name = scenario.get("name", "?") if isinstance(scenario, Mapping) else "?"
        raise ScenarioError(f"scenario {name!r} is invalid:\n  " + "\n  ".join(problems))


def turn_number(projection: Mapping) -> int:
    """How many turns have completed: the index of the newest history item, plus one. (A
    verdict adds an item to the turn it was given on, so items are not counted; a projection
    that dropped old items still ends with the newest one.)"""
    history = projection.get("history") or ()
    if not history:
        truncated = projection.get("truncated") or {}
        return int(truncated.get("history_dropped", 0))
    return int(history[-1]["turn"]) + 1


def rejected_by_reviewer(projection: Mapping) -> bool:
    """Whether a person rejected a step earlier in the history this projection shows."""
    return any(
        REJECTED_BY_REVIEWER in str(item.get("summary", ""))
        for item in projection.get("history") or ()
    )


class ScriptedActor:
    """Proposes `actor.turns[n]` at turn n, or `after_feedback` when told about earlier calls."""

    def __init__(self, scenario: Mapping, *, checked: bool = False) -> None:
        if not checked:  # a run's scenario is checked once, when the run starts
            check_scenario(scenario)
        self._actor = scenario["actor"]

    def propose(self, projection: Mapping, feedback: tuple[Feedback, ...] = ()) -> Proposal:
        """The scripted step for this projection's turn; "(script ended)" past the end."""
        turns = self._actor["turns"]
        n = turn_number(projection)
        if feedback and "after_feedback" in self._actor:
            step = self._actor["after_feedback"]
        elif n < len(turns):
            step = turns[n]
        else:
            return Proposal(calls=(), message=SCRIPT_ENDED)
        return _proposal(step)


class ScriptedGuardian:
    """Answers from the scenario's guardian script, under the same deadline as a real one.

    It takes no question text (`takes_question_text` is False) and spends nothing."""

    takes_question_text = False
    question_set_version: str = QUESTION_SET_VERSION
    spend: Spend = NOTHING

    def __init__(
        self,
        scenario: Mapping,
        *,
        deadline_seconds: float = DEFAULT_DEADLINE_SECONDS,
        checked: bool = False,
    ) -> None:
        if not checked:  # a run's scenario is checked once, when the run starts
            check_scenario(scenario)
        script = scenario.get("guardian", {})
        self.model_version: str = script.get("model_version", DEFAULT_MODEL_VERSION)
        self.deadline_seconds = deadline_seconds
        self._risk: Mapping = script.get("risk", {})
        self._turns: Sequence[Mapping] = script.get("turns", [])
        self._default: Mapping = script.get("default", {})
        self._after_rejection: Mapping | None = script.get("after_rejection")
        self._delay = float(script.get("delay_seconds", 0))

    def assess_risk(self, projections: Sequence[Mapping]) -> list[object]:
        """`risk[tool]` for each projection's pending call, or SAFE_RISK for an unscripted tool."""
        raws = {}
        for i, projection in enumerate(projections):
            tool = (projection.get("pending_proposal") or {}).get("tool")
            raws[i] = self._risk.get(tool, SAFE_RISK)
        answers = self._ask(raws)
        return [answers[i] for i in range(len(projections))]

    def answer(self, projection: Mapping, conditions: Sequence[Condition]) -> dict[str, object]:
        """The scripted answers for the turn that just ended (the projection already holds its
        history item, so turn n's answers are `turns[n - 1]`)."""
        entry = self._entry(turn_number(projection) - 1)
        if self._after_rejection is not None and rejected_by_reviewer(projection):
            entry = self._after_rejection
        raws: dict[str, object] = {}
        for condition in conditions:
            key = str(condition)
            # A key missing from the turn's entry falls back to `default`, then to calm; an
            # explicit null is kept (it is a malformed answer on purpose).
            for source in (entry, self._default, CALM_ANSWERS):
                if key in source:
                    raws[key] = source[key]
                    break
            else:
                raws[key] = None  # a condition with no calm answer: risk
        return self._ask(raws)

    def _ask(self, raws: dict) -> dict:
        """The answers under the deadline. A script with no delay and no "timeout" answers at
        once, so it is answered here without threads (a real guardian always goes through
        ask_concurrently; this one only plays a script)."""
        if self._delay <= 0 and not any(raw == TIMEOUT_ANSWER for raw in raws.values()):
            return {key: copy.deepcopy(raw) for key, raw in raws.items()}
        questions = {key: self._replying(raw) for key, raw in raws.items()}
        return ask_concurrently(questions, deadline_seconds=self.deadline_seconds)

    def _entry(self, index: int) -> Mapping:
        return self._turns[index] if 0 <= index < len(self._turns) else {}

    def _replying(self, raw: object) -> Callable[[], object]:
        """A question that sleeps as scripted, then returns a private copy of `raw`."""

        def reply() -> object:
            if self._delay > 0:
                time.sleep(self._delay)
            if raw == TIMEOUT_ANSWER:
                time.sleep(self.deadline_seconds + TIMEOUT_OVERSHOOT_SECONDS)
            return copy.deepcopy(raw)  # callers may keep or alter answers; the script stays

        return reply


def _proposal(step: Mapping) -> Proposal:
    calls = tuple(
        ProposedCall(
            tool=call["tool"],
            arguments=copy.deepcopy(call.get("arguments", {})),
            intent=call.get("intent", ""),
            call_id=call.get("call_id", ""),
        )
        for call in step.get("calls", ())
    )
    return Proposal(
        calls=calls,
        message=step.get("message", ""),
        tokens=int(step.get("tokens", 0)),
        cost=float(step.get("cost", 0.0)),
        user_messages=tuple(step.get("user_messages", ())),
    )


def _error_order(error) -> tuple:
    # List positions sort as numbers, so turns[2] comes before turns[10].
    path = [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in error.absolute_path]
    return (path, error.message)


def _where(path) -> str:
    where = "scenario"
    for part in path:
        where += f"[{part}]" if isinstance(part, int) else f".{part}"
    return where
