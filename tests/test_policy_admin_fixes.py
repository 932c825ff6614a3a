"""What a new admin found in issue 11's admin features, each fixed and held here: links of
the form's problem summary, the judge's words and limits, where the judge lives, the
recalibration refusals, and the learning commands' words."""

import io
import socket

import pytest
from django.core.management import CommandError, call_command
from django.core.management.base import OutputWrapper
from django.urls import reverse

from demo.setup import DEMO_QUESTION_SET_VERSION, DEMO_QUESTIONS
from escalations.models import Escalation, ExampleSource, LabelledExample
from guardian_core.models import GuardianModelVersion, PolicyVersion
from policies.management.commands.evaluate import _progress_bar
from policies.management.commands.recalibrate import version_table
from runs.models import RunStatus
from tests.runs_helpers import drive
from tests.test_judge import CALM, JUDGE, JUDGE_MODEL, THRESHOLDS, judged_run, judged_version
from tests.test_learning_loop import (  # noqa: F401 (fixtures)
    PIN,
    _local_version,
    _shifted_population,
    active_version,
    overconfident_vendor,
)

pytestmark = pytest.mark.django_db


def _form_data(**changes) -> dict:
    data = {"question_set_version": DEMO_QUESTION_SET_VERSION}
    for condition, values in THRESHOLDS.items():
        for part in ("c_stop", "c_cont", "delta"):
            data[f"{condition}_{part}"] = values[part]
        data[f"question_{condition}"] = DEMO_QUESTIONS[condition]
    return {**data, **changes}


def _api_base() -> dict:
    return {
        "question_set_version": DEMO_QUESTION_SET_VERSION,
        "thresholds": THRESHOLDS,
        "question_set": DEMO_QUESTIONS,
    }


# ---- the new-version form and the API ---------------------------------------------------------


def test_the_problem_link_of_a_group_of_boxes_lands_on_the_group(client, admin):
    client.force_login(admin)
    page = client.post(
        reverse("policies:new"), _form_data(judge_conditions=["not-a-condition"])
    ).content.decode()

    assert 'href="#id_judge_conditions">Second-tier judge: conditions it may settle</a>' in page
    assert '<legend id="id_judge_conditions">' in page  # the link's target exists


def test_the_problem_link_of_the_roles_lands_on_the_group(client, admin):
    client.force_login(admin)
    page = client.post(
        reverse("people:list"), {"username": "newcomer", "roles": ["not-a-role"]}
    ).content.decode()

    assert 'href="#id_roles">' in page
    assert '<legend id="id_roles">Roles</legend>' in page


def test_a_judge_without_a_model_says_what_to_do(client, admin):
    client.force_login(admin)
    response = client.post(reverse("policies:new"), _form_data(judge_conditions=["drift"]))
    (said,) = response.context["form"].errors["judge_model"]
    assert said.startswith("name the model that judges")
    assert "untick every condition" in said

    api = client.post(
        reverse("api:policy-version-create"),
        {**_api_base(), "judge": {**JUDGE, "model": " "}},
        "application/json",
    )
    assert api.status_code == 400
    assert any("judge.model: name the model that judges" in m for m in api.json()["judge"])


@pytest.mark.parametrize("timeout", [0.01, 0.09, 120.5])
def test_the_api_refuses_a_judge_timeout_the_form_refuses(client, admin, timeout):
    before = list(PolicyVersion.objects.values_list("pk", flat=True))  # the shipped default
    client.force_login(admin)
    api = client.post(
        reverse("api:policy-version-create"),
        {**_api_base(), "judge": {**JUDGE, "timeout_seconds": timeout}},
        "application/json",
    )
    assert api.status_code == 400
    assert api.json()["judge"] == [
        f"judge.timeout_seconds: must be a number of seconds from 0.1 to 120, got {timeout}"
    ]
    form = client.post(
        reverse("policies:new"),
        _form_data(
            judge_model=JUDGE_MODEL, judge_conditions=["drift"], judge_timeout_seconds=timeout
        ),
    )
    assert form.status_code == 400
    assert "judge_timeout_seconds" in form.context["form"].errors
    assert not PolicyVersion.objects.exclude(pk__in=before).exists()  # nothing stored


def test_the_api_takes_the_shortest_and_longest_judge_timeout(client, admin):
    client.force_login(admin)
    for timeout in (0.1, 120):
        made = client.post(
            reverse("api:policy-version-create"),
            {**_api_base(), "judge": {**JUDGE, "timeout_seconds": timeout}},
            "application/json",
        )
        assert made.status_code == 201, made.json()


# ---- where the judge lives, and a judge that cannot be reached -------------------------------


