"""The REST API: JSON for the right role, an OpenAPI schema that lists every endpoint, and bad
input refused with a 400 naming the field, never a 500 or a run that can never run."""

import json

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from guardian_core.api import API_ENDPOINTS
from guardian_core.pagination import MAX_LIMIT
from runs.models import Run
from runs.services import RunError, run_start
from tests.factories import make_escalation, make_run

pytestmark = pytest.mark.django_db


def test_auditors_read_runs_as_json(client, auditor):
    run = make_run(goal="Refund order ord_9")
    client.force_login(auditor)
    body = client.get("/api/runs/").json()
    assert len(body["results"]) == 1
    assert body["next"] is None
    assert body["results"][0]["goal"] == "Refund order ord_9"
    assert body["results"][0]["policy_version"] == run.policy_version.number
    assert client.get(f"/api/runs/{run.pk}/").json()["id"] == run.pk


def test_a_missing_run_is_404(client, auditor):
    client.force_login(auditor)
    assert client.get("/api/runs/999999/").status_code == 404


@pytest.mark.parametrize("path", ["/api/no-such-thing/", "/api/runs/1.5/turns/%0A/"])
def test_any_other_path_under_the_api_is_a_json_404(client, auditor, path):
    """Schemathesis found the second: a newline in the path slipped past the catch-all."""
    client.force_login(auditor)
    response = client.get(path)
    assert response.status_code == 404
    assert response["Content-Type"].startswith("application/json")


def test_reviewers_read_open_escalations_as_json(client, reviewer):
    escalation = make_escalation()
    client.force_login(reviewer)
    body = client.get("/api/escalations/").json()
    assert [item["id"] for item in body["results"]] == [escalation.pk]
    assert body["results"][0]["turn_index"] == escalation.turn.index


def test_the_openapi_schema_lists_every_api_endpoint(client, auditor):
    client.force_login(auditor)
    schema = yaml.safe_load(client.get("/api/schema/").content)
    assert schema["openapi"].startswith("3.")
    # Every endpoint the index lists, but the schema itself and the docs page made of it.
    listed = {path for name, _, path, _ in API_ENDPOINTS if name not in ("docs", "schema")}
    assert set(schema["paths"]) == listed | {"/api/"}


def test_unsafe_api_methods_are_not_allowed_on_read_endpoints(client, auditor):
    client.force_login(auditor)
    assert client.post("/api/runs/", {}, content_type="application/json").status_code in {403, 405}


def test_an_admin_starts_a_run_that_pins_the_active_policy(client, admin):
    from demo.setup import demo_policy_version

    version = demo_policy_version()
    client.force_login(admin)
    response = client.post(
        "/api/runs/start/",
        {
            "goal": "Tell the customer when ord_1001 ships",
            "tools": ["read_order"],
            "actor": "scripted",
            "guardian": "local",
            "budgets": {"max_turns": 5},
            "config": {"scenario": {"name": "api", "goal": "g", "actor": {"turns": []}}},
        },
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["status"], body["policy_version"]) == ("running", version.number)


