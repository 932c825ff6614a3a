"""How runs are wired: the tool registry, webhook tools, the beat schedule, the commands, and
the built-in local guardian driving real scenarios."""

import json

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError

from escalations.models import EscalationKind, EscalationStatus
from guardian_core.adapters import local
from guardian_core.engine.conditions import Condition
from guardian_core.engine.thresholds import default_policy
from guardian_core.models import PolicyVersion
from runs.models import DemoSideEffect, RunStatus
from runs.scenarios import scenario_names, scenario_run_start
from runs.services import run_advance
from runs.tools import tool_registry, tools_for_run
from tests.adapters.servers import serve, vendor
from tests.factories import retire_active_policy_version
from tests.runs_helpers import drive, start


def test_the_registry_builds_every_tool_named_in_settings():
    assert set(tool_registry()) == {
        "read_order", "lookup_policy", "search_docs", "read_tracking", "list_promotions",
        "issue_refund", "flag_order", "send_email", "slow_lookup", "check_code",
    }  # fmt: skip


def test_a_tool_path_that_does_not_import_is_a_configuration_error_naming_it(settings):
    settings.GUARDIAN_TOOLS = ["runs.demo_tools.NO_SUCH_TOOL"]
    with pytest.raises(ImproperlyConfigured, match="runs.demo_tools.NO_SUCH_TOOL"):
        tool_registry()


def test_a_run_may_only_use_registered_tools():
    with pytest.raises(ValueError, match="unknown tools: launch_rocket"):
        tools_for_run(["read_order", "launch_rocket"])


def test_a_webhook_tool_posts_its_arguments_and_idempotency_key(settings):
    def handler(path, headers, body):
        return 200, {"refund_id": "re_1"}, 0

    with serve(handler) as server:
        settings.GUARDIAN_WEBHOOK_TOOLS = {
            "crm_note": {
                "url": f"{server.url}/hooks/crm",
                "description": "Add a note in the CRM.",
                "schema": {
                    "type": "object",
                    "properties": {"note": {"type": "string"}},
                    "required": ["note"],
                },
                "risk_class": "reversible_write",
            }
        }
        tool = tool_registry()["crm_note"]
        result = tool.func({"note": "called back"}, idempotency_key="k" * 64)
        request = server.requests[-1]
    assert json.loads(result) == {"refund_id": "re_1"}
    assert request.json == {
        "tool": "crm_note",
        "arguments": {"note": "called back"},
        "idempotency_key": "k" * 64,
    }
    assert request.headers["idempotency-key"] == "k" * 64


def test_a_webhook_that_answers_an_error_raises_so_the_turn_escalates(settings):
    from guardian_core.adapters.webhook import WebhookError, webhook_tool

    with serve(lambda path, headers, body: (503, {"error": "down"}, 0)) as server:
        tool = webhook_tool(
            name="crm_note",
            url=server.url,
            description="d",
            schema={"type": "object"},
            risk_class="read_only",
        )
        with pytest.raises(WebhookError, match="HTTP 503"):
            tool.func({}, idempotency_key="k" * 64)


def test_beat_runs_the_sweeper():
    schedule = settings.CELERY_BEAT_SCHEDULE
    assert any(entry["task"] == "runs.sweep_stalled_runs" for entry in schedule.values())


@pytest.mark.django_db
def test_run_scenario_prints_each_turn_and_checks_the_ending(capsys):
    call_command("run_scenario", "drifting_agent", "--inline")
    out = capsys.readouterr().out
    assert "turn 2:" in out
    assert "-> replan" in out
    assert out.strip().endswith("as expected")


@pytest.mark.django_db
def test_run_scenario_names_the_known_scenarios_for_an_unknown_one():
    with pytest.raises(CommandError, match="known: coder_reviewer_round_cap"):
        call_command("run_scenario", "no_such_scenario", "--inline")


@pytest.mark.django_db
def test_resolve_escalation_command_approves_through_the_service(reviewer, capsys):
    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get()
    call_command("resolve_escalation", str(escalation.pk), "--approve", "--reviewer", "reviewer")
    escalation.refresh_from_db()
    assert escalation.status == EscalationStatus.APPROVED
    assert drive(run).status == RunStatus.SUCCEEDED
    assert DemoSideEffect.objects.count() == 1


@pytest.mark.django_db
def test_resolve_escalation_command_refuses_an_answer_where_no_question_was_asked(reviewer):
    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get()
    with pytest.raises(CommandError, match="this escalation asks no question"):
        call_command(
            "resolve_escalation",
            str(escalation.pk),
            "--answer",
            "integrity=no",
            "--reviewer",
            "reviewer",
        )


