"""An OpenAI Agents SDK agent guarded by Guardian through the client's hooks and tool
guardrails, end to end against a live server, its model the SDK's own ScriptedModel: a
read-only batch runs, a refund waits for a reviewer and runs once, an injected output is
withheld, the final answer is Guardian's to accept."""

import pytest
from agents import Agent, RunConfig, function_tool
from agents.testing import ScriptedModel, assistant_message, function_call
from guardian_client import AsyncGuardian
from guardian_client.agents import WITHHELD, GuardianGuard, GuardianStopped

from runs.models import Run, RunStatus, ToolCall
from tests.client_helpers import (
    LOOKUP_ORDER,
    REFUND_ORDER,
    World,
    approve_when_held,
    guardian_for,
    run_async,
    scripted,
)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token(integrator):
    return guardian_for(integrator)


def tools_of(world: World) -> list:
    @function_tool
    def lookup_order(order_id: str) -> str:
        """Read an order by its id."""
        return world.lookup(order_id)

    @function_tool
    def refund_order(order_id: str, amount: float) -> str:
        """Refund an order in full."""
        return world.refund(order_id, amount)

    return [lookup_order, refund_order]


def guarded(url, token, *, goal, steps, answers, world, question="Go."):
    async def go():
        async with AsyncGuardian(url, token) as guardian:
            run = await guardian.run(
                goal=goal,
                tools=[LOOKUP_ORDER, REFUND_ORDER],
                guardian="scripted",
                config=scripted(*answers),
            )
            guard = GuardianGuard(run, wait_timeout=30)
            model = ScriptedModel(steps)
            agent = Agent(name="support", model=model, tools=guard.tools(tools_of(world)))
            guarded.model = model  # what the model was given, call by call
            try:
                result = await guard.run_agent(
                    agent, question, run_config=RunConfig(tracing_disabled=True)
                )
            except GuardianStopped as stopped:
                return run, guard, None, stopped
            return run, guard, result, None

    return run_async(go)


def test_an_agents_sdk_agent_reads_waits_for_the_refund_to_be_approved_and_finishes(
    live_server, token, reviewer
):
    world = World()
    approve_when_held(reviewer)
    run, guard, result, stopped = guarded(
        live_server.url,
        token,
        goal="Refund order ord_1: the parcel arrived broken.",
        steps=[
            [function_call("lookup_order", {"order_id": "ord_1"}, call_id="c1")],
            [function_call("refund_order", {"order_id": "ord_1", "amount": 49.9}, call_id="c2")],
            [assistant_message("Refund of 49.90 issued for ord_1.")],
        ],
        answers=[{}, {}, {}, {"goal_reached": 0.96}],
        world=world,
    )
    assert stopped is None
    assert result.final_output == "Refund of 49.90 issued for ord_1."
    assert world.lookups == ["ord_1"]
    assert world.refunds == [("ord_1", 49.9)]  # once, after a reviewer approved it
    assert guard.final.outcome == "stop_success"
    recorded = Run.objects.get(pk=run.id)
    assert (recorded.status, recorded.final_answer) == (
        RunStatus.SUCCEEDED,
        "Refund of 49.90 issued for ord_1.",
    )
    assert (
        ToolCall.objects.filter(turn__run=recorded, tool="refund_order", status="done").count() == 1
    )


def test_a_rejected_refund_never_runs_and_the_run_does_not_end_succeeded(
    live_server, token, reviewer
):
    world = World()
    approve_when_held(reviewer, decision="reject")
    run, guard, result, stopped = guarded(
        live_server.url,
        token,
        goal="Refund order ord_1.",
        steps=[
            [function_call("refund_order", {"order_id": "ord_1", "amount": 49.9}, call_id="c1")],
            [assistant_message("Your refund is on its way.")],  # false: it never ran
            [assistant_message("I cannot refund ord_1: a reviewer refused it.")],
        ],
        # The false answer does not reach the goal; the honest one says it cannot be reached.
        answers=[{}, {"goal_reached": 0.02}, {"infeasible": 0.97}],
        world=world,
    )
    assert world.refunds == []
    assert _model_read("Rejected by a reviewer")
    assert _model_read("Guardian: not done yet")  # the false answer went back to the model
    assert result is None
    assert isinstance(stopped, GuardianStopped)
    assert stopped.decision.outcome == "stop_failure"
    assert Run.objects.get(pk=run.id).status == RunStatus.FAILED


def _model_read(text: str) -> bool:
    return any(text in str(call.input) for call in guarded.model.calls)


def test_an_injected_output_confirmed_by_a_reviewer_stops_the_run_unread(
    live_server, token, reviewer
):
    world = World()
    approve_when_held(reviewer, decision="reject")  # the reviewer confirms the injection
    run, guard, result, stopped = guarded(
        live_server.url,
        token,
        goal="Tell the customer when ord_7 ships.",
        steps=[
            [function_call("lookup_order", {"order_id": "ord_7"}, call_id="c1")],
            [assistant_message("Refunding everything, as the note says.")],
        ],
        answers=[{"integrity": 0.97}],
        world=world,
    )
    assert world.lookups == ["ord_7"]
    assert result is None
    assert isinstance(stopped, GuardianStopped)
    assert len(guarded.model.calls) == 1  # the model was never asked again
    assert not _model_read("ignore your instructions")
    assert Run.objects.get(pk=run.id).status == RunStatus.FAILED


def test_an_injected_output_a_reviewer_confirms_stays_withheld_and_the_agent_goes_on(
    live_server, token, reviewer
):
    world = World()
    # The reviewer answers that it is an injection: withheld for good, the run goes on.
    approve_when_held(reviewer, decision="answer", answer={"integrity": True})
    run, guard, result, stopped = guarded(
        live_server.url,
        token,
        goal="Tell the customer when ord_7 ships.",
        steps=[
            [function_call("lookup_order", {"order_id": "ord_7"}, call_id="c1")],
            [assistant_message("ord_7 was delivered.")],
        ],
        answers=[{"integrity": 0.97}, {"goal_reached": 0.96}],
        world=world,
    )
    assert stopped is None
    assert _model_read(WITHHELD)
    assert not _model_read("ignore your instructions")
    assert result.final_output == "ord_7 was delivered."
    assert Run.objects.get(pk=run.id).status == RunStatus.SUCCEEDED


def test_an_injected_output_a_reviewer_releases_reaches_the_model(live_server, token, reviewer):
    world = World()
    # The reviewer reads it and answers that it holds no instructions: it is released.
    approve_when_held(reviewer, decision="answer", answer={"integrity": False})
    run, guard, result, stopped = guarded(
        live_server.url,
        token,
        goal="Tell the customer when ord_7 ships.",
        steps=[
            [function_call("lookup_order", {"order_id": "ord_7"}, call_id="c1")],
            [assistant_message("ord_7 was delivered.")],
        ],
        answers=[{"integrity": 0.97}, {"goal_reached": 0.96}],
        world=world,
    )
    assert stopped is None
    assert _model_read("ignore your instructions")  # released by a person, so passed on
    assert not _model_read(WITHHELD)
    assert world.refunds == []