def test_starting_a_run_with_bad_input_names_every_bad_field(client, admin):
    from demo.setup import demo_policy_version

    demo_policy_version()
    client.force_login(admin)
    response = client.post(
        "/api/runs/start/",
        {"tools": "read_order", "actor": "hal9000", "guardian": "scripted"},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert set(response.json()) == {"goal", "tools", "actor"}


def test_starting_a_run_with_an_unknown_tool_is_refused_with_the_tool_named(client, admin):
    from demo.setup import demo_policy_version

    demo_policy_version()
    client.force_login(admin)
    response = client.post(
        "/api/runs/start/",
        {"goal": "g", "tools": ["launch_rocket"], "actor": "scripted", "guardian": "scripted"},
        content_type="application/json",
    )
    assert response.status_code == 400
    assert "launch_rocket" in " ".join(response.json()["tools"])


def test_cancelling_a_finished_run_is_refused(client, admin):
    run = make_run(status="succeeded", final_answer="done")
    client.force_login(admin)
    response = client.post(f"/api/runs/{run.pk}/cancel/")
    assert response.status_code == 400


# ---- bad input: a 400 naming the field, and no run ---------------------------------------------

SCENARIO = {"name": "api", "goal": "g", "actor": {"turns": []}}


@pytest.fixture
def start(client, admin):
    """POST a run to /api/runs/start/ as an admin: a valid scripted run unless overridden."""
    from demo.setup import demo_policy_version

    demo_policy_version()
    client.force_login(admin)

    def post(body: dict | None = None, *, raw: str | None = None, **overrides):
        data = {
            "goal": "Tell the customer when ord_1001 ships",
            "tools": ["read_order"],
            "actor": "scripted",
            "guardian": "local",
            "config": {"scenario": SCENARIO},
            **overrides,
        }
        text = raw if raw is not None else json.dumps(body if body is not None else data)
        return client.post("/api/runs/start/", text, content_type="application/json")

    return post


@pytest.mark.parametrize("bad", [r"\u0000", r"\ud800"], ids=["nul", "lone_surrogate"])
@pytest.mark.parametrize(
    ("field", "template"),
    [
        ("goal", '"x{bad}y"'),
        ("actor", '"x{bad}"'),  # DRF's "not a valid choice" echoes the value back
        ("guardian", '"x{bad}"'),
        ("acceptance_criteria", '["fine", "x{bad}"]'),
        ("tools", '["read_order{bad}"]'),
        ("budgets", '{{"max_turns": "{bad}"}}'),
        ("budgets", '{{"max_{bad}turns": 3}}'),
        ("config", '{{"scenario": {{"name": "api", "goal": "g{bad}", "actor": {{"turns": []}}}}}}'),
        (
            "config",
            '{{"name": "x{bad}", "scenario": {{"name": "a", "goal": "g", "actor": '
            '{{"turns": []}}}}}}',
        ),
    ],
)
def test_a_nul_or_a_lone_surrogate_anywhere_is_a_400_naming_the_field_not_a_500(
    start, field, template, bad
):
    # PostgreSQL refuses both in text and jsonb (UntranslatableCharacter): the insert was a 500.
    body = json.dumps(
        {
            "goal": "g",
            "tools": ["read_order"],
            "actor": "scripted",
            "guardian": "local",
            "config": {"scenario": SCENARIO},
        }
    )
    raw = body[:-1] + f', "{field}": ' + template.format(bad=bad) + "}"
    response = start(raw=raw)
    assert response.status_code == 400, response.content
    assert field in response.json()
    assert Run.objects.count() == 0


@pytest.mark.parametrize("depth", [100_000, 30], ids=["100000_levels", "past_the_limit"])
def test_a_config_nested_too_deeply_is_a_400_naming_config_not_a_recursion_error(start, depth):
    deep = "[" * depth + "]" * depth
    body = (
        '{"goal": "g", "tools": [], "actor": "scripted", "guardian": "local", '
        f'"config": {{"scenario": {json.dumps(SCENARIO)}, "name": {deep}}}}}'
    )
    response = start(raw=body)
    assert response.status_code == 400, response.content
    assert "nested deeper" in " ".join(response.json()["config"])
    assert Run.objects.count() == 0


def test_an_oversized_config_is_a_400_naming_config(start):
    response = start(config={"scenario": SCENARIO, "name": "x" * 300_000})
    assert response.status_code == 400
    assert "config" in response.json()


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("limit=99999999999999999999", "limit"),
        # The runs list pages by keyset, like the runs page: an offset is named, not ignored.
        ("offset=99999999999999999999", "offset"),
        (f"limit={MAX_LIMIT + 1}", "limit"),
        ("limit=0", "limit"),
        ("limit=abc", "limit"),
        ("offset=-1", "offset"),
    ],
)
def test_an_absurd_limit_or_offset_is_a_400_naming_it_not_a_bigint_500(
    client, auditor, query, parameter
):
    make_run()
    client.force_login(auditor)
    response = client.get(f"/api/runs/?{query}")
    assert response.status_code == 400
    assert parameter in response.json()


def test_a_page_is_bounded_even_when_a_caller_asks_for_every_row(client, auditor):
    client.force_login(auditor)
    assert client.get(f"/api/runs/?limit={MAX_LIMIT}").status_code == 200
    assert client.get(f"/api/runs/?limit={MAX_LIMIT + 1}").status_code == 400


