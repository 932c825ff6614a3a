"""An OpenAI Agents SDK agent guarded by Guardian: its model the SDK's ScriptedModel (no
network), its tools the shop's.

    export GUARDIAN_URL=http://127.0.0.1:8000 GUARDIAN_TOKEN=gdn_...   # make demo prints both
    python clients/python/examples/agents_sdk_refund.py

Guardian answers before each batch of tool calls and after it; the injected order note and the
refund wait for a reviewer in the queue (the example prints where), and the run ends in
the auditors' log.
"""

from __future__ import annotations

import asyncio
import sys

from agents import Agent, RunConfig, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from guardian_client import AsyncGuardian, GuardianError
from guardian_client.agents import GuardianGuard, GuardianStopped
from shop import (
    FINAL_ANSWER,
    REQUEST,
    TOOLS,
    Shop,
    arguments,
    explain,
    run_options,
    say,
    the_end,
)
from shop import waiting_for_a_person as on_wait

# What the scripted model answers, turn by turn: three tool calls, then the reply.
SCRIPT = [
    [function_call("lookup_order", {"order_id": "ord_4472"}, call_id="call_1")],
    [function_call("refund_order", {"order_id": "ord_4472", "amount": 49.90}, call_id="call_2")],
    [function_call("lookup_order", {"order_id": "ord_7310"}, call_id="call_3")],
    [assistant_message(FINAL_ANSWER)],
]


async def main() -> int:
    args = arguments(__doc__)
    shop = Shop()

    @function_tool
    def lookup_order(order_id: str) -> str:
        """Read an order by its id."""
        return shop.lookup_order(order_id)

    @function_tool
    def refund_order(order_id: str, amount: float) -> str:
        """Refund an order to the customer's card."""
        return shop.refund_order(order_id, amount)

    async with AsyncGuardian(args.url, args.token) as guardian:
        run = await guardian.run(tools=TOOLS, **run_options(args))
        say(f"run {run.id} started: Guardian (its local guardian) guards each step")
        # The lines that guard it: the guard's tools, and Runner.run through the guard.
        guard = GuardianGuard(run, wait_timeout=args.wait, on_wait=on_wait)
        agent = Agent(
            name="support",
            instructions="Help the customer with their orders.",
            model=ScriptedModel(SCRIPT),
            tools=guard.tools([lookup_order, refund_order]),
        )
        try:
            result = await guard.run_agent(
                agent, REQUEST, run_config=RunConfig(tracing_disabled=True)
            )
        except GuardianStopped as stopped:
            say(f"Guardian   stopped the run: {stopped}")
        else:
            say(f"model      {result.final_output}")
            final = guard.final
            if final is not None:
                say(f"Guardian   final answer: {final.outcome}  {final.summary}".rstrip())
        status = (await run.summary())["status"]
    return the_end(shop, run.id, args.url, status)


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main()))
    except GuardianError as error:
        sys.exit(explain(error))
