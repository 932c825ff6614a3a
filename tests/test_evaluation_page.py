"""The admins' evaluation page (/policies/evaluate/): the command's figures for an upload or the
reviewers' labelled examples, a reliability diagram per condition, bad input named field by
field, and a file over the cap refused by name."""

import json
import re

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.template.defaultfilters import floatformat
from django.test import Client
from django.urls import reverse

from escalations.examples import ExampleFilters, labelled_examples_jsonl
from escalations.models import EscalationStatus, ExampleSource, LabelledExample
from escalations.verdicts import escalation_resolve
from guardian_core.adapters.http import DEFAULT_QUESTION_SET_VERSION, DEFAULT_QUESTIONS
from guardian_core.adapters.local import LocalGuardian
from guardian_core.engine.conditions import Condition
from guardian_core.models import GuardianModelVersion
from policies.evaluation_views import LISTED_PROBLEMS, MAX_UPLOAD_BYTES
from policies.harness import traces_evaluate
from policies.services import policy_version_create
from tests.runs_helpers import drive, start
from tests.test_evaluate import COSTS, _integrity_lines, _line, _risk_lines

pytestmark = pytest.mark.django_db
URL = reverse("policies:evaluate")


@pytest.fixture
def active_version():
    return policy_version_create(
        thresholds={
            c.value: {"c_stop": stop, "c_cont": cont, "delta": delta}
            for c, (stop, cont, delta) in COSTS.items()
        },
        question_set=dict(DEFAULT_QUESTIONS),
        question_set_version=DEFAULT_QUESTION_SET_VERSION,
        activate=True,
    )


@pytest.fixture
def admin_client(client, admin):
    client.force_login(admin)
    return client


TRACES = [*_integrity_lines(), *_risk_lines(), "{oops", _line("drift", 4)]


def _upload(text: str | bytes, name: str = "traces.jsonl") -> SimpleUploadedFile:
    data = text.encode() if isinstance(text, str) else text
    return SimpleUploadedFile(name, data, content_type="application/x-ndjson")


def _post(client, **fields):
    data = {"source": "file", "model": "", "bins": "2", **fields}
    return client.post(URL, data)


def _as_json(value):
    return json.loads(json.dumps(value))


def test_an_upload_reports_the_harnesss_figures(admin_client, active_version):
    text = "\n".join(TRACES) + "\n"
    response = _post(admin_client, traces=_upload(text), policy=active_version.number)

    assert response.status_code == 200
    expected = traces_evaluate(lines=text.encode().splitlines(), bins=2)
    assert _as_json(response.context["report"]) == _as_json(expected)
    html = response.content.decode()
    integrity = expected["conditions"]["integrity"]
    # The figures as the command's table shows them (3 decimals), in the condition's table.
    section = html.split('id="condition-integrity"')[1].split("</section>")[0]
    for value in (integrity["ece"], integrity["brier"], integrity["auroc"]):
        assert f"{value:.3f}" in section
    # Read on 8 rows: each interval beside its figure, and the caution above them.
    low, high = integrity["intervals"]["ece"]
    assert f"(95 %: {floatformat(low, 3)}–{floatformat(high, 3)})" in section
    assert "On 8 rows, too few to read ECE" in section
    # AUROC, which the caution may name, shows its interval too.
    low, high = integrity["intervals"]["auroc"]
    auroc_row = section.split('<th scope="row">AUROC')[1].split("</tr>")[0]
    assert f"(95 %: {floatformat(low, 3)}–{floatformat(high, 3)})" in auroc_row
    assert "BRIER" not in section
    # As the page rounds it (a half rounds up, as Django's floatformat does).
    assert floatformat(integrity["policy"]["expected_cost"], 3) in section
    risk = html.split('id="condition-risk"')[1].split("</section>")[0]
    ungated = expected["conditions"]["risk"]["policy"]["ungated"]
    assert f"{ungated} of {expected['conditions']['risk']['positives']}" in risk
    assert "Malformed lines (1)" in html
    assert "line 15: not JSON" in html
    assert "Unscored rows (1)" in html
    assert "traces.jsonl" in html