def test_the_run_list_is_newest_first_across_pages_not_oldest_first(client, auditor):
    # The bug: the turn count's GROUP BY dropped the model's ordering, so the first page held
    # the oldest runs. More runs than a page, made oldest first, with turns to count.
    from datetime import timedelta

    from django.utils import timezone

    from tests.factories import make_policy_version, make_turn

    version = make_policy_version()
    start = timezone.now() - timedelta(days=1)
    made = []
    for i in range(55):
        run = make_run(policy_version=version)
        Run.objects.filter(pk=run.pk).update(created_at=start + timedelta(minutes=i))
        made.append(run)
    make_turn(run=made[-1], index=0)
    make_turn(run=made[-1], index=1)
    newest_first = [run.pk for run in reversed(made)]
    client.force_login(auditor)
    first = client.get("/api/runs/").json()
    assert [item["id"] for item in first["results"]] == newest_first[:50]
    assert first["results"][0]["turn_count"] == 2
    assert first["results"][1]["turn_count"] == 0
    second = client.get(first["next"]).json()
    assert [item["id"] for item in second["results"]] == newest_first[50:]
    assert second["next"] is None


@pytest.mark.parametrize(
    "budgets",
    [
        {"max_turns": "abc"},
        {"max_turns": 0},
        {"max_turns": -5},
        {"max_turns": True},
        {"max_turns": 2.5},
        {"max_tokens": 0},
        {"max_cost": 0},
        {"max_cost": "1"},
        {"max_wall_seconds": -1},
        {"max_turn": 5},
    ],
)
def test_budgets_a_run_could_never_run_with_are_refused_before_it_exists(start, budgets):
    response = start(budgets=budgets)
    assert response.status_code == 400, response.content
    [key] = budgets
    assert f"budgets.{key}" in " ".join(response.json()["budgets"])
    assert Run.objects.count() == 0


def test_every_bad_budget_and_config_key_is_named_at_once(start):
    response = start(
        budgets={"max_turns": 0, "max_cost": -1, "speed": 3},
        config={"scenario": SCENARIO, "actor_modle": "gpt"},
    )
    assert response.status_code == 400
    body = response.json()
    named = " ".join(body["budgets"] + body["config"])
    for where in ("budgets.max_turns", "budgets.max_cost", "budgets.speed", "config.actor_modle"):
        assert where in named


def test_a_scripted_actor_without_a_scenario_is_refused_instead_of_failing_three_times(start):
    response = start(config={})
    assert response.status_code == 400
    assert "config.scenario" in " ".join(response.json()["config"])
    assert Run.objects.count() == 0


def test_a_scripted_guardian_without_a_scenario_is_refused(start):
    response = start(actor="openai", guardian="scripted", config={})
    assert response.status_code == 400
    assert "guardian" in " ".join(response.json()["config"])


def test_an_invalid_scenario_is_refused_with_every_problem(start):
    response = start(config={"scenario": {"name": "Bad Name", "actor": {"turns": "no"}}})
    assert response.status_code == 400
    problems = response.json()["config"]
    named = " ".join(problems)
    assert "config.scenario" in named
    assert "goal" in named
    assert "turns" in named
    # Each problem names its place once: config.scenario.name, not config.scenario.scenario.name
    assert any(p.startswith("config.scenario.name: 'Bad Name'") for p in problems), problems
    assert "scenario.scenario" not in named


@pytest.mark.parametrize(
    ("actor", "guardian", "config"),
    [
        ("openai", "local", {"scenario": SCENARIO}),  # nothing reads it
        ("openai", "local", {"coder_model": "m"}),
        ("openai", "http", {"actor_model": ""}),
        ("coder_reviewer", "local", {"actor_model": "m"}),
        ("coder_reviewer", "local", {"max_rounds": 0}),
        ("coder_reviewer", "local", {"review_loop": {"coder": "x"}}),
    ],
)
def test_an_adapter_refuses_config_it_does_not_read_or_cannot_use(start, actor, guardian, config):
    response = start(actor=actor, guardian=guardian, config=config)
    assert response.status_code == 400, response.content
    assert "config" in response.json()


