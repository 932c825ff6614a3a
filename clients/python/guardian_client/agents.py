"""The OpenAI Agents SDK: run hooks and tool guardrails that ask Guardian before each batch of
tool calls and report their outputs after it.

    guard = GuardianGuard(run)                  # run: an AsyncRun (AsyncGuardian.run)
    agent = Agent(name="support", model=model, tools=guard.tools([lookup_order, refund_order]))
    result = await guard.run_agent(agent, "Refund order ord_4472")   # Runner.run, guarded
    guard.final                                 # Guardian's decision on the final answer

`run_agent` is `Runner.run` with `hooks=guard.hooks`: it turns a stop by Guardian (which the
SDK raises as a guardrail tripwire) into GuardianStopped, and sends a final answer Guardian
does not accept back to the model with the reason, as the LangGraph answer node does. Pass
`hooks=guard.hooks` to `Runner.run` yourself to handle both your own way.

When the model answers with tool calls (`on_llm_end`), the whole batch is one step: Guardian
validates every call and gates the step; a held step waits there for a person. Each call's
input guardrail then lets through exactly the calls Guardian allows (the others reach the
model as a rejection with the reason); once every allowed call has its output, the outputs go
to Guardian together and each output guardrail passes it on, or withholds it when Guardian
quarantines it as injected. A step Guardian stops halts the run (GuardianStopped). A reply
without tool calls is a step too: `final` is what Guardian decided of it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents import RunHooks, Runner, ToolGuardrailFunctionOutput
from agents.exceptions import (
    ToolInputGuardrailTripwireTriggered,
    ToolOutputGuardrailTripwireTriggered,
)
from agents.tool_guardrails import ToolInputGuardrail, ToolOutputGuardrail

from guardian_client.client import AsyncRun
from guardian_client.types import Call, Decision, Escalation, Gate, Result, Verdict

WITHHELD = "[output withheld by Guardian: it may hold instructions; a person checks it first]"


def _decoded(arguments: Any) -> Any:
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):
            return json.loads(arguments)
    return arguments


class GuardianStopped(Exception):  # noqa: N818 - a stop, not an error of the caller's
    """Guardian stopped the run (or it waits on a person past the wait): `decision` says why."""

    def __init__(self, message: str, decision: Decision | None = None) -> None:
        super().__init__(message)
        self.decision = decision


@dataclass
class _Step:
    gate: Gate
    by_call: dict[str, Any]
    outputs: dict[str, str] = field(default_factory=dict)
    decided: asyncio.Event = field(default_factory=asyncio.Event)
    decision: Decision | None = None
    released: tuple[str, ...] = ()
    proposed: dict[str, Any] = field(default_factory=dict)
    rejected: dict[str, str] = field(default_factory=dict)  # call id: a person's reason


class _Hooks(RunHooks):
    def __init__(self, guard: GuardianGuard) -> None:
        self.guard = guard

    async def on_llm_end(self, context, agent, response) -> None:
        await self.guard._model_answered(response)


class GuardianGuard:
    """The hooks and the guardrails of one guarded run (see the module)."""

    def __init__(
        self,
        run: AsyncRun,
        *,
        wait_timeout: float | None = None,
        on_wait: Callable[[Escalation], None] | None = None,
    ) -> None:
        self.run, self.wait_timeout, self.on_wait = run, wait_timeout, on_wait
        self.hooks = _Hooks(self)
        self.step: _Step | None = None
        self.final: Decision | None = None
        self._input = ToolInputGuardrail(self._before_call, name="guardian")
        self._output = ToolOutputGuardrail(self._after_call, name="guardian")

    async def run_agent(self, agent: Any, input: Any, **kwargs: Any) -> Any:
        """`Runner.run(agent, input, hooks=self.hooks, **kwargs)`, until Guardian accepts the
        final answer: one it says does not reach the goal yet goes back to the model with its
        reason, as a user message (the run's budgets bound how often). A stop is
        GuardianStopped; the result is the last Runner.run's."""
        while True:
            self.final = None
            try:
                result = await Runner.run(agent, input, hooks=self.hooks, **kwargs)
            except (
                ToolInputGuardrailTripwireTriggered,
                ToolOutputGuardrailTripwireTriggered,
            ) as trip:
                if trip.guardrail not in (self._input, self._output):
                    raise
                decision = trip.output.output_info
                summary = decision.summary if isinstance(decision, Decision) else ""
                raise GuardianStopped(
                    f"Guardian stopped the run: {summary or 'a person decided so'}", decision
                ) from trip
            final = self.final
            if final is None or final.run_status == "succeeded":
                return result
            if final.stopped or not final.may_continue:
                raise GuardianStopped(
                    f"Guardian stopped the run: {final.summary or final.outcome}", final
                )
            note = final.summary or "the goal is not reached yet"
            input = [
                *result.to_input_list(),
                {"role": "user", "content": f"Guardian: not done yet: {note}"},
            ]

    def tools(self, tools: list) -> list:
        """The function tools with Guardian's guardrails added (the same objects)."""
        for tool in tools:
            tool.tool_input_guardrails = [*(tool.tool_input_guardrails or []), self._input]
            tool.tool_output_guardrails = [*(tool.tool_output_guardrails or []), self._output]
        return tools

    async def _model_answered(self, response) -> None:
        calls, text = [], ""
        for item in response.output:
            kind = getattr(item, "type", "")
            if kind == "function_call":
                # Sent as the model wrote them (JSON text): Guardian names what is wrong.
                calls.append(Call(item.name, item.arguments, call_id=item.call_id))
            elif kind == "message":
                text += "".join(getattr(part, "text", "") for part in item.content)
        tokens = int(getattr(response.usage, "total_tokens", 0) or 0)
        gate = await self.run.before(message=text, calls=calls, tokens=tokens)
        if not calls:
            self.final = await self._settled(gate.decision)
            return
        proposed = {c.call_id: _decoded(c.arguments) for c in calls}
        if gate.held:
            verdict = await self._wait(gate.escalation)
            if verdict.resumed is not None:
                gate = verdict.resumed
            elif not verdict.may_continue:
                raise GuardianStopped(
                    f"Guardian stopped the run: {verdict.reason or verdict.status}"
                )
            else:
                self.step = _Step(
                    gate,
                    {c.call_id: c for c in gate.calls},
                    proposed=proposed,
                    rejected={f.call_id: f.message for f in verdict.feedback},
                )
                return
        self.step = _Step(gate, {c.call_id: c for c in gate.calls}, proposed=proposed)
        if gate.status == "decided" or not gate.runnable:
            self.step.decision = gate.decision
            self.step.decided.set()

    async def _wait(self, escalation: Escalation) -> Verdict:
        if self.on_wait is not None:
            self.on_wait(escalation)  # e.g. say where the reviewer decides
        return await self.run.wait(escalation, timeout=self.wait_timeout)

    async def _settled(self, decision: Decision | None) -> Decision | None:
        """A decision that escalated: what a person made of it."""
        if decision is None or decision.outcome != "escalate" or decision.escalation is None:
            return decision
        verdict = await self._wait(decision.escalation)
        if not verdict.may_continue and verdict.run_status not in ("succeeded",):
            raise GuardianStopped(
                f"Guardian stopped the run after review: {verdict.status}", decision
            )
        # What the person made of it: the run succeeded, or goes on.
        return dataclasses.replace(
            decision, run_status=verdict.run_status, may_continue=verdict.may_continue
        )

    async def _before_call(self, data) -> ToolGuardrailFunctionOutput:
        step = self.step
        call_id = data.context.tool_call_id
        call = step.by_call.get(call_id) if step else None
        rejected = step.rejected if step else {}
        if call is None or call_id in rejected:
            message = rejected.get(call_id) or "Guardian did not allow this call."
            return ToolGuardrailFunctionOutput.reject_content(message)
        if not call.may_run:
            return ToolGuardrailFunctionOutput.reject_content(call.message or call.status)
        if call.arguments != step.proposed.get(call_id):
            # A reviewer changed them: the SDK would run the model's, so nothing runs.
            return ToolGuardrailFunctionOutput.reject_content(
                "A reviewer approved this call with other arguments: propose it again as "
                f"{json.dumps(call.arguments)}"
            )
        return ToolGuardrailFunctionOutput.allow()

    async def _after_call(self, data) -> ToolGuardrailFunctionOutput:
        step = self.step
        call_id = data.context.tool_call_id
        if step is None or call_id not in step.by_call:
            return ToolGuardrailFunctionOutput.allow()
        step.outputs[call_id] = data.output if isinstance(data.output, str) else str(data.output)
        if len(step.outputs) == len(step.gate.runnable) and not step.decided.is_set():
            results = [
                Result(c.position, step.outputs.get(c.call_id, "")) for c in step.gate.runnable
            ]
            step.decision = await self.run.after(results)
            if step.decision.outcome == "escalate" and step.decision.escalation is not None:
                verdict = await self._wait(step.decision.escalation)
                step.released = verdict.released
                if not verdict.may_continue:
                    step.decided.set()
                    return ToolGuardrailFunctionOutput.raise_exception(output_info=step.decision)
            step.decided.set()
        await step.decided.wait()
        decision = step.decision
        if decision is not None and decision.stopped:
            return ToolGuardrailFunctionOutput.raise_exception(output_info=decision)
        if decision is not None and decision.quarantined and not step.released:
            return ToolGuardrailFunctionOutput.reject_content(WITHHELD)
        return ToolGuardrailFunctionOutput.allow()


__all__ = ["WITHHELD", "GuardianGuard", "GuardianStopped"]
