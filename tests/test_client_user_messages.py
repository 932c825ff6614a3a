"""The Python client sends what the user said with a step (`before(user_messages=...)`) to a
live Guardian: the guardian the run asks receives it in its projection, as "user said: …"
before the step's own item; a bad one is an InvalidRequest naming its field; the async client
does the same."""

import pytest
from guardian_client import (
    AsyncGuardian,
    Call,
    Guardian,
    InvalidRequest,
    Result,
    UserMessage,
)
from guardian_client.types import user_messages_json

from runs.models import Turn
from tests.client_helpers import LOOKUP_ORDER, guardian_for, run_async, scripted

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def token(integrator):
    return guardian_for(integrator)


@pytest.fixture
def received(monkeypatch) -> dict[str, list]:
    """Every projection the runs' guardians receive, through the guardian the run builds."""
    import runs.external

    seen: dict[str, list] = {"risk": [], "answer": []}
    build = runs.external.build_guardian

    class Recording:
        def __init__(self, guardian) -> None:
            self._guardian = guardian

        def __getattr__(self, name):
            return getattr(self._guardian, name)

        def assess_risk(self, projections):
            seen["risk"].extend(projections)
            return self._guardian.assess_risk(projections)

        def answer(self, projection, conditions):
            seen["answer"].append(projection)
            return self._guardian.answer(projection, conditions)

    monkeypatch.setattr(runs.external, "build_guardian", lambda run: Recording(build(run)))
    return seen


def summaries(projection) -> list[str]:
    return [item["summary"] for item in projection["history"]]


def test_each_kind_of_user_message_is_the_protocols_item():
    assert user_messages_json([UserMessage("a"), "b", {"text": "c"}]) == [
        {"text": "a"},
        {"text": "b"},
        {"text": "c"},
    ]
    assert user_messages_json("yes, go ahead") == [{"text": "yes, go ahead"}]  # one, not 13


def test_what_the_user_said_reaches_the_guardian_the_run_asks(live_server, token, received):
    with Guardian(live_server.url, token) as guardian:
        run = guardian.run(
            goal="Tell the customer what is wrong with their order.",
            tools=[LOOKUP_ORDER],
            guardian="local",
        )
        gate = run.before(
            message="Let me look it up.",
            calls=[Call("lookup_order", {"order_id": "ord_1"}, call_id="c1")],
            user_messages=[UserMessage("My parcel arrived broken."), "It is order ord_1."],
        )
        assert (gate.step, gate.status) == (0, "run")  # a read: the local guardian lets it run
        run.after([Result(0, "Order ord_1: the parcel arrived broken; paid 49.90.")])

    said = ["user said: My parcel arrived broken.", "user said: It is order ord_1."]
    [risk] = received["risk"]
    assert summaries(risk)[:2] == said
    [answered] = received["answer"]
    assert summaries(answered) == [*said, "turn 0: lookup_order done"]
    assert Turn.objects.get(run_id=run.id, index=0).proposal["user_messages"] == [
        {"text": "My parcel arrived broken."},
        {"text": "It is order ord_1."},
    ]


def test_a_bad_user_message_is_an_invalid_request_naming_its_field(live_server, token):
    with Guardian(live_server.url, token) as guardian:
        run = guardian.run(goal="g", tools=[LOOKUP_ORDER], guardian="scripted", config=scripted())
        with pytest.raises(InvalidRequest) as bad:
            run.before(message="Hello?", user_messages=[UserMessage("fine"), {"txt": "typo"}])
        assert bad.value.problems["user_messages"] == [
            "user_messages.1.text: This field is required.",
            'user_messages.1.txt: unknown field: a user message has only "text".',
        ]
        # Nothing was recorded: the step, sent right, takes the same number.
        assert run.before(message="Hello?", user_messages=["fine"]).step == 0
    assert not Turn.objects.filter(run_id=run.id, index=1).exists()


def test_the_async_client_sends_user_messages_the_same_way(live_server, token, received):
    async def loop():
        async with AsyncGuardian(live_server.url, token) as guardian:
            run = await guardian.run(
                goal="g", tools=[LOOKUP_ORDER], guardian="scripted", config=scripted({})
            )
            gate = await run.before(
                calls=[Call("lookup_order", {"order_id": "ord_1"})], user_messages="yes"
            )
            decision = await run.after([Result(c.position, "ord_1") for c in gate.runnable])
            return run.id, decision

    run_id, decision = run_async(loop)
    assert decision.outcome == "continue"
    assert summaries(received["answer"][0]) == ["user said: yes", "turn 0: lookup_order done"]
    assert Turn.objects.get(run_id=run_id).proposal["user_messages"] == [{"text": "yes"}]
