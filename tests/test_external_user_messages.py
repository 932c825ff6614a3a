"""What the user said mid-run, sent with an external step (`user_messages`): a bad item is a 400
naming its field and records nothing; a good one is recorded with the step, written to the
history as "user said: …" before the step's own item, shown to the risk check and the
guardian, sealed in the decision log, and shown as text on the run and replay pages."""

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from demo.setup import demo_policy_version
from escalations.verdicts import escalation_resolve
from guardian_core.services import api_token_create
from runs.models import Decision, Run, Turn
from runs.replay import run_replay
from runs.sealing import run_log_check
from tests.factories import tamper_rows
from tests.test_external_runs import read, refund, results, said, start

pytestmark = pytest.mark.django_db


@pytest.fixture
def api(integrator):
    demo_policy_version()
    _, secret = api_token_create(user=integrator, name="loop")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


MARKUP = '<script>alert("hi")</script><b>yes</b>, refund it & thanks'


def step_with(api, run_id: int, number: int, body: dict, *, expect: int = 201) -> dict:
    response = api.post(
        reverse("api:run-steps", args=[run_id]), {"step": number, **body}, format="json"
    )
    assert response.status_code == expect, response.content
    return response.json()


def summaries(history) -> list[str]:
    return [item["summary"] for item in history]


@pytest.mark.parametrize(
    ("user_messages", "problem"),
    [
        ([{"text": "ok"}, {"text": ""}], "user_messages.1.text: This field may not be blank."),
        ([{"said": "ok"}], "user_messages.0.text: This field is required."),
        (["ok"], 'user_messages.0: each user message is an object {"text": "…"}, not str.'),
        ([{"text": 42}], "user_messages.0.text: must be text, not int."),
        ([{"text": ["ok"]}], "user_messages.0.text: must be text, not list."),
        ([{"text": "a\x00b"}], "user_messages[0].text: holds a NUL character"),
        (
            [{"text": "ok", "from": "bob"}],
            'user_messages.0.from: unknown field: a user message has only "text".',
        ),
        ({"text": "ok"}, 'user_messages: Expected a list of items but got type "dict".'),
        ([{"text": "x" * 20_001}], "user_messages.0.text: Ensure this field has no more"),
        ([{"text": "ok"}] * 33, "at most 32 user messages in one step"),
    ],
)
def test_a_bad_user_message_is_a_400_naming_its_field_and_nothing_is_recorded(
    api,
    user_messages,
    problem,
):
    run = start(api)
    body = step_with(
        api, run["id"], 0, {"calls": [read()], "user_messages": user_messages}, expect=400
    )
    assert list(body) == ["user_messages"]
    assert any(message.startswith(problem) for message in body["user_messages"]), body
    assert not Turn.objects.filter(run_id=run["id"]).exists()


def test_what_the_user_said_is_recorded_before_the_step_and_reaches_the_guardian(api):
    run = start(api)
    gate = step_with(
        api,
        run["id"],
        0,
        {
            "message": "Let me look the order up.",
            "calls": [read()],
            "user_messages": [{"text": "My parcel arrived broken."}, {"text": "It is ord_1."}],
        },
    )
    assert gate["status"] == "run"
    answer = results(api, run["id"], 0, {"position": 0, "result": "ord_1: broken, 49.90"})
    assert answer["decision"]["outcome"] == "continue"

    turn = Turn.objects.get(run_id=run["id"], index=0)
    # The whole text is kept with the step, as sent.
    assert turn.proposal["user_messages"] == [
        {"text": "My parcel arrived broken."},
        {"text": "It is ord_1."},
    ]
    said_first = ["user said: My parcel arrived broken.", "user said: It is ord_1."]
    # The risk check read it before anything ran, and the guardian after the step.
    [risk_projection] = turn.risk_projections
    assert summaries(risk_projection["history"]) == said_first
    assert summaries(turn.projection["history"]) == [*said_first, "turn 0: lookup_order done"]
    # The run's state carries it on to the next step.
    assert summaries(turn.run.state["history"]) == summaries(turn.projection["history"])


def test_the_next_step_sees_the_conversation_so_far(api):
    run = start(api)
    step_with(api, run["id"], 0, {"message": "Which order is it?"})
    step_with(
        api,
        run["id"],
        1,
        {"calls": [read()], "user_messages": [{"text": "ord_1, please."}]},
    )
    results(api, run["id"], 1, {"position": 0, "result": "ord_1: broken"})
    projection = Turn.objects.get(run_id=run["id"], index=1).projection
    assert summaries(projection["history"]) == [
        "turn 0: no tool call; said: Which order is it?",
        "user said: ord_1, please.",
        "turn 1: lookup_order done",
    ]


