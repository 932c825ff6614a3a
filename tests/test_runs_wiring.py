"""How runs are wired: the tool registry, webhook tools, the beat schedule, the commands, and
the built-in local guardian driving real scenarios."""

import json

import pytest
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError

from escalations.models import EscalationKind, EscalationStatus
from runs.models import DemoSideEffect, RunStatus
from runs.tools import tool_registry, tools_for_run
from tests.adapters.servers import serve
from tests.runs_helpers import drive, start


def test_the_registry_builds_every_tool_named_in_settings():
    assert set(tool_registry()) == {
        "read_order", "lookup_policy", "search_docs", "issue_refund", "send_email",
        "slow_lookup", "check_code",
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
    assert run.turns.get().decision.guardian_model_version.startswith("local-1+")


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
    assert capsys.readouterr().out.count("ok  ") == 8

    Run.objects.filter(config__name="goal_reached").update(status="failed", final_answer=None)
    with pytest.raises(CommandError, match="1 scenarios did not end as expected"):
        call_command("demo", "--existing", "--timeout", "5")
