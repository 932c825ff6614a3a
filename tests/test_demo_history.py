"""What `make demo` gives an admin to measure with: the synthetic labelled examples (the gate
and the evaluation page read them) and the demo traffic (monitoring and shadow trials see live
turns)."""

import json

import pytest
from django.core.management import call_command

from demo.examples import (
    DEMO_EXAMPLES_MODEL,
    PER_CONDITION,
    demo_example_lines,
    demo_examples_ensure,
)
from demo.setup import demo_policy_version
from escalations.models import ExampleSource, LabelledExample
from guardian_core.engine.conditions import Condition
from policies.harness import traces_evaluate
from policies.policy_gate import gate_report
from policies.services import policy_version_create
from runs.demo_traffic import demo_traffic_start
from runs.models import Run
from runs.reporting import expectation_problems
from runs.scenarios import scenario_load, scenario_names
from tests.processes import run_manage
from tests.runs_helpers import drive

pytestmark = pytest.mark.django_db


def test_demo_setup_imports_the_synthetic_examples_once_and_says_what_they_are(capsys):
    call_command("demo_setup")
    out = capsys.readouterr().out
    call_command("demo_setup")
    again = capsys.readouterr().out

    examples = LabelledExample.objects.all()
    assert examples.count() == PER_CONDITION * len(Condition)
    assert set(examples.values_list("source", flat=True)) == {ExampleSource.IMPORT}
    assert set(examples.values_list("model_version", flat=True)) == {DEMO_EXAMPLES_MODEL}
    assert f"Imported {PER_CONDITION * len(Condition)} synthetic labelled examples" in out
    assert "synthetic labelled examples" not in again


def test_the_demo_examples_never_join_an_install_that_has_examples_of_its_own():
    demo_policy_version()
    LabelledExample.objects.create(
        condition="integrity",
        projection={"goal": "g"},
        label=True,
        probability=0.4,
        source=ExampleSource.HUMAN,
        question_set_version="q1",
        model_version="real-1",
    )
    assert demo_examples_ensure() == 0
    assert LabelledExample.objects.count() == 1


def test_the_demo_examples_are_the_same_on_every_machine():
    assert demo_example_lines() == demo_example_lines()


def test_the_demo_guardian_is_overconfident_so_there_is_miscalibration_to_show():
    demo_policy_version()
    report = traces_evaluate(lines=demo_example_lines())
    for name, figures in report["conditions"].items():
        assert figures["n"] == PER_CONDITION, name
        assert figures["ece"] > 0.05, name  # miscalibrated, as the module says
        assert figures["auroc"] > 0.8, name  # but it does tell the classes apart


def test_on_the_demo_examples_the_gate_measures_a_draft_and_finds_flips():
    active = demo_policy_version()
    demo_examples_ensure()
    thresholds = json.loads(json.dumps(active.thresholds))
    thresholds["integrity"] = {"c_stop": 1, "c_cont": 3, "delta": 0.05}  # t* 0.10 → 0.25
    draft = policy_version_create(
        thresholds=thresholds,
        question_set=active.question_set,
        question_set_version=active.question_set_version,
        label="integrity looser",
        copied_from=active,
    )

    report = gate_report(candidate=draft)

    assert "note" not in report  # something was compared
    assert report["examples"]["used"] == PER_CONDITION * len(Condition)
    assert report["examples"]["near_miss_share"] > 0
    assert report["flips"]
    assert {flip["condition"] for flip in report["flips"]} == {"integrity"}


def test_demo_traffic_takes_the_scenarios_in_turn_and_stops_at_its_cap(settings):
    settings.GUARDIAN_DEMO_TRAFFIC_MAX_RUNS = 3
    demo_policy_version()

    started = [demo_traffic_start() for _ in range(4)]

    assert started[3] is None
    assert [run.config["name"] for run in started[:3]] == scenario_names()[:3]
    assert all(run.config["demo_traffic"] for run in started[:3])
    # The real guardian judges the traffic, never a script.
    assert {run.guardian for run in started[:3]} == {"local"}
    assert Run.objects.count() == 3


def test_every_traffic_run_ends_as_its_scenario_says_on_the_local_guardian(settings):
    settings.GUARDIAN_DEMO_TRAFFIC_MAX_RUNS = len(scenario_names())
    demo_policy_version()
    for _ in range(len(scenario_names())):
        run = drive(demo_traffic_start())
        assert run.last_error == "", (run.config["name"], run.last_error)
        expect = scenario_load(run.config["name"])["expect"]
        assert expectation_problems(run, expect) == [], run.config["name"]


def test_the_demo_check_reads_the_first_run_of_each_scenario_not_the_traffic(settings):
    # The default deadline: the demo's runs are judged by the local guardian, whose answer can
    # wait on a full garbage collection of a test process holding the training corpus.
    call_command("demo_setup")
    for run in Run.objects.all():
        drive(run)
    for _ in range(len(scenario_names())):
        drive(demo_traffic_start())
    call_command("demo", "--existing", "--timeout", "5")  # raises if a scenario's first run failed


def test_beat_starts_demo_traffic_only_when_it_is_asked_for():
    code = (
        "from django.conf import settings; "
        "print(settings.CELERY_BEAT_SCHEDULE.get('demo-traffic', {}).get('schedule'))"
    )
    on = run_manage("shell", "-c", code, GUARDIAN_DEMO_TRAFFIC_SECONDS="45", GUARDIAN_ENV_FILE="")
    off = run_manage("shell", "-c", code, GUARDIAN_DEMO_TRAFFIC_SECONDS=None, GUARDIAN_ENV_FILE="")
    assert on.stdout.splitlines()[-1] == "45.0", on.stderr
    assert off.stdout.splitlines()[-1] == "None", off.stderr
