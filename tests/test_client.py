"""The Python client (clients/python) against a live Guardian: a read-only step continues, an
irreversible one waits for a reviewer and runs once, an injected output is withheld; retries
are safe, errors typed; the async client does the same."""

import pytest
from guardian_client import (
    AsyncGuardian,
    Call,
    Conflict,
    Guardian,
    InvalidRequest,
    NotAllowed,
    Result,
)

from runs.models import Run, RunStatus, ToolCall
from tests.client_helpers import (
    INJECTED,
    LOOKUP_ORDER,
    REFUND_ORDER,
    approve_when_held,
    guardian_for,
    run_async,
    scripted,
)
from tests.proxies import FaultyProxy, first_of_each_path

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token(integrator):
    return guardian_for(integrator)


def test_a_step_that_reads_continues_and_one_that_refunds_waits_and_runs_once(
    live_server, token, reviewer
):
    with Guardian(live_server.url, token) as guardian:
        run = guardian.run(
            goal="Refund order ord_1: the parcel arrived broken.",
            tools=[LOOKUP_ORDER, REFUND_ORDER],
            guardian="scripted",
            config=scripted({}, {}, {}),
        )
        gate = run.before(calls=[Call("lookup_order", {"order_id": "ord_1"}, call_id="c1")])
        assert [c.status for c in gate.calls] == ["run"]
        decision = run.after([Result(0, "Order ord_1: broken, paid 49.90.")])
        assert (decision.outcome, decision.may_continue) == ("continue", True)

        refunds = []
        gate = run.before(
            calls=[Call("refund_order", {"order_id": "ord_1", "amount": 49.9}, call_id="c2")]
        )
        assert gate.held
        approve_when_held(reviewer)
        verdict = run.wait(gate.escalation, timeout=20, poll=2)
        assert (verdict.decision, verdict.resumed.status) == ("approve", "run")
        for call in verdict.resumed.runnable:
            refunds.append(call.arguments)
        decision = run.after([Result(0, "Refund rf_1 issued.")])
        assert decision.outcome == "continue"
        assert refunds == [{"order_id": "ord_1", "amount": 49.9}]
    assert ToolCall.objects.filter(tool="refund_order", status="done").count() == 1


def test_an_injected_output_is_withheld_from_the_model(live_server, token):
    with Guardian(live_server.url, token) as guardian:
        run = guardian.run(
            goal="Tell the customer when ord_7 ships.",
            tools=[LOOKUP_ORDER],
            guardian="scripted",
            config=scripted({"integrity": 0.97}),
        )
        run.before(calls=[Call("lookup_order", {"order_id": "ord_7"}, call_id="c1")])
        decision = run.after([Result(0, INJECTED)])
    assert (decision.outcome, decision.quarantined, decision.may_continue) == (
        "escalate",
        True,
        False,
    )
    assert decision.results == ((0, None),)
    assert decision.escalation is not None
    assert Run.objects.get(pk=run.id).status == RunStatus.WAITING


def test_typed_errors_say_what_was_wrong(live_server, token, auditor):
    with Guardian(live_server.url, token) as guardian:
        with pytest.raises(InvalidRequest) as bad:
            guardian.run(goal="", tools=[{"name": "x", "risk_class": "dangerous"}])
        assert "goal" in bad.value.problems
        assert "tools" in bad.value.problems
        run = guardian.run(goal="g", tools=[LOOKUP_ORDER], guardian="scripted", config=scripted())
        run.before(calls=[Call("lookup_order", {"order_id": "ord_1"})], step=0)
        with pytest.raises(Conflict):
            run.before(calls=[Call("lookup_order", {"order_id": "ord_2"})], step=0)
        assert str(bad.value).startswith("Guardian answered 400: ")
        assert "goal" in str(bad.value)
        assert "['" not in str(bad.value)  # words, not a Python list
    with Guardian(live_server.url, "gdn_not_a_token") as stranger, pytest.raises(NotAllowed) as no:
        stranger.run(goal="g", tools=[LOOKUP_ORDER])
    assert str(no.value) == "Guardian answered 403: Authorization: the token is not valid."


def test_a_step_retried_after_a_failure_is_recorded_once(live_server, token):
    proxy = FaultyProxy(live_server.url, before=first_of_each_path())
    try:
        with Guardian(proxy.url, token, backoff=0.01) as guardian:
            run = guardian.run(
                goal="g", tools=[LOOKUP_ORDER], guardian="scripted", config=scripted({})
            )
            gate = run.before(calls=[Call("lookup_order", {"order_id": "ord_1"})])
            decision = run.after([Result(0, "ord_1")])
    finally:
        proxy.close()
    assert gate.status == "run"
    assert decision.outcome == "continue"
    assert ToolCall.objects.filter(turn__run_id=run.id).count() == 1


def test_the_async_client_guards_a_step_the_same_way(live_server, token):
    async def loop():
        async with AsyncGuardian(live_server.url, token) as guardian:
            run = await guardian.run(
                goal="g", tools=[LOOKUP_ORDER], guardian="scripted", config=scripted({})
            )
            gate = await run.before(calls=[Call("lookup_order", {"order_id": "ord_1"})])
            decision = await run.after([Result(c.position, "ord_1") for c in gate.runnable])
            again = await run.step(0)
            return gate, decision, again

    gate, decision, again = run_async(loop)
    assert gate.status == "run"
    assert decision.outcome == "continue"
    assert again.decision.outcome == "continue"


def test_a_loop_restarted_mid_step_attaches_and_reports_the_step_it_left(live_server, token):
    with Guardian(live_server.url, token) as guardian:
        run = guardian.run(
            goal="g", tools=[LOOKUP_ORDER], guardian="scripted", config=scripted({}, {})
        )
        gate = run.before(calls=[Call("lookup_order", {"order_id": "ord_1"})])
    # A new process: it knows the run's id only.
    with Guardian(live_server.url, token) as guardian:
        again = guardian.attach(run.id)
        assert (again.summary()["pending_step"], again.next_step) == (gate.step, gate.step)
        decision = again.after([Result(0, "ord_1")])  # the step it left, not a new one
        assert (decision.step, decision.outcome, again.next_step) == (0, "continue", 1)
        assert again.before(message="Done.").step == 1
    assert ToolCall.objects.filter(turn__run_id=run.id).count() == 1