def test_the_report_explains_its_figures_and_links_to_the_malformed_lines(
    admin_client, active_version
):
    response = _post(admin_client, traces=_upload("\n".join(TRACES)), policy=active_version.number)
    page = response.content.decode()

    assert "What the figures mean" in page
    assert '<a href="#malformed-title">1 malformed</a>' in page
    assert 'id="malformed-title"' in page


def test_each_condition_gets_a_diagram_with_the_diagonal_and_the_band(admin_client, active_version):
    text = "\n".join([*_integrity_lines(), *_risk_lines()])
    response = _post(admin_client, traces=_upload(text), policy=active_version.number)

    html = response.content.decode()
    svgs = re.findall(r'<svg class="reliability-svg".*?</svg>', html, re.S)
    assert len(svgs) == 2
    for svg, condition in zip(svgs, ("integrity", "risk"), strict=True):
        assert f"Reliability of {condition}" in svg
        assert 'class="rel-diagonal"' in svg
        assert 'class="rel-band"' in svg
        assert 'class="rel-tstar"' in svg
        assert svg.count('class="rel-count"') == 2  # a bar per bin, bins=2
        assert "style=" not in svg  # the CSP allows no inline style
    # Integrity: t* 0.2, band [0.15, 0.25] on a 300-unit plot from x = 46.
    assert 'class="rel-tstar" x1="106.0"' in svgs[0]
    assert 'class="rel-band" x="91.0" y="12" width="30.0"' in svgs[0]


def test_the_labelled_examples_reviewers_made_are_evaluated(admin_client, reviewer, active_version):
    run = drive(start("injected_instruction"))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    escalation_resolve(
        escalation_id=escalation.pk,
        reviewer=reviewer,
        decision="answer",
        answer={"integrity": True},
    )
    LabelledExample.objects.create(
        condition=Condition.INTEGRITY,
        projection={"goal": "Imported", "last_results": ["Just an order record"]},
        probability=0.1,
        label=False,
        source=ExampleSource.IMPORT,
        question_set_version="v3",
        model_version="local-1",
    )

    response = _post(admin_client, source="examples", policy=active_version.number)

    assert response.status_code == 200
    lines = list(labelled_examples_jsonl(ExampleFilters()))
    assert len(lines) == LabelledExample.objects.count() >= 2
    expected = traces_evaluate(lines=lines, bins=2)
    assert _as_json(response.context["report"]) == _as_json(expected)
    assert expected["conditions"]["integrity"]["n"] >= 2
    assert f'Traces: <strong class="untrusted-name">the labelled examples ({len(lines)})' in (
        response.content.decode()
    )
    assert "reviewers made" not in response.content.decode()  # imported traces are among them


def test_no_labelled_example_is_named_on_the_source_field(admin_client, active_version):
    response = _post(admin_client, source="examples", policy=active_version.number)

    assert response.status_code == 400
    assert "No labelled example yet" in response.context["form"].errors["source"][0]
    html = response.content.decode()
    assert '<a href="#id_source">Traces</a>: No labelled example yet' in html
    assert '<legend id="id_source">' in html


def test_every_bad_field_is_named_and_the_form_comes_back_as_sent(admin_client, active_version):
    response = _post(
        admin_client, source="file", policy="999", model="oracle", bins="0", rescore="on"
    )

    assert response.status_code == 400
    errors = response.context["form"].errors
    assert set(errors) == {"traces", "policy", "model", "bins", "rescore"}
    assert "Choose a trace file" in errors["traces"][0]
    html = response.content.decode()
    assert 'name="bins" value="0"' in html
    assert re.search(r'<input type="checkbox" name="rescore"[^>]*checked', html)
    assert "Not evaluated." in html


def test_a_file_with_no_valid_line_lists_its_lines_and_says_so(admin_client, active_version):
    bad = '{"condition": "<script>x</script>"}\nnope\n\xff\n'.encode("latin-1")
    response = _post(
        admin_client, traces=_upload(bad, "bad<b>.jsonl"), policy=active_version.number
    )

    html = response.content.decode()
    assert "bad&lt;b&gt;.jsonl: no valid trace line</strong> (3 malformed" in html
    assert "line 1: condition: &#x27;&lt;script&gt;x&lt;/script&gt;&#x27; is not one of" in html
    assert "<script>x" not in html
    assert "<b>.jsonl" not in html
    assert "line 3: not UTF-8" in html