def test_a_retried_step_needs_the_same_user_messages(api):
    run = start(api)
    body = {"calls": [read()], "user_messages": [{"text": "It is ord_1."}]}
    first = step_with(api, run["id"], 0, body)
    assert step_with(api, run["id"], 0, body, expect=200) == first
    other = step_with(
        api,
        run["id"],
        0,
        {"calls": [read()], "user_messages": [{"text": "It is ord_2."}]},
        expect=409,
    )
    assert "recorded with other content" in said(other)
    none = step_with(api, run["id"], 0, {"calls": [read()]}, expect=409)
    assert "recorded with other content" in said(none)
    assert Turn.objects.filter(run_id=run["id"]).count() == 1


def test_a_users_confirmation_of_a_held_step_is_in_its_history_once(api, reviewer):
    run = start(api)
    held_body = {"calls": [refund()], "user_messages": [{"text": "Yes, refund the 49.90."}]}
    gate = step_with(api, run["id"], 0, held_body)
    assert gate["status"] == "held"
    held = Turn.objects.get(run_id=run["id"], index=0)
    assert summaries(held.risk_projections[0]["history"]) == ["user said: Yes, refund the 49.90."]

    escalation_resolve(
        escalation_id=gate["escalation"]["id"], reviewer=reviewer, decision="approve"
    )
    # The approved step runs its calls as approved: sending the held step's user messages with
    # it again is refused with the reason (they are recorded), not written twice.
    again = step_with(api, run["id"], 1, held_body, expect=409)
    assert "recorded with that step" in said(again)
    resumed = step_with(api, run["id"], 1, {"calls": [refund()]})
    assert resumed["status"] == "run"
    results(api, run["id"], 1, {"position": 0, "result": "refund rf_1 issued"})

    history = summaries(Turn.objects.get(run_id=run["id"], index=1).projection["history"])
    assert history.count("user said: Yes, refund the 49.90.") == 1
    assert history[-1] == "turn 1: refund_order done"


def test_a_run_with_user_messages_replays_identically_and_its_log_seals_them(api):
    run = start(api)
    step_with(api, run["id"], 0, {"calls": [read()], "user_messages": [{"text": MARKUP}]})
    results(api, run["id"], 0, {"position": 0, "result": "ord_1"})
    step_with(api, run["id"], 1, {"message": "Done.", "user_messages": [{"text": "Thanks."}]})

    replays = list(run_replay(run=Run.objects.get(pk=run["id"])))
    assert [r.status for r in replays] == ["identical", "identical"]
    assert Decision.objects.filter(turn__run_id=run["id"]).count() == 2
    report = run_log_check(run["id"])
    assert (report.ok, report.decisions) == (True, 2), report.problems

    # The log seals what the user said: another text behind the app's back breaks the chain.
    turn = Turn.objects.get(run_id=run["id"], index=1)
    assert turn.proposal["user_messages"] == [{"text": "Thanks."}]
    tamper_rows(
        Turn.objects.filter(pk=turn.pk),
        proposal={**turn.proposal, "user_messages": [{"text": "Refund everything."}]},
    )
    broken = run_log_check(run["id"])
    assert not broken.ok
    assert broken.broken_turn == 1


def test_the_run_page_shows_what_the_user_said_as_text(api, client, auditor):
    run = start(api)
    step_with(
        api,
        run["id"],
        0,
        {"calls": [read()], "user_messages": [{"text": MARKUP + "\nsecond line"}]},
    )
    results(api, run["id"], 0, {"position": 0, "result": "ord_1"})
    client.force_login(auditor)
    body = client.get(reverse("runs:detail", args=[run["id"]])).content.decode()
    assert "what the user said before this step" in body
    assert (
        "&lt;script&gt;alert(&quot;hi&quot;)&lt;/script&gt;&lt;b&gt;yes&lt;/b&gt;, "
        "refund it &amp; thanks<br>second line" in body
    )
    assert "<script>alert" not in body
    assert "<b>yes</b>" not in body


def test_the_auditors_replay_shows_what_the_user_said_in_the_runs_history(
    api,
    client,
    auditor,
):
    run = start(api)
    step_with(api, run["id"], 0, {"calls": [read()], "user_messages": [{"text": MARKUP}]})
    results(api, run["id"], 0, {"position": 0, "result": "ord_1"})
    step_with(api, run["id"], 1, {"calls": [refund()], "user_messages": [{"text": "Go ahead."}]})
    client.force_login(auditor)

    page = client.get(reverse("runs:turn_replay", args=[run["id"], 0]))
    body = page.content.decode()
    assert page.status_code == 200
    assert "The run's history the guardian read" in body
    assert (
        "user said: &lt;script&gt;alert(&quot;hi&quot;)&lt;/script&gt;&lt;b&gt;yes&lt;/b&gt;, "
        "refund it &amp; thanks" in body
    )
    assert "<script>alert" not in body
    assert "turn 0: lookup_order done" in body

    # A step held at the gate: the history its risk question read, the user's answer in it.
    held = client.get(reverse("runs:turn_replay", args=[run["id"], 1])).content.decode()
    assert "asked only the calls' risk" in held
    assert "user said: Go ahead." in held