@pytest.mark.parametrize(
    ("actor", "config"),
    [
        ("openai", {"actor_model": "qwen2.5"}),
        ("coder_reviewer", {"coder_model": "a", "reviewer_model": "b", "max_rounds": 3}),
        ("coder_reviewer", {"review_loop": {"coder": ["x"], "reviewer": ["y"], "max_rounds": 2}}),
    ],
)
def test_each_adapter_accepts_the_keys_it_reads(start, actor, config):
    response = start(actor=actor, guardian="local", config=config)
    assert response.status_code == 201, response.content


@pytest.mark.parametrize(
    ("actor", "guardian", "config", "field"),
    [
        ("openai", "local", {}, "config.actor_model"),
        ("coder_reviewer", "local", {"coder_model": "a"}, "config.reviewer_model"),
        ("openai", "openai", {"actor_model": "m"}, "OPENAI_GUARDIAN_MODEL"),
        ("openai", "http", {"actor_model": "m"}, "GUARDIAN_HTTP_URL"),
        ("openai", "onnx", {"actor_model": "m"}, "GUARDIAN_ONNX_MODELS"),
    ],
)
def test_a_model_adapter_with_no_model_anywhere_is_refused_instead_of_failing_every_turn(
    start, settings, actor, guardian, config, field
):
    for name in ("OPENAI_ACTOR_MODEL", "OPENAI_CODER_MODEL", "OPENAI_REVIEWER_MODEL"):
        setattr(settings, name, "")
    settings.OPENAI_GUARDIAN_MODEL = ""
    settings.GUARDIAN_HTTP_URL = ""
    response = start(actor=actor, guardian=guardian, config=config)
    assert response.status_code == 400, response.content
    assert field in json.dumps(response.json())


def test_an_unknown_actor_or_guardian_is_refused_by_run_start_too():
    from demo.setup import demo_policy_version

    demo_policy_version()
    with pytest.raises(RunError) as caught:
        run_start(goal="g", tools=[], actor="hal9000", guardian="oracle", budgets={"max_turns": 0})
    message = str(caught.value)
    assert "actor" in message
    assert "guardian" in message
    assert "budgets.max_turns" in message
    assert Run.objects.count() == 0


# ---- the scripted adapters: demo and tests only -----------------------------------------------


@override_settings(GUARDIAN_ALLOW_SCRIPTED_ADAPTERS=False)
@pytest.mark.parametrize(
    ("actor", "guardian", "config", "field"),
    [
        ("scripted", "local", {"scenario": SCENARIO}, "actor"),
        ("openai", "scripted", {"scenario": SCENARIO}, "guardian"),
        ("coder_reviewer", "local", {"review_loop": {"coder": [], "reviewer": []}}, "config"),
    ],
)
def test_a_caller_cannot_script_the_guardian_or_a_success_where_scripted_adapters_are_off(
    start, actor, guardian, config, field
):
    response = start(actor=actor, guardian=guardian, config=config)
    assert response.status_code == 400, response.content
    assert "GUARDIAN_ALLOW_SCRIPTED_ADAPTERS" in " ".join(response.json()[field])
    assert Run.objects.count() == 0


@override_settings(GUARDIAN_ALLOW_SCRIPTED_ADAPTERS=False)
def test_the_commands_cannot_start_a_scripted_run_where_scripted_adapters_are_off(db):
    with pytest.raises(CommandError, match="GUARDIAN_ALLOW_SCRIPTED_ADAPTERS"):
        call_command("run_scenario", "goal_reached", "--inline")
    assert Run.objects.count() == 0


@override_settings(GUARDIAN_ALLOW_SCRIPTED_ADAPTERS=False)
def test_real_adapters_still_start_where_scripted_adapters_are_off(start):
    response = start(actor="openai", guardian="local", config={"actor_model": "qwen2.5"})
    assert response.status_code == 201, response.content


@override_settings(GUARDIAN_ALLOW_SCRIPTED_ADAPTERS=True)
def test_the_scripted_adapters_start_where_they_are_allowed(start):
    assert start(guardian="scripted").status_code == 201
