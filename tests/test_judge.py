"""The second-tier judge, end to end: configured on a policy version (validated, shown, frozen
once used), asked over real HTTP on an OpenAI-compatible server on 127.0.0.1 when a run's
guardian answer lands in the uncertain band, its confident answer settling it (the run goes on,
a `judge` labelled example is kept, the decision log shows both answers, replay is identical),
and an uncertain or failed judge leaving it to a person."""

import math

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.urls import reverse

from demo.setup import DEMO_QUESTION_SET_VERSION, DEMO_QUESTIONS
from escalations.models import Escalation, ExampleSource, LabelledExample
from escalations.verdicts import escalation_resolve
from guardian_core.engine.thresholds import default_policy
from guardian_core.models import PolicyVersion
from guardian_core.policy_validation import policy_version_problems
from policies.services import policy_version_create
from runs.audit import run_chain_verify
from runs.models import Decision, Run, RunStatus
from runs.replay import guardian_replay, run_replay
from runs.services import run_start
from tests.adapters.servers import completion, question_of, serve
from tests.runs_helpers import drive

pytestmark = pytest.mark.django_db

JUDGE_MODEL = "judge-8b-2026-11"
JUDGE = {"adapter": "openai", "model": JUDGE_MODEL, "conditions": ["integrity", "goal_reached"]}
THRESHOLDS = {c.value: t.as_dict() for c, t in default_policy().thresholds.items()}
# goal_reached: t* 0.80, band [0.75, 0.85]; integrity: t* 0.10, band [0.05, 0.15].
CALM = {
    "integrity": 0.01,
    "infeasible": 0.02,
    "goal_reached": 0.05,
    "drift": {"0": 0, "1": 0, "2": 0.1, "3": 0.3, "4": 0.6},
    "stagnation": 0.05,
}


def judged_version(judge: dict | None = None, **changes) -> PolicyVersion:
    return policy_version_create(
        thresholds=THRESHOLDS,
        question_set=dict(DEMO_QUESTIONS),
        question_set_version=DEMO_QUESTION_SET_VERSION,
        label="with a judge",
        judge=JUDGE if judge is None else judge,
        activate=True,
        **changes,
    )


def judged_run(guardian_turns: list[dict]) -> Run:
    """A scripted run: read an order, then say it is done; the scripted guardian answers
    `guardian_turns` turn by turn (the judge is a real HTTP server)."""
    scenario = {
        "name": "judged",
        "goal": "Read order ord_4472 and report its total.",
        "acceptance_criteria": ["The total is reported"],
        "tools": ["read_order"],
        "actor": {
            "turns": [
                {"calls": [{"tool": "read_order", "arguments": {"order_id": "ord_4472"}}]},
                {"calls": [{"tool": "read_order", "arguments": {"order_id": "ord_4473"}}]},
                {"calls": [], "message": "The total is 49.90."},
            ]
        },
        "guardian": {"model_version": "scripted-band", "turns": guardian_turns, "default": CALM},
    }
    return run_start(
        goal=scenario["goal"],
        acceptance_criteria=scenario["acceptance_criteria"],
        tools=["read_order"],
        actor="scripted",
        guardian="scripted",
        budgets={"max_turns": 6},
        config={"scenario": scenario},
    )


def yes_no(p_yes: float) -> dict:
    """A completion whose top logprobs give P(yes) = p_yes."""
    return completion(
        model=JUDGE_MODEL,
        content="yes" if p_yes >= 0.5 else "no",
        top_logprobs=[("yes", math.log(p_yes)), ("no", math.log(1 - p_yes))],
    )


def judge_server(p_yes_by_question: dict[str, float]):
    """The judge's server: P(yes) per condition, told apart by the question asked."""

    def handle(path, headers, body):
        asked = question_of(body)
        for condition, p_yes in p_yes_by_question.items():
            if DEMO_QUESTIONS[condition] in asked:
                return 200, yes_no(p_yes), 0.0
        return 500, {"error": {"message": "no answer scripted"}}, 0.0

    return serve(handle)


@pytest.fixture
def judge_at(settings):
    """Point the OpenAI-compatible base URL at a server; returns the setter."""

    def point(server) -> None:
        settings.OPENAI_BASE_URL = f"{server.url}/v1"

    return point


# ---- the settings on a policy version -------------------------------------------------------


def problems_of(judge: object) -> list[str]:
    return policy_version_problems(
        thresholds=THRESHOLDS,
        question_set=dict(DEMO_QUESTIONS),
        question_set_version=DEMO_QUESTION_SET_VERSION,
        judge=judge,
    )


def test_no_judge_and_a_full_judge_are_valid():
    assert problems_of({}) == []
    assert problems_of(None) == []
    assert problems_of({**JUDGE, "timeout_seconds": 4}) == []


