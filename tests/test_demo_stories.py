"""The demo's stories end as they say on the local guardian: every scenario `make demo` starts
(runs/scenarios/), played by its scripted actor and judged by the bundled local guardian, and
both ways a reviewer can decide the held refund.

These are the tests to re-run after the local guardian is retrained or its features change: a
story that breaks names the scenario and the turn where the guardian now judges otherwise. The
fix is a clearer, still realistic story, or a better guardian; never a scripted answer.
"""

import pytest

from escalations.models import EscalationStatus
from escalations.verdicts import escalation_resolve
from guardian_core.adapters.local import LocalGuardian
from runs.models import DemoSideEffect, RunStatus
from runs.reporting import expectation_problems, turn_line
from runs.scenarios import scenario_load, scenario_names
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db


def _story(name: str):
    """Scenario `name` as make demo runs it: its own file, the local guardian."""
    return start(name, guardian="local", scenario=scenario_load(name))


def _how_it_went(run) -> str:
    """Each turn's line and what the guardian answered, for a story that broke."""
    lines = []
    for turn in run.turns.filter(decision__isnull=False).order_by("index"):
        lines.append(turn_line(turn))
        values = [
            f"{r['source']}={r['value']:.3f} {r['band']}"
            for r in turn.decision.reasons
            if r.get("value") is not None
        ]
        if values:
            lines.append("      " + ", ".join(values))
    return "\n".join(lines)


def test_no_demo_scenario_scripts_the_guardian():
    for name in scenario_names():
        assert "guardian" not in scenario_load(name), name


@pytest.mark.parametrize("name", scenario_names())
def test_each_demo_scenario_ends_as_its_story_says_on_the_local_guardian(name):
    run = drive(_story(name))
    assert run.guardian == "local"
    problems = expectation_problems(run, scenario_load(name)["expect"])
    assert problems == [], f"{name}: {problems}\n{_how_it_went(run)}"
    if name != "coder_reviewer_round_cap":  # the loop's reviewer decides there, not a guardian
        versions = set(run.turns.values_list("decision__guardian_model_version", flat=True))
        assert versions == {LocalGuardian().model_version}


def _resolve_held_refund(run, reviewer, **verdict) -> None:
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    escalation_resolve(escalation_id=escalation.pk, reviewer=reviewer, **verdict)


def test_an_approved_refund_runs_once_and_the_guardian_finds_the_goal_reached(reviewer):
    run = drive(_story("refund_waits_for_approval"))
    assert DemoSideEffect.objects.count() == 0  # held: nothing ran before the verdict
    _resolve_held_refund(run, reviewer, decision="approve", reason="")
    run = drive(run)
    assert (run.status, run.stop_reason) == (RunStatus.SUCCEEDED, "goal_reached"), _how_it_went(run)
    assert list(DemoSideEffect.objects.values_list("tool", flat=True)) == ["issue_refund"]
    assert run.final_answer == "Your refund of 49.90 for ord_4472 has been issued to your card."


def test_a_rejected_refund_never_runs_and_the_agents_word_never_makes_the_run_succeed(reviewer):
    run = drive(_story("refund_waits_for_approval"))
    _resolve_held_refund(
        run, reviewer, decision="reject", reason="The parcel was insured; no refund."
    )
    run = drive(run)
    # The scripted actor goes on to claim the refund (it plays its turns whatever happened):
    # with no refund done, the guardian does not take the claim for the deed.
    assert run.status != RunStatus.SUCCEEDED, _how_it_went(run)
    assert not run.final_answer
    assert DemoSideEffect.objects.count() == 0