def test_the_openapi_schema_describes_user_messages_beside_the_calls(client, auditor):
    import yaml

    client.force_login(auditor)
    schema = yaml.safe_load(client.get("/api/schema/").content)
    components = schema["components"]["schemas"]
    step = components["StepInput"]["properties"]
    assert step["user_messages"]["type"] == "array"
    assert step["calls"]["type"] == "array"
    item = components[step["user_messages"]["items"]["$ref"].rsplit("/", 1)[-1]]
    assert item["required"] == ["text"]
    assert item["properties"]["text"]["maxLength"] == 20_000
    assert "user said: " in item["properties"]["text"]["description"]


# ---- Guardian's own loop: a scripted actor plays both sides of the chat ------------------------


def chat_scenario() -> dict:
    return {
        "name": "support-chat",
        "goal": "Refund order ord_4472: the parcel arrived broken.",
        "tools": ["read_order", "issue_refund"],
        "actor": {
            "turns": [
                {
                    "user_messages": ["My parcel arrived broken.", "It is ord_4472."],
                    "calls": [{"tool": "read_order", "arguments": {"order_id": "ord_4472"}}],
                    "message": "Shall I refund the 49.90?",
                },
                {
                    "user_messages": ["Yes please."],
                    "calls": [
                        {
                            "tool": "issue_refund",
                            "arguments": {"order_id": "ord_4472", "amount": 49.9},
                        }
                    ],
                },
                {"calls": [], "message": "Refunded."},
            ]
        },
        "guardian": {"risk": {"issue_refund": {"irreversible": 1.0}}},
    }


def test_a_scripted_actors_user_messages_are_in_the_history_once_across_a_held_step(reviewer):
    from runs.services import run_start
    from tests.runs_helpers import drive

    demo_policy_version()
    run = run_start(
        goal="Refund order ord_4472: the parcel arrived broken.",
        tools=["read_order", "issue_refund"],
        actor="scripted",
        guardian="scripted",
        budgets={"max_turns": 3},
        config={"scenario": chat_scenario()},
    )
    run = drive(run)
    held = Turn.objects.get(run=run, index=1)
    assert summaries(held.risk_projections[0]["history"])[-1] == "user said: Yes please."
    assert held.proposal["user_messages"] == [{"text": "Yes please."}]

    escalation_resolve(
        escalation_id=held.escalations.get().pk, reviewer=reviewer, decision="approve"
    )
    drive(run)
    resumed = Turn.objects.get(run=run, index=2)
    assert "user_messages" not in resumed.proposal  # said once, with the step it came with
    history = summaries(resumed.projection["history"])
    assert history == [
        "user said: My parcel arrived broken.",
        "user said: It is ord_4472.",
        "turn 0: read_order done",
        "user said: Yes please.",
        "turn 1: step held for approval: issue_refund held",
        "turn 1: issue_refund approved by reviewer",
        "turn 2: issue_refund done",
    ]


def test_the_reviewer_of_a_held_step_reads_what_the_user_said_as_text(api, client, reviewer):
    run = start(api)
    gate = step_with(api, run["id"], 0, {"calls": [refund()], "user_messages": [{"text": MARKUP}]})
    client.force_login(reviewer)
    body = client.get(reverse("escalations:detail", args=[gate["escalation"]["id"]])).content
    body = body.decode()
    assert (
        "The user said: <bdi>&lt;script&gt;alert(&quot;hi&quot;)&lt;/script&gt;&lt;b&gt;yes"
        "&lt;/b&gt;, refund it &amp; thanks</bdi>" in body
    )
    assert "<script>alert" not in body


def test_a_long_user_message_is_kept_whole_with_the_step_and_bounded_in_the_history(api):
    from guardian_core.engine.canonical import canonical_json
    from guardian_core.engine.state import TRUNCATION_MARK

    run = start(api)
    long = "Here is everything about my order. " * 570  # 19 950 characters
    messages = [{"text": long}] * 12  # more items than the history keeps
    step_with(api, run["id"], 0, {"calls": [read()], "user_messages": messages})
    results(api, run["id"], 0, {"position": 0, "result": "ord_1"})

    turn = Turn.objects.get(run_id=run["id"], index=0)
    assert turn.proposal["user_messages"] == messages  # nothing lost: the record has it all
    history = turn.projection["history"]
    assert history[-1]["summary"] == "turn 0: lookup_order done"
    said = [item["summary"] for item in history[:-1]]
    assert len(said) >= 1
    assert all(s.startswith("user said: Here is everything") for s in said)
    assert all(s.endswith(TRUNCATION_MARK) and len(s) == 311 for s in said)
    assert len(canonical_json(turn.projection)) <= 8000
    assert turn.projection["truncated"]["history_dropped"] == 13 - len(history)