def test_an_empty_file_is_named(admin_client, active_version):
    response = _post(admin_client, traces=_upload(b""), policy=active_version.number)

    assert response.status_code == 400
    assert "empty" in response.context["form"].errors["traces"][0]


def test_a_file_over_the_cap_is_refused_by_name_and_the_rest_comes_back(
    admin_client, active_version
):
    line = (_line("integrity", True, 0.9) + "\n").encode()
    big = line * (MAX_UPLOAD_BYTES // len(line) + 1)
    assert len(big) > MAX_UPLOAD_BYTES

    response = _post(admin_client, traces=_upload(big, "huge.jsonl"), policy="999", bins="7")

    assert response.status_code == 400
    errors = response.context["form"].errors
    assert errors["traces"] == [
        "huge.jsonl is larger than 20 MB, more than this page reads: split it, or run "
        "manage.py evaluate --traces on it."
    ]
    assert "policy" in errors  # the other fields were read and checked too
    assert 'name="bins" value="7"' in response.content.decode()
    assert response.context["report"] is None


def test_malformed_lines_past_fifty_are_counted(admin_client, active_version):
    text = "\n".join(["nope"] * (LISTED_PROBLEMS + 7) + [_line("integrity", True, 0.7)])
    response = _post(admin_client, traces=_upload(text), policy=active_version.number)

    html = response.content.decode()
    assert f"Malformed lines ({LISTED_PROBLEMS + 7})" in html
    assert html.count("<li>line ") == LISTED_PROBLEMS
    assert "and 7 more" in html


def test_the_local_guardian_scores_rows_as_the_command_does(admin_client, active_version):
    from tests.test_evaluate import _unscored_lines

    text = "\n".join(_unscored_lines())
    response = _post(
        admin_client, traces=_upload(text), policy=active_version.number, model="local"
    )

    expected = traces_evaluate(lines=text.encode().splitlines(), model="local", bins=2)
    assert _as_json(response.context["report"]) == _as_json(expected)
    assert "scored by local" in response.content.decode()


def test_a_candidate_guardian_model_version_scores_as_the_command_does(
    admin_client, active_version
):
    from tests.test_evaluate import _unscored_lines

    # An inactive recalibrated version that maps every integrity probability to 0.5.
    candidate = GuardianModelVersion.objects.create(
        number=7,
        adapter="local",
        base_model_version=LocalGuardian().model_version,
        kind="recalibrated",
        calibration={"integrity": {"method": "isotonic", "x": [0.0, 1.0], "y": [0.5, 0.5]}},
        example_ids=[],
        examples_digest="0" * 64,
    )
    text = "\n".join(_unscored_lines())
    fields = {"policy": active_version.number, "model": "version:7"}
    response = _post(admin_client, traces=_upload(text), **fields)

    expected = traces_evaluate(
        lines=text.encode().splitlines(), model="local", bins=2, guardian_version=7
    )
    page = response.content.decode()
    assert _as_json(response.context["report"]) == _as_json(expected)
    assert candidate.model_version in page
    # Offered, though not active, naming what its map sits on.
    assert "version 7 (a map over the Local (in process) guardian as it ships" in page
    plain = traces_evaluate(lines=text.encode().splitlines(), model="local", bins=2)
    assert expected["conditions"] != plain["conditions"]  # the version's map was applied


def test_the_active_guardian_model_version_is_offered_as_what_runs_use(
    admin_client, active_version
):
    GuardianModelVersion.objects.create(
        number=3,
        adapter="local",
        base_model_version=LocalGuardian().model_version,
        kind="retrained",
        calibration={},
        example_ids=[],
        examples_digest="0" * 64,
        is_active=True,
    )

    choices = dict(admin_client.get(URL).context["form"].fields["model"].choices)

    assert choices["version:3"].endswith("active: what runs use now")
    assert choices["local"] == "Scored by the local guardian as it ships"


def test_under_a_judge_the_diagram_says_the_band_goes_to_the_judge_first(admin_client):
    judged = policy_version_create(
        thresholds={
            c.value: {"c_stop": stop, "c_cont": cont, "delta": delta}
            for c, (stop, cont, delta) in COSTS.items()
        },
        question_set=dict(DEFAULT_QUESTIONS),
        question_set_version=DEFAULT_QUESTION_SET_VERSION,
        judge={"adapter": "openai", "model": "judge-7b", "conditions": ["integrity"]},
        activate=True,
    )

    response = _post(admin_client, traces=_upload("\n".join(TRACES)), policy=judged.number)
    captions = {c["name"]: c["judge"] for c in response.context["conditions"]}
    page = response.content.decode()

    assert captions["integrity"] == "judge-7b"
    assert captions["risk"] is None  # risk is never judged
    assert "first to the second-tier judge (judge-7b)" in page
    assert "where an answer goes to a person" in page  # risk's diagram


def test_a_version_number_in_the_link_preselects_it(admin_client, active_version):
    other = policy_version_create(
        thresholds={c.value: {"c_stop": 1, "c_cont": 1, "delta": 0.1} for c in Condition},
        question_set=dict(DEFAULT_QUESTIONS),
        question_set_version=DEFAULT_QUESTION_SET_VERSION,
    )
    assert admin_client.get(URL).context["form"].initial["policy"] == active_version.number
    page = admin_client.get(URL, {"policy": other.number})
    assert page.context["form"].initial["policy"] == other.number
    detail = admin_client.get(reverse("policies:detail", args=[other.pk])).content.decode()
    assert f'href="{URL}?policy={other.number}"' in detail
    assert f'href="{URL}"' in admin_client.get(reverse("policies:list")).content.decode()


def test_the_page_checks_the_csrf_token(admin, active_version):
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin)
    response = _post(client, traces=_upload("\n".join(TRACES)), policy=active_version.number)

    assert response.status_code == 403


