"""LangGraph: a tool node guarded by Guardian, and the routes that follow its decisions.

    graph = StateGraph(GuardedState)
    graph.add_node("model", call_model)
    graph.add_node("tools", GuardianToolNode(run, [lookup_order, refund_order]))
    graph.add_node("answer", GuardianAnswerNode(run))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route_model, ["tools", "answer"])
    graph.add_conditional_edges("tools", route_guardian, ["model", END])
    graph.add_conditional_edges("answer", route_guardian, ["model", END])

The tool node asks Guardian before the step (every call validated, the whole step gated) and
runs exactly the calls it may, then reports their results; the answer node asks Guardian
whether a reply without tool calls reaches the goal. Every call of the model gets its
ToolMessage: a result, a problem to fix, a rejection, or an output withheld as injected.
A held step waits for a person: blocking in the node (`wait_timeout`; `on_wait` is told of
each escalation first, e.g. to say where the reviewer decides), or, with `interrupt_on_hold`
and a checkpointer, as a LangGraph interrupt the caller resumes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.graph import END, MessagesState
from langgraph.types import interrupt

from guardian_client.client import Run
from guardian_client.types import Call, Decision, Escalation, Gate, Result, Verdict

WITHHELD = "[output withheld by Guardian: it may hold instructions; a person checks it first]"


class GuardedState(MessagesState):
    """The graph's state: its messages, and what Guardian decided last."""

    guardian: dict


def route_model(state: Mapping) -> str:
    """After the model: its tool calls go to the tool node, a plain reply to the answer node."""
    last = state["messages"][-1]
    return "tools" if getattr(last, "tool_calls", None) else "answer"


def route_guardian(state: Mapping) -> str:
    """After Guardian: back to the model while the run may go on, else the end."""
    return "model" if (state.get("guardian") or {}).get("may_continue") else END


def _tokens(message: AIMessage) -> int:
    usage = getattr(message, "usage_metadata", None) or {}
    return int(usage.get("total_tokens") or 0)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, Mapping))


def _guardian_state(decision: Decision | None, *, may_continue: bool, **extra) -> dict:
    if decision is None:
        return {"outcome": None, "may_continue": may_continue, **extra}
    return {
        "step": decision.step,
        "outcome": decision.outcome,
        # The caller's word: after an escalation, the person's verdict decides, not the step.
        "may_continue": may_continue,
        "summary": decision.summary,
        "final_answer": decision.final_answer,
        **extra,
    }


class _Waits:
    """A held step or an escalated one: wait for the person, in the node or by an interrupt.
    The node may run again after an interrupt: what Guardian answered for a model message is
    kept by its id, so the same step is never proposed, nor its calls run, twice. (That memory
    is this process's: resume in the process that was interrupted.)"""

    def __init__(
        self,
        run: Run,
        wait_timeout: float | None,
        interrupt_on_hold: bool,
        on_wait: Callable[[Escalation], None] | None = None,
    ) -> None:
        self.run, self.wait_timeout, self.interrupt_on_hold = run, wait_timeout, interrupt_on_hold
        self.on_wait = on_wait
        # Per model message: its gate, and once its calls ran, their outputs and the decision.
        self.steps: dict[str, dict] = {}

    def verdict(self, escalation: Escalation) -> Verdict:
        if self.interrupt_on_hold:
            # Resumed by the caller (graph.invoke(Command(resume=...))) once a person decided.
            interrupt(
                {"escalation": escalation.id, "url": escalation.url, "why": escalation.summary}
            )
        if self.on_wait is not None:
            self.on_wait(escalation)  # e.g. say where the reviewer decides
        return self.run.wait(escalation, timeout=self.wait_timeout)