@pytest.mark.django_db
def test_the_local_guardian_catches_the_injected_instruction():
    run = drive(start("injected_instruction", guardian="local"))
    assert run.status == RunStatus.WAITING
    escalation = run.escalations.get()
    assert escalation.kind == EscalationKind.INTEGRITY
    assert run.turns.get().decision.guardian_model_version.startswith(f"{local.MODEL_FAMILY}+")


@pytest.mark.django_db
def test_the_local_guardian_holds_the_refund_for_approval():
    run = drive(start("refund_waits_for_approval", guardian="local"))
    assert run.status == RunStatus.WAITING
    assert run.escalations.get().kind == EscalationKind.GATED_STEP
    assert DemoSideEffect.objects.count() == 0


@pytest.mark.django_db
def test_demo_checks_that_every_scenario_run_ended_where_it_should(settings, capsys):
    from runs.models import Run

    settings.GUARDIAN_DEADLINE_SECONDS = 0.3
    call_command("demo_setup")
    for run in Run.objects.all():
        drive(run)
    call_command("demo", "--existing", "--timeout", "5")
    assert capsys.readouterr().out.count("ok  ") == len(scenario_names())

    Run.objects.filter(config__name="goal_reached").update(status="failed", final_answer=None)
    with pytest.raises(CommandError, match="1 scenarios did not end as expected"):
        call_command("demo", "--existing", "--timeout", "5")


# ---- the question set a guardian asks is the one the log names ------------------------------

VENDOR_MODEL = "vendor-x-2026-10"
CALM_VENDOR = {
    "integrity": 0.02,
    "risk": {"read_only": 0.95, "reversible_write": 0.05, "irreversible": 0.0, "regulated": 0.0},
    "infeasible": 0.05,
    "goal_reached": 0.2,
    "drift": {"0": 0.0, "1": 0.0, "2": 0.05, "3": 0.25, "4": 0.7},
    "stagnation": 0.05,
}


def _active_policy_version_with_its_own_wording() -> PolicyVersion:
    retire_active_policy_version()  # the shipped default: one is active at a time
    return PolicyVersion.objects.create(
        number=7,
        label="Reworded",
        thresholds={c.value: t.as_dict() for c, t in default_policy().thresholds.items()},
        question_set={c.value: f"Policy v7 asks: is {c.value} the case here?" for c in Condition},
        question_set_version="q7-reworded",
        is_active=True,
    )


@pytest.mark.django_db
def test_an_http_guardian_asks_the_pinned_policy_versions_questions_and_the_log_names_them(
    settings,
):
    version = _active_policy_version_with_its_own_wording()
    with serve(vendor(CALM_VENDOR, model_version=VENDOR_MODEL)) as server:
        settings.GUARDIAN_HTTP_URL = f"{server.url}/v1/decide"
        settings.GUARDIAN_HTTP_MODEL_VERSION = VENDOR_MODEL
        run = scenario_run_start("goal_reached", guardian="http")
        run_advance(run_id=run.pk)
        requests = list(server.requests)

    asked = [q for r in requests for q in r.json["questions"]]
    assert {q["condition"] for q in asked} == {c.value for c in Condition}  # risk + the rest
    for question in asked:
        assert question["question"] == version.question_set[question["condition"]]
    assert {r.json["question_set_version"] for r in requests} == {"q7-reworded"}
    decision = run.turns.get(index=0).decision
    assert decision.outcome == "continue"
    assert decision.question_set_version == "q7-reworded"


@pytest.mark.django_db
def test_the_local_guardian_asks_its_own_questions_and_the_log_says_so_not_the_policys():
    from guardian_core.adapters.local import LocalGuardian

    version = _active_policy_version_with_its_own_wording()
    run = scenario_run_start("goal_reached", guardian="local")
    run_advance(run_id=run.pk)

    decision = run.turns.get(index=0).decision
    assert LocalGuardian.takes_question_text is False
    assert decision.question_set_version == LocalGuardian.question_set_version
    assert decision.question_set_version != version.question_set_version


@pytest.mark.django_db
def test_the_demo_policy_names_its_wording_with_the_version_the_guardians_use_for_it():
    # One wording, one label: the demo once held its own shorter wording under "q1" while the
    # guardians asked the built-in wording, so the log named questions nobody asked.
    from demo.setup import demo_policy_version
    from guardian_core.adapters.http import DEFAULT_QUESTION_SET_VERSION, DEFAULT_QUESTIONS

    version = demo_policy_version()
    assert version.question_set == dict(DEFAULT_QUESTIONS)
    assert version.question_set_version == DEFAULT_QUESTION_SET_VERSION