def test_every_bad_field_of_the_judge_is_named_at_once():
    found = problems_of(
        {
            "adapter": "telepathy",
            "model": "",
            "conditions": ["risk", "goal_reached", "vibes", "goal_reached"],
            "timeout_seconds": 0,
            "temperature": 1,
        }
    )
    assert found == [
        "judge.temperature: unknown key (allowed: adapter, model, conditions, timeout_seconds)",
        "judge.adapter: must be one of openai, got 'telepathy'",
        "judge.model: name the model that judges (the pinned name your server reports), or "
        "untick every condition (no judge settings at all) for no judge",
        "judge.conditions[0]: risk is never judged: irreversible and regulated calls always go "
        "to a person",
        "judge.conditions[2]: unknown condition 'vibes' (known: integrity, infeasible, "
        "goal_reached, drift, stagnation)",
        "judge.conditions: names a condition more than once",
        "judge.timeout_seconds: must be a number of seconds from 0.1 to 120, got 0",
    ]


def test_a_judge_missing_its_fields_or_not_an_object_is_refused():
    assert problems_of({"adapter": "openai"}) == [
        "judge.model: missing (the pinned model name the server reports)",
        "judge.conditions: missing (a list of: integrity, infeasible, goal_reached, drift, "
        "stagnation)",
    ]
    assert problems_of(["goal_reached"]) == [
        'judge: must be an object such as {"adapter": "openai", …}, got list'
    ]


def test_a_bad_judge_is_refused_by_the_service_and_nothing_is_stored():
    with pytest.raises(ValidationError) as refused:
        judged_version({"adapter": "openai", "model": JUDGE_MODEL, "conditions": []})
    assert "judge" in refused.value.message_dict
    assert not PolicyVersion.objects.filter(label="with a judge").exists()


def test_the_api_takes_the_judge_and_names_its_problems(client, admin):
    client.force_login(admin)
    url = reverse("api:policy-version-create")
    base = {
        "question_set_version": DEMO_QUESTION_SET_VERSION,
        "thresholds": THRESHOLDS,
        "question_set": DEMO_QUESTIONS,
    }
    bad = client.post(
        url, {**base, "judge": {"adapter": "openai", "conditions": ["risk"]}}, "application/json"
    )
    assert bad.status_code == 400
    assert any("judge.model: missing" in m for m in bad.json()["judge"])
    assert any("risk is never judged" in m for m in bad.json()["judge"])

    made = client.post(url, {**base, "judge": JUDGE}, "application/json")
    assert made.status_code == 201
    assert made.json()["judge"] == JUDGE
    assert PolicyVersion.objects.get(pk=made.json()["id"]).judge == JUDGE


def test_the_form_takes_the_judge_and_the_version_page_shows_it(client, admin):
    client.force_login(admin)
    data = {
        "label": "judged by form",
        "question_set_version": DEMO_QUESTION_SET_VERSION,
        "judge_model": JUDGE_MODEL,
        "judge_conditions": ["goal_reached", "stagnation"],
        "judge_timeout_seconds": "4",
    }
    for condition, values in THRESHOLDS.items():
        for part in ("c_stop", "c_cont", "delta"):
            data[f"{condition}_{part}"] = values[part]
        data[f"question_{condition}"] = DEMO_QUESTIONS[condition]

    response = client.post(reverse("policies:new"), data)

    assert response.status_code == 302
    version = PolicyVersion.objects.get(label="judged by form")
    assert version.judge == {
        "adapter": "openai",
        "model": JUDGE_MODEL,
        "conditions": ["goal_reached", "stagnation"],
        "timeout_seconds": 4.0,
    }
    page = client.get(response["Location"]).content.decode()
    assert "Second-tier judge" in page
    assert f"<code>{JUDGE_MODEL}</code>" in page
    assert "goal_reached, stagnation" in page


def test_the_form_names_a_judge_without_a_model_under_its_field(client, admin):
    client.force_login(admin)
    data = {"question_set_version": DEMO_QUESTION_SET_VERSION, "judge_conditions": ["drift"]}
    for condition, values in THRESHOLDS.items():
        for part in ("c_stop", "c_cont", "delta"):
            data[f"{condition}_{part}"] = values[part]
        data[f"question_{condition}"] = DEMO_QUESTIONS[condition]

    response = client.post(reverse("policies:new"), data)

    assert response.status_code == 400
    assert response.context["form"].errors["judge_model"] == [
        "name the model that judges (the pinned name your server reports), or untick every "
        "condition (no judge settings at all) for no judge"
    ]


def test_the_judge_of_a_used_version_cannot_change():
    version = judged_version()
    judged_run([CALM])
    with pytest.raises(IntegrityError), transaction.atomic():
        PolicyVersion.objects.filter(pk=version.pk).update(judge={})


# ---- a run with the judge over HTTP ---------------------------------------------------------