def test_the_version_page_names_the_judges_server_and_the_list_shows_the_judge(
    client, admin, settings
):
    settings.OPENAI_BASE_URL = "http://judge.internal:8000/v1"
    version = judged_version()
    client.force_login(admin)

    page = client.get(reverse("policies:detail", args=[version.pk])).content.decode()
    assert '<code class="judge-server">http://judge.internal:8000/v1</code>' in page

    settings.OPENAI_BASE_URL = "https://ops:s3cret@judge.internal/v1"
    page = client.get(reverse("policies:detail", args=[version.pk])).content.decode()
    assert '<code class="judge-server">https://judge.internal/v1</code>' in page
    assert "s3cret" not in page

    listing = client.get(reverse("policies:list")).content.decode()
    assert "<th>Judge</th>" in listing
    assert f"judge: <code>{JUDGE_MODEL}</code>" in listing


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_unreachable_judge_is_called_the_judge_in_the_reason(settings):
    judged_version()
    run = judged_run([{**CALM, "goal_reached": 0.79}])
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{_closed_port()}/v1"
    run = drive(run)

    assert run.status == RunStatus.WAITING
    detail = Escalation.objects.get(run=run).reason["triggered"][0]["detail"]
    assert "the judge gave no usable answer (judge unreachable:" in detail
    assert "guardian unreachable" not in detail


# ---- recalibrate's refusals ------------------------------------------------------------------


def _label(condition: str, cases: list, *, label=None, probability=None) -> None:
    # A stored probability of the pinned model is reused, not asked of the vendor.
    for projection, truth in cases:
        LabelledExample.objects.create(
            condition=condition,
            projection=projection,
            probability=probability,
            label=truth if label is None else label,
            source=ExampleSource.HUMAN,
            question_set_version="q",
            model_version=PIN,
        )


def _recalibrate(*args) -> str:
    with pytest.raises(CommandError) as refused:
        call_command("recalibrate", "--model", "http", *args, stderr=io.StringIO())
    return str(refused.value)


def test_recalibrate_with_no_examples_says_where_examples_come_from(
    active_version,  # noqa: F811
    overconfident_vendor,  # noqa: F811
):
    message = _recalibrate()
    assert message.startswith("no labelled examples")
    assert "reviewers' verdicts, or manage.py import_examples FILE" in message

    named = _recalibrate("--condition", "drift")
    assert "drift: no labelled examples" in named
    assert "with a probability" not in named
    assert "--condition" not in named  # it was given already


def test_recalibrate_one_class_names_the_minimum_and_lists_what_could_be_recalibrated(
    active_version,  # noqa: F811
    overconfident_vendor,  # noqa: F811
):
    population = _shifted_population()
    _label("integrity", population[:60])
    _label("infeasible", population[60:90], label=True, probability=0.9)
    message = _recalibrate()

    assert "infeasible: one class only (all positive): need at least 5 of each class" in message
    assert "reviewers' verdicts, or manage.py import_examples FILE" in message
    assert (
        "these could be recalibrated now: integrity (rerun with --condition integrity)" in message
    )
    assert GuardianModelVersion.objects.count() == 0

    named = _recalibrate("--condition", "infeasible")
    assert "--condition" not in named
    assert "one class only (all positive): need at least 5 of each class" in named


def test_the_progress_line_ends_each_line_when_not_a_terminal():
    piped = io.StringIO()
    progress = _progress_bar(OutputWrapper(piped))
    for done in range(3):
        progress(done, 2)
    assert piped.getvalue().splitlines() == [
        "scoring 0/2 rows",
        "scoring 1/2 rows",
        "scoring 2/2 rows",
    ]
    assert piped.getvalue().endswith("\n")
    assert "\r" not in piped.getvalue()


# ---- the learning commands' words ------------------------------------------------------------


def test_activate_names_the_version_it_replaced_and_deactivate_the_one_it_retired():
    first, second = _local_version(1), _local_version(2)
    out = io.StringIO()
    call_command("activate_guardian_model", "1", stdout=out)
    assert "; no version was active before" in out.getvalue()

    out = io.StringIO()
    call_command("activate_guardian_model", "2", stdout=out)
    assert f"it replaced version 1 ({first.model_version})" in out.getvalue()

    out = io.StringIO()
    call_command("activate_guardian_model", "--deactivate", "local", stdout=out)
    assert out.getvalue().strip() == (
        f"local: retired guardian model version 2 ({second.model_version}); runs go back to "
        "the local adapter as it ships"
    )
    out = io.StringIO()
    call_command("activate_guardian_model", "--deactivate", "local", stdout=out)
    assert out.getvalue().startswith("local: no version was active")


def test_held_out_figures_on_few_rows_carry_a_caution():
    figures = {"ece": 0.1, "brier": 0.2, "log_loss": 0.5}
    version = _local_version(
        figures={
            "integrity": {
                "method": "platt",
                "n_fit": 32,
                "n_held_out": 8,
                "before": figures,
                "after": figures,
            },
            "drift": {
                "method": "platt",
                "n_fit": 120,
                "n_held_out": 30,
                "before": figures,
                "after": figures,
            },
        },
        example_ids=[1],
    )
    table = version_table(version)
    assert "on 8 held-out rows: read as a rough sign" in table
    assert "on 30 held-out rows" not in table
    assert "learnt from 1 example " in table