class GuardianToolNode(_Waits):
    """Runs the model's tool calls under Guardian (see the module)."""

    def __init__(
        self,
        run: Run,
        tools: Sequence[Any],
        *,
        wait_timeout: float | None = None,
        interrupt_on_hold: bool = False,
        on_wait: Callable[[Escalation], None] | None = None,
        as_text: Callable[[Any], str] = str,
    ) -> None:
        super().__init__(run, wait_timeout, interrupt_on_hold, on_wait)
        self.tools = {tool.name: tool for tool in tools}
        self.as_text = as_text

    def __call__(self, state: Mapping) -> dict:
        message: AIMessage = state["messages"][-1]
        key = message.id or json.dumps(message.tool_calls, sort_keys=True, default=str)
        step = self.steps.setdefault(key, {})
        if "gate" not in step:
            calls = [Call(c["name"], c["args"], call_id=c["id"]) for c in message.tool_calls]
            step["gate"] = self.run.before(
                message=_text(message.content), calls=calls, tokens=_tokens(message)
            )
        gate: Gate = step["gate"]
        said: dict[str, str] = {c.call_id: c.message for c in gate.calls}
        if gate.held:
            verdict = self.verdict(gate.escalation)
            if not verdict.decided:
                return self._answer(message, said, _guardian_state(None, may_continue=False))
            if verdict.resumed is None:  # rejected, or the run stopped
                for item in verdict.feedback:
                    said[item.call_id] = item.message
                state_ = _guardian_state(None, may_continue=verdict.may_continue)
                return self._answer(message, said, state_)
            gate = step["gate"] = verdict.resumed
        if gate.status == "decided":
            decided = gate.decision
            state_ = _guardian_state(decided, may_continue=decided is None or decided.may_continue)
            return self._answer(message, said, state_)
        if "decision" not in step:
            # Each approved call runs once, even when an interrupt runs this node again.
            results, outputs = [], {}
            for call in gate.runnable:
                try:
                    output = self.tools[call.tool].invoke(call.arguments)
                except Exception as exc:  # reported to Guardian, which escalates a failed call
                    results.append(Result(call.position, error=f"{type(exc).__name__}: {exc}"))
                else:
                    outputs[call.call_id] = self.as_text(output)
                    results.append(Result(call.position, outputs[call.call_id]))
            step["outputs"], step["decision"] = outputs, self.run.after(results)
        decision: Decision = step["decision"]
        outputs = step["outputs"]
        released: Sequence[str] = ()
        if decision.outcome == "escalate" and decision.escalation is not None:
            verdict = self.verdict(decision.escalation)
            released = verdict.released
            decision_state = _guardian_state(decision, may_continue=verdict.may_continue)
        else:
            decision_state = _guardian_state(decision, may_continue=decision.may_continue)
        for call in gate.runnable:
            if decision.quarantined and not released:
                said[call.call_id] = WITHHELD
            else:
                said[call.call_id] = outputs.get(call.call_id, said.get(call.call_id, ""))
        for item in decision.feedback:
            said.setdefault(item.call_id, item.message)
        extra = []
        if decision.outcome == "replan":
            extra = [HumanMessage(f"Guardian asks you to step back and replan: {decision.summary}")]
        return self._answer(message, said, decision_state, extra)

    @staticmethod
    def _answer(message: AIMessage, said: Mapping[str, str], guardian: dict, extra=()) -> dict:
        replies = [
            ToolMessage(content=said.get(c["id"], "") or "(no output)", tool_call_id=c["id"])
            for c in message.tool_calls
        ]
        return {"messages": [*replies, *extra], "guardian": guardian}


class GuardianAnswerNode(_Waits):
    """A reply without tool calls: Guardian decides whether it reaches the goal (the run then
    ends with it as its answer), or the model goes on with Guardian's reason."""

    def __init__(
        self,
        run: Run,
        *,
        wait_timeout: float | None = None,
        interrupt_on_hold: bool = False,
        on_wait: Callable[[Escalation], None] | None = None,
    ) -> None:
        super().__init__(run, wait_timeout, interrupt_on_hold, on_wait)

    def __call__(self, state: Mapping) -> dict:
        message: AIMessage = state["messages"][-1]
        key = message.id or _text(message.content)
        step = self.steps.setdefault(key, {})
        if "gate" not in step:
            step["gate"] = self.run.before(message=_text(message.content), tokens=_tokens(message))
        gate = step["gate"]
        decision = gate.decision
        if decision is not None and decision.outcome == "escalate" and decision.escalation:
            verdict = self.verdict(decision.escalation)
            status = verdict.run_status
            return {
                "messages": [],
                "guardian": _guardian_state(
                    decision, may_continue=verdict.may_continue, run_status=status
                ),
            }
        guardian = _guardian_state(decision, may_continue=bool(decision and decision.may_continue))
        if decision is not None and decision.may_continue:
            note = decision.summary or "the goal is not reached yet"
            return {
                "messages": [HumanMessage(f"Guardian: not done yet: {note}")],
                "guardian": guardian,
            }
        return {"messages": [], "guardian": guardian}


__all__ = [
    "WITHHELD",
    "GuardedState",
    "GuardianAnswerNode",
    "GuardianToolNode",
    "route_guardian",
    "route_model",
]