def test_the_judge_settles_an_uncertain_answer_and_the_run_goes_on(judge_at, client, auditor):
    judged_version()
    # Turn 0: the guardian is unsure whether the goal is reached; the judge is sure it is not.
    run = judged_run([{**CALM, "goal_reached": 0.79}, CALM, {**CALM, "goal_reached": 0.97}])
    with judge_server({"goal_reached": 0.03}) as server:
        judge_at(server)
        run = drive(run)

    assert run.status == RunStatus.SUCCEEDED
    assert run.final_answer == "The total is 49.90."
    # Asked once, about turn 0's goal_reached, with the borderline note, over real HTTP.
    assert len(server.requests) == 1
    asked = server.requests[0].json
    assert asked["model"] == JUDGE_MODEL
    assert "borderline" in asked["messages"][0]["content"]
    assert DEMO_QUESTIONS["goal_reached"] in question_of(asked)

    decision = Decision.objects.get(turn__run=run, turn__index=0)
    assert decision.outcome == "continue"
    assert decision.answers["goal_reached"] == 0.79  # the guardian's, as it answered
    logged = decision.answers["judge"]
    assert logged["model_version"] == JUDGE_MODEL
    assert logged["settled"] == ["goal_reached"]
    assert logged["answers"]["goal_reached"] == pytest.approx(0.03)
    reason = next(r for r in decision.reasons if r["source"] == "goal_reached")
    assert reason["band"] == "clear"
    assert "settled by the judge" in reason["detail"]
    assert "guardian's p=0.790" in reason["detail"]

    example = LabelledExample.objects.get(source=ExampleSource.JUDGE)
    assert example.condition == "goal_reached"
    # The judge labelled what the policy's band raised: selected as an escalation is.
    assert example.selection == "escalated"
    assert example.label is False
    assert example.probability == pytest.approx(0.03)
    assert example.model_version == JUDGE_MODEL
    assert example.policy_version == run.policy_version
    assert example.projection == decision.turn.projection
    assert example.verdict is None

    replays = list(run_replay(run=run))
    assert [r.status for r in replays] == ["identical"] * 3
    assert run_chain_verify(run).ok

    client.force_login(auditor)
    page = client.get(reverse("runs:detail", kwargs={"run_id": run.pk})).content.decode()
    assert "guardian 0.79 (uncertain) · Judge: 0.03 — settled" in page


def test_an_uncertain_judge_sends_it_to_a_person(judge_at):
    judged_version()
    run = judged_run([{**CALM, "goal_reached": 0.79}])
    with judge_server({"goal_reached": 0.77}) as server:
        judge_at(server)
        run = drive(run)

    assert run.status == RunStatus.WAITING
    escalation = Escalation.objects.get(run=run)
    assert escalation.reason["triggered"][0]["source"] == "goal_reached"
    assert (
        "the judge's p=0.770 is in the band too: to a person"
        in escalation.reason["triggered"][0]["detail"]
    )
    assert not LabelledExample.objects.filter(source=ExampleSource.JUDGE).exists()
    assert [r.status for r in run_replay(run=run)] == ["identical"]


def test_a_judge_that_fails_sends_it_to_a_person(judge_at):
    judged_version()
    run = judged_run([{**CALM, "goal_reached": 0.79}])
    with serve(lambda path, headers, body: (503, {"error": "down"}, 0.0)) as server:
        judge_at(server)
        run = drive(run)

    assert run.status == RunStatus.WAITING
    decision = Decision.objects.get(turn__run=run, turn__index=0)
    assert "malformed" in decision.answers["judge"]["answers"]["goal_reached"]
    assert decision.answers["judge"]["settled"] == []


def test_what_the_judge_settled_stays_settled_after_a_persons_answer(judge_at, reviewer):
    judged_version()
    # Both in their bands: the judge settles goal_reached, is unsure on integrity.
    run = judged_run([{**CALM, "goal_reached": 0.79, "integrity": 0.12}, CALM, CALM])
    with judge_server({"goal_reached": 0.02, "integrity": 0.11}) as server:
        judge_at(server)
        run = drive(run)
        assert run.status == RunStatus.WAITING
        escalation = Escalation.objects.get(run=run)
        assert [r["source"] for r in escalation.reason["triggered"]] == ["integrity"]

        escalation_resolve(
            escalation_id=escalation.pk,
            reviewer=reviewer,
            decision="answer",
            answer={"integrity": False},
        )
        run.refresh_from_db()

    # Without the judge's answer goal_reached would be back in its band: unresolved.
    assert run.status == RunStatus.RUNNING
    assert LabelledExample.objects.filter(source=ExampleSource.JUDGE).count() == 1
    assert LabelledExample.objects.filter(source=ExampleSource.HUMAN).count() == 1


def test_the_guardian_replay_of_a_judged_turn_keeps_the_judges_answer(judge_at):
    judged_version()
    run = judged_run([{**CALM, "goal_reached": 0.79}, CALM, {**CALM, "goal_reached": 0.97}])
    with judge_server({"goal_reached": 0.03}) as server:
        judge_at(server)
        run = drive(run)

    replay = guardian_replay(run=run, index=0)
    assert replay.available
    assert (replay.old_outcome, replay.new_outcome) == ("continue", "continue")


def test_a_run_on_a_version_without_a_judge_never_asks_one(judge_at):
    judged_version({})
    run = judged_run([{**CALM, "goal_reached": 0.79}])
    with judge_server({"goal_reached": 0.03}) as server:
        judge_at(server)
        run = drive(run)

    assert run.status == RunStatus.WAITING
    assert server.requests == []
    assert "judge" not in Decision.objects.get(turn__run=run).answers
