"""A LangGraph agent guarded by Guardian through the client, end to end against a live server,
its model scripted in LangChain's own testing style (GenericFakeChatModel): a read-only step
continues, a refund waits for a reviewer and runs once, an injected output is withheld, the
final answer is Guardian's to accept — and the run is in the auditors' log, replayable."""

import pytest
from guardian_client import Guardian
from guardian_client.langgraph import (
    WITHHELD,
    GuardedState,
    GuardianAnswerNode,
    GuardianToolNode,
    route_guardian,
    route_model,
)
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import MemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command

from runs.models import Run, RunStatus
from runs.replay import run_replay
from tests.client_helpers import (
    LOOKUP_ORDER,
    REFUND_ORDER,
    World,
    approve_when_held,
    guardian_for,
    scripted,
)

pytestmark = pytest.mark.django_db(transaction=True)


def ai_call(name: str, args: dict, call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def build(run, world: World, replies: list[AIMessage], **node_options):
    @tool
    def lookup_order(order_id: str) -> str:
        """Read an order by its id."""
        return world.lookup(order_id)

    @tool
    def refund_order(order_id: str, amount: float) -> str:
        """Refund an order in full."""
        return world.refund(order_id, amount)

    model = GenericFakeChatModel(messages=iter(replies))

    def call_model(state):
        return {"messages": [model.invoke(state["messages"])]}

    graph = StateGraph(GuardedState)
    graph.add_node("model", call_model)
    graph.add_node("tools", GuardianToolNode(run, [lookup_order, refund_order], **node_options))
    graph.add_node("answer", GuardianAnswerNode(run, **node_options))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route_model, ["tools", "answer"])
    graph.add_conditional_edges("tools", route_guardian, ["model", END])
    graph.add_conditional_edges("answer", route_guardian, ["model", END])
    return graph


@pytest.fixture
def token(integrator):
    return guardian_for(integrator)


def test_a_langgraph_agent_reads_waits_for_the_refund_to_be_approved_and_finishes(
    live_server, token, reviewer
):
    world = World()
    replies = [
        ai_call("lookup_order", {"order_id": "ord_1"}, "c1"),
        ai_call("refund_order", {"order_id": "ord_1", "amount": 49.9}, "c2"),
        AIMessage(content="Refund of 49.90 issued for ord_1."),
    ]
    with Guardian(live_server.url, token) as guardian:
        run = guardian.run(
            goal="Refund order ord_1: the parcel arrived broken.",
            tools=[LOOKUP_ORDER, REFUND_ORDER],
            guardian="scripted",
            config=scripted({}, {}, {}, {"goal_reached": 0.96}),
        )
        approve_when_held(reviewer)
        app = build(run, world, replies, wait_timeout=30).compile()
        final = app.invoke({"messages": [HumanMessage("Refund ord_1, it arrived broken.")]})

    assert world.lookups == ["ord_1"]
    assert world.refunds == [("ord_1", 49.9)]  # once, after the approval
    assert final["guardian"]["outcome"] == "stop_success"
    recorded = Run.objects.get(pk=run.id)
    assert (recorded.status, recorded.final_answer) == (
        RunStatus.SUCCEEDED,
        "Refund of 49.90 issued for ord_1.",
    )
    replayed = list(run_replay(run=recorded))
    assert len(replayed) == 4  # every step replays to the same decision
    assert {r.status for r in replayed} == {"identical"}


def test_a_held_step_interrupts_the_graph_and_resumes_on_the_verdict(live_server, token, reviewer):
    from escalations.models import Escalation
    from escalations.verdicts import escalation_resolve

    world = World()
    replies = [
        ai_call("refund_order", {"order_id": "ord_1", "amount": 49.9}, "c1"),
        AIMessage(content="Refund issued."),
    ]
    with Guardian(live_server.url, token) as guardian:
        run = guardian.run(
            goal="Refund order ord_1.",
            tools=[REFUND_ORDER],
            guardian="scripted",
            config=scripted({}, {}, {"goal_reached": 0.96}),
        )
        app = build(run, world, replies, interrupt_on_hold=True).compile(checkpointer=MemorySaver())
        thread = {"configurable": {"thread_id": "refund"}}
        paused = app.invoke({"messages": [HumanMessage("Refund ord_1.")]}, thread)
        [pause] = paused["__interrupt__"]
        assert world.refunds == []  # nothing ran while a person decides
        escalation = Escalation.objects.get(pk=pause.value["escalation"])
        escalation_resolve(escalation_id=escalation.pk, reviewer=reviewer, decision="approve")
        final = app.invoke(Command(resume=True), thread)

    assert world.refunds == [("ord_1", 49.9)]
    assert final["guardian"]["outcome"] == "stop_success"


def test_an_injected_output_a_reviewer_confirms_stays_withheld_and_the_agent_goes_on(
    live_server, token, reviewer
):
    world = World()
    replies = [
        ai_call("lookup_order", {"order_id": "ord_7"}, "c1"),
        AIMessage(content="ord_7 was delivered."),
    ]
    with Guardian(live_server.url, token) as guardian:
        run = guardian.run(
            goal="Tell the customer when ord_7 ships.",
            tools=[LOOKUP_ORDER],
            guardian="scripted",
            config=scripted({"integrity": 0.97}, {"goal_reached": 0.96}),
        )
        # The reviewer answers that it is an injection: withheld for good, the run goes on.
        approve_when_held(reviewer, decision="answer", answer={"integrity": True})
        app = build(run, world, replies, wait_timeout=30).compile()
        final = app.invoke({"messages": [HumanMessage("When does ord_7 ship?")]})

    told = [m.content for m in final["messages"] if isinstance(m, ToolMessage)]
    assert told == [WITHHELD]
    assert not any("ignore your instructions" in str(m.content) for m in final["messages"])
    assert final["messages"][-1].content == "ord_7 was delivered."  # the model went on
    assert Run.objects.get(pk=run.id).status == RunStatus.SUCCEEDED


def test_an_injected_output_never_reaches_the_model(live_server, token, reviewer):
    world = World()
    replies = [ai_call("lookup_order", {"order_id": "ord_7"}, "c1"), AIMessage(content="?")]
    with Guardian(live_server.url, token) as guardian:
        run = guardian.run(
            goal="Tell the customer when ord_7 ships.",
            tools=[LOOKUP_ORDER],
            guardian="scripted",
            config=scripted({"integrity": 0.97}),
        )
        # The reviewer confirms the injection: the output stays withheld, the run stops.
        approve_when_held(reviewer, decision="reject")
        app = build(run, world, replies, wait_timeout=30).compile()
        final = app.invoke({"messages": [HumanMessage("When does ord_7 ship?")]})

    told = [m.content for m in final["messages"] if isinstance(m, ToolMessage)]
    assert told == [WITHHELD]
    assert not any("ignore your instructions" in str(m.content) for m in final["messages"])
    assert final["guardian"]["may_continue"] is False
