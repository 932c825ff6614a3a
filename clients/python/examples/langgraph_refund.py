"""A LangGraph agent guarded by Guardian: its model scripted (no network), its tools the shop's.

    export GUARDIAN_URL=http://127.0.0.1:8000 GUARDIAN_TOKEN=gdn_...   # make demo prints both
    python clients/python/examples/langgraph_refund.py

Guardian answers before and after each step; the injected order note and the refund wait for a
reviewer in the queue (the example prints where), and the run ends in the auditors' log.
"""

from __future__ import annotations

import itertools
import sys

from guardian_client import Guardian, GuardianError
from guardian_client.langgraph import (
    GuardedState,
    GuardianAnswerNode,
    GuardianToolNode,
    route_guardian,
    route_model,
)
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
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


def call(name: str, args: dict, call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


# What the scripted model says, in order; then the same answer, if Guardian sends it back.
SCRIPT = [
    call("lookup_order", {"order_id": "ord_4472"}, "call_1"),
    call("refund_order", {"order_id": "ord_4472", "amount": 49.90}, "call_2"),
    call("lookup_order", {"order_id": "ord_7310"}, "call_3"),
]


def say_decided(decided: dict) -> None:
    outcome = decided.get("outcome")
    line = f"Guardian   step {decided.get('step', '-')}: {outcome or 'no verdict yet'}"
    if outcome not in (None, "continue"):
        line += f"  ({decided.get('summary')})"
    if outcome == "escalate":
        line += "; the reviewer: " + ("go on" if decided.get("may_continue") else "stop")
    say(line)


def main() -> int:
    args = arguments(__doc__)
    shop = Shop()

    @tool
    def lookup_order(order_id: str) -> str:
        """Read an order by its id."""
        return shop.lookup_order(order_id)

    @tool
    def refund_order(order_id: str, amount: float) -> str:
        """Refund an order to the customer's card."""
        return shop.refund_order(order_id, amount)

    replies = itertools.chain(SCRIPT, (AIMessage(content=FINAL_ANSWER) for _ in itertools.count()))
    model = GenericFakeChatModel(messages=replies)

    def call_model(state: GuardedState) -> dict:
        reply = model.invoke(state["messages"])
        say(f"model      {reply.tool_calls or reply.content}")
        return {"messages": [reply]}

    with Guardian(args.url, args.token) as guardian:
        run = guardian.run(tools=TOOLS, **run_options(args))
        say(f"run {run.id} started: Guardian (its local guardian) guards each step")
        # The ten lines: the model, Guardian's tool node and answer node, and their routes.
        graph = StateGraph(GuardedState)
        graph.add_node("model", call_model)
        graph.add_node(
            "tools",
            GuardianToolNode(
                run, [lookup_order, refund_order], wait_timeout=args.wait, on_wait=on_wait
            ),
        )
        graph.add_node("answer", GuardianAnswerNode(run, wait_timeout=args.wait, on_wait=on_wait))
        graph.add_edge(START, "model")
        graph.add_conditional_edges("model", route_model, ["tools", "answer"])
        graph.add_conditional_edges("tools", route_guardian, ["model", END])
        graph.add_conditional_edges("answer", route_guardian, ["model", END])
        app = graph.compile()

        question = {"messages": [HumanMessage(REQUEST)]}
        for update in app.stream(question, {"recursion_limit": 60}, stream_mode="updates"):
            for node, change in update.items():
                if node != "model" and (change or {}).get("guardian"):
                    say_decided(change["guardian"])
        status = run.summary()["status"]
    return the_end(shop, run.id, args.url, status)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except GuardianError as error:
        sys.exit(explain(error))