def test_the_page_leaves_out_what_the_version_learnt_from_and_says_so(admin_client, active_version):
    examples = [
        LabelledExample.objects.create(
            condition="integrity",
            projection={"goal": "Summarise my inbox", "last_results": [f"mail {i}"]},
            label=i % 2 == 0,
            source=ExampleSource.HUMAN,
            question_set_version=DEFAULT_QUESTION_SET_VERSION,
            model_version="someone-else-1",
        )
        for i in range(6)
    ]
    version = GuardianModelVersion.objects.create(
        number=7,
        adapter="local",
        base_model_version=LocalGuardian().model_version,
        kind="recalibrated",
        calibration={"integrity": {"method": "isotonic", "x": [0.0, 1.0], "y": [0.0, 1.0]}},
        example_ids=[e.pk for e in examples[:4]],
        examples_digest="0" * 64,
    )
    response = _post(
        admin_client,
        source="examples",
        policy=active_version.number,
        model=f"version:{version.number}",
        rescore="on",
    )
    report = response.context["report"]
    assert report["left_out"] == {"version": 7, "learnt_from": 4, "rows": 4}
    assert report["conditions"]["integrity"]["n"] == 2
    assert (
        "Left out: 4 rows exported from the labelled examples guardian model version 7 learnt "
        "from (4 examples: its own, and those of the version it sits on, if any)"
        in response.content.decode()
    )
    assert "the versions it stacks on" not in response.content.decode()  # maps do not stack


def test_every_aria_describedby_names_an_element_of_the_page(admin_client, active_version):
    page = admin_client.get(URL).content.decode()
    named = {
        ref for refs in re.findall(r'aria-describedby="([^"]*)"', page) for ref in refs.split()
    }
    assert named  # the fields do point at their help texts
    assert {ref for ref in named if f'id="{ref}"' not in page} == set()


def test_the_report_takes_the_focus_and_names_the_version_that_scored_it(
    admin_client, active_version
):
    from tests.test_evaluate import _unscored_lines

    version = GuardianModelVersion.objects.create(
        number=7,
        adapter="local",
        base_model_version=LocalGuardian().model_version,
        kind="recalibrated",
        calibration={"integrity": {"method": "isotonic", "x": [0.0, 1.0], "y": [0.0, 1.0]}},
        example_ids=[],
        examples_digest="0" * 64,
    )
    fields = {"policy": active_version.number, "model": "version:7"}
    page = _post(
        admin_client, traces=_upload("\n".join(_unscored_lines())), **fields
    ).content.decode()
    assert '<h2 id="report-title" tabindex="-1" autofocus>' in page
    assert f"scored by guardian model version 7 ({version.model_version})" in page
    assert "scored by local (" not in page
