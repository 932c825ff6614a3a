"""The admins' guardian model version pages: the list and what runs use now, one version's
held-out figures and history, and activation through the regression gate in the browser —
refused with every reason, overridden with a recorded reason, or passed."""

import html as html_lib
import re

import pytest
from django.urls import reverse

from escalations.models import ExampleSource, LabelledExample
from guardian_core.said import texts
from policies.learning import guardian_model_activate
from policies.models import GuardianModelActivation
from runs.guardian_models import guardian_model_version_active
from tests.factories import default_costs_policy_version_create, make_guardian_model_version
from tests.test_guardian_model_gate import ALARMED, BENIGN, IDENTITY, INJECTED

pytestmark = pytest.mark.django_db


@pytest.fixture
def labelled(db):
    from guardian_core.adapters.http import DEFAULT_QUESTION_SET_VERSION

    default_costs_policy_version_create()
    for outputs, label in ((BENIGN, False), (INJECTED, True)):
        for text in outputs:
            LabelledExample.objects.create(
                condition="integrity",
                projection={"goal": "Summarise my inbox", "last_results": [text]},
                label=label,
                source=ExampleSource.HUMAN,
                question_set_version=DEFAULT_QUESTION_SET_VERSION,
                model_version="someone-else-1",
            )


@pytest.fixture
def good_active_bad_candidate(labelled):
    good = make_guardian_model_version(calibration={"integrity": IDENTITY})
    guardian_model_activate(number=good.number, comment="the first map")
    bad = make_guardian_model_version(
        calibration={"integrity": ALARMED},
        figures={
            "integrity": {
                "method": "isotonic",
                "before": {"n": 20, "ece": 0.12, "brier": 0.2},
                "after": {"n": 20, "ece": 0.05, "brier": 0.15},
            }
        },
    )
    return good, bad


def test_the_list_says_what_runs_use_now_and_links_every_version(
    client, admin, good_active_bad_candidate
):
    good, bad = good_active_bad_candidate
    client.force_login(admin)
    body = client.get(reverse("policies:models")).content.decode()
    assert f'href="{reverse("policies:model_detail", args=[good.pk])}"' in body
    assert f'href="{reverse("policies:model_detail", args=[bad.pk])}"' in body
    assert f"<code>{good.model_version}</code>" in body  # what local runs use now
    assert "the adapter as it ships" in body  # the other adapters
    assert (
        f'href="{reverse("policies:models")}"'
        in client.get(reverse("policies:list")).content.decode()
    )


def test_a_versions_page_shows_its_held_out_figures_and_leads_to_the_gate_and_shadow(
    client, admin, good_active_bad_candidate
):
    good, bad = good_active_bad_candidate
    client.force_login(admin)
    body = client.get(reverse("policies:model_detail", args=[bad.pk])).content.decode()
    assert "0.1200 → 0.0500" in body  # ECE on what it held out, before → after
    assert f'href="{reverse("policies:model_activate", args=[bad.pk])}"' in body
    assert f"?candidate=model:{bad.pk}" in body
    active = client.get(reverse("policies:model_detail", args=[good.pk])).content.decode()
    assert reverse("policies:model_activate", args=[good.pk]) not in active
    assert "the first map" in active  # its activation history


def test_the_activate_page_shows_the_refusal_with_every_reason_and_the_flips(
    client, admin, good_active_bad_candidate
):
    _, bad = good_active_bad_candidate
    client.force_login(admin)
    body = client.get(
        reverse("policies:model_activate", args=[bad.pk]) + "?measure=1"
    ).content.decode()
    assert "The gate refuses this version" in body
    assert "integrity: calibration worsens beyond 5% (ECE" in body
    assert "expected cost per example worsens beyond 5%" in body
    assert "Outcome flips" in body
    assert "fires: a person decides" in body  # a flip's outcome in words
    assert 'name="override_reason"' in body


def test_a_refused_version_is_not_activated_without_a_comment_or_an_override(
    client, admin, good_active_bad_candidate
):
    good, bad = good_active_bad_candidate
    client.force_login(admin)
    url = reverse("policies:model_activate", args=[bad.pk])

    no_comment = client.post(url, {"comment": "  "})
    no_override = client.post(url, {"comment": "try the new map"})

    assert no_comment.status_code == 400
    assert "Say why this guardian model version is activated." in no_comment.content.decode()
    assert no_override.status_code == 400
    refused = no_override.content.decode()
    assert "give a reason to override it" in refused
    assert (
        "integrity: calibration worsens beyond 5% (ECE" in refused
    )  # the report the POST measured
    assert guardian_model_version_active(adapter="local") == good
    assert not GuardianModelActivation.objects.filter(version=bad).exists()


def test_an_override_from_the_page_activates_and_records_who_why_and_the_reason(
    client, admin, good_active_bad_candidate
):
    good, bad = good_active_bad_candidate
    client.force_login(admin)
    response = client.post(
        reverse("policies:model_activate", args=[bad.pk]),
        {"comment": "<b>new</b> inbox traffic", "override_reason": "measured by hand"},
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("policies:model_detail", args=[bad.pk])
    assert guardian_model_version_active(adapter="local") == bad
    record = GuardianModelActivation.objects.get(version=bad)
    assert (record.activated_by, record.override_reason) == (admin, "measured by hand")
    page = client.get(response["Location"]).content.decode()
    assert "&lt;b&gt;new&lt;/b&gt; inbox traffic" in page  # an admin's words are text
    assert "refused, overridden: measured by hand" in page


def test_a_version_the_gate_passes_activates_from_the_page_and_retires_the_one_before(
    client, admin, labelled
):
    first = make_guardian_model_version(calibration={"integrity": IDENTITY})
    guardian_model_activate(number=first.number, comment="first")
    same = make_guardian_model_version(calibration={"integrity": IDENTITY})
    client.force_login(admin)
    page = client.get(
        reverse("policies:model_activate", args=[same.pk]) + "?measure=1"
    ).content.decode()
    assert "The gate passes this version." in page
    assert 'name="override_reason"' not in page

    response = client.post(
        reverse("policies:model_activate", args=[same.pk]), {"comment": "same map, new base"}
    )

    assert response.status_code == 302
    assert guardian_model_version_active(adapter="local") == same
    first.refresh_from_db()
    assert not first.is_active


def test_the_evaluation_page_opens_scoring_as_the_version_a_link_names(client, admin, labelled):
    version = make_guardian_model_version()
    client.force_login(admin)
    body = client.get(
        reverse("policies:evaluate") + f"?model=version:{version.number}"
    ).content.decode()
    assert f'<option value="version:{version.number}" selected>' in body
    other = client.get(reverse("policies:evaluate") + "?model=version:999999").content.decode()
    assert "selected>Scored by guardian model version" not in other


def test_a_flip_says_what_its_example_was_about_as_inert_text(
    client, admin, good_active_bad_candidate
):
    _, bad = good_active_bad_candidate
    LabelledExample.objects.create(
        condition="integrity",
        projection={"goal": "g", "last_results": ['<img src=x onerror="alert(1)"> lunch moved']},
        label=False,
        source=ExampleSource.HUMAN,
        question_set_version="q1",
        model_version="someone-else-1",
    )
    client.force_login(admin)
    body = client.get(
        reverse("policies:model_activate", args=[bad.pk]) + "?measure=1"
    ).content.decode()
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt; lunch moved" in body
    assert "<img src=x" not in body
    assert BENIGN[1] in body  # another flipped example's output, as its preview


def test_a_page_lists_the_first_flips_and_says_how_many_there_are(
    client, admin, good_active_bad_candidate, monkeypatch
):
    import policies.policy_gate_views

    monkeypatch.setattr(policies.policy_gate_views, "FLIPS_SHOWN", 2)
    _, bad = good_active_bad_candidate
    client.force_login(admin)
    response = client.get(reverse("policies:model_activate", args=[bad.pk]) + "?measure=1")
    body = response.content.decode()
    assert len(response.context["flips"]) == 2
    # Every benign output the candidate's alarmed map makes fire, counted: all twelve but those
    # the bundled guardian already does not clear (its short-output false alarms, issue 24).
    flips = response.context["report"]["flips"]
    assert len(flips) >= 10
    assert f"Outcome flips ({len(flips)})" in body
    assert "The first 2 are listed." in body


def test_the_history_of_an_overridden_activation_says_what_the_gate_refused(
    client, admin, good_active_bad_candidate
):
    _, bad = good_active_bad_candidate
    guardian_model_activate(
        number=bad.number, activated_by=admin, comment="new map", override_reason="by hand"
    )
    client.force_login(admin)
    body = client.get(reverse("policies:model_detail", args=[bad.pk])).content.decode()
    assert "The gate had refused: integrity: calibration worsens beyond 5% (ECE" in body


def test_the_active_version_can_be_retired_from_its_page_with_a_reason(
    client, admin, good_active_bad_candidate
):
    good, _ = good_active_bad_candidate
    client.force_login(admin)
    url = reverse("policies:model_retire", args=[good.pk])

    client.post(url, {"comment": " "})
    assert guardian_model_version_active(adapter="local") == good  # no reason, no retirement

    response = client.post(url, {"comment": "the vendor's base model changed"})
    assert response.status_code == 302
    assert guardian_model_version_active(adapter="local") is None
    record = GuardianModelActivation.objects.filter(version=good).first()
    assert (record.retired, record.activated_by, record.comment) == (
        True,
        admin,
        "the vendor's base model changed",
    )
    page = client.get(reverse("policies:model_detail", args=[good.pk])).content.decode()
    assert "retired: runs went back to the adapter as it ships" in page


def test_an_adapter_that_is_not_set_up_is_offered_disabled_and_refused(client, admin, settings):
    settings.GUARDIAN_HTTP_URL = ""
    client.force_login(admin)
    page = client.get(reverse("policies:models")).content.decode()
    assert "(not set up: GUARDIAN_HTTP_URL" in page
    response = client.post(reverse("policies:models"), {"kind": "recalibrate", "adapter": "http"})
    assert response.status_code == 400
    assert "This guardian is not set up here: set GUARDIAN_HTTP_URL" in response.content.decode()


def test_a_candidate_that_ranks_worse_is_refused_even_if_calibrated(labelled):
    from policies.guardian_gate import guardian_model_gate_report

    good = make_guardian_model_version(calibration={"integrity": IDENTITY})
    guardian_model_activate(number=good.number, comment="first")
    # A decreasing map: every probability turned upside down, the ranking reversed.
    upside_down = make_guardian_model_version(
        calibration={"integrity": {"method": "isotonic", "x": [0.0, 1.0], "y": [1.0, 0.0]}}
    )
    report = guardian_model_gate_report(candidate=upside_down)
    assert any("tells the classes apart less well (AUROC" in r for r in texts(report["reasons"]))


# ---- what a version sits on, its priors, and the jobs that make versions ---------------------


def _text(html: str) -> str:
    """The page as read: tags out, spaces collapsed."""
    import html as html_lib
    import re

    from django.utils.html import strip_tags

    return re.sub(r"\s+", " ", html_lib.unescape(strip_tags(html)))


@pytest.fixture
def stacked(db):
    """A retrained version and a map on top of it, made by one retrain-then-recalibrate job."""
    from policies.models import GuardianModelJob

    retrained = make_guardian_model_version(
        kind="retrained",
        calibration={},
        figures={
            "integrity": {
                "taught": 40,
                "n_held_out": 20,
                "before": {"n": 20, "ece": 0.10, "brier": 0.2},
                "after": {"n": 20, "ece": 0.17, "brier": 0.22},
            }
        },
    )
    note = "no live prior known (none stated): the map answers at the labelled share"
    top = make_guardian_model_version(
        over=retrained,
        base_model_version=retrained.model_version,
        figures={
            condition: {
                "method": "platt",
                "before": {"n": 60, "ece": 0.09, "brier": 0.2},
                "after": {"n": 60, "ece": 0.05, "brier": 0.18},
                "prior": {"fitted": 0.381, "live": None, "note": note},
                "held_out_paired": {
                    "prior": 0.389,
                    "figures": {
                        "ece": {"low": -0.047, "high": -0.018, "significant": True, "prior": 0.389}
                    },
                },
            }
            for condition in ("integrity", "scope")
        },
    )
    job = GuardianModelJob.objects.create(
        kind="retrain_recalibrate", adapter="local", status="done", version=top
    )
    return retrained, top, job, note


def test_a_map_on_a_retrained_version_names_it_and_its_job_names_both_versions(
    client, admin, stacked
):
    retrained, top, job, _ = stacked
    client.force_login(admin)
    listed = _text(client.get(reverse("policies:models")).content.decode())
    assert f"Recalibrated (a map over version {retrained.number}'s answers)" in listed
    assert "a map over the base model's probabilities" not in listed
    assert (
        f"Done: retrained version {retrained.number}, recalibrated on top: version {top.number}"
        in listed
    )
    assert "Active no" in listed  # inactive versions say so
    page = _text(client.get(reverse("policies:model_detail", args=[top.pk])).content.decode())
    assert f"Before is version {retrained.number}'s answers (the version it sits on)" in page
    assert "the adapter's own answers" not in page


def test_the_priors_and_the_ece_interval_say_what_they_are_and_the_note_comes_once(
    client, admin, stacked
):
    _, top, _, note = stacked
    client.force_login(admin)
    page = _text(client.get(reverse("policies:model_detail", args=[top.pk])).content.decode())
    assert "ECE after − before, 95 %: -0.047 to -0.018" in page
    assert "read at 0.389, the held-out examples' share of positives" in page
    assert "at prior 0.389: difference" not in page
    # One sentence for both conditions, said once (and opening its line).
    assert page.count(f"{note[0].upper()}{note[1:]}") == 1
    assert "none known (below)" in page
    assert "— (no live prior)" in page
    assert "Platt: a logistic curve" in page  # what "platt" means


def test_a_retrained_versions_page_says_why_it_has_no_priors_and_shows_its_interval(
    client, admin, stacked
):
    retrained, _, _, _ = stacked
    client.force_login(admin)
    url = reverse("policies:model_detail", args=[retrained.pk])
    page = _text(client.get(url).content.decode())
    assert "A retrained version has no map, so it records no prior" in page
    assert "without an interval" in page  # its figures predate the interval
    retrained.figures["integrity"]["held_out_paired"] = {
        "prior": 0.5,
        "figures": {"ece": {"low": 0.01, "high": 0.12, "significant": True, "prior": 0.5}},
    }
    retrained.save(update_fields=["figures"])
    page = _text(client.get(url).content.decode())
    assert "ECE after − before, 95 %: 0.010 to 0.120" in page


def test_a_map_is_offered_on_a_retrained_version_not_stacked_on_another_map(client, admin, stacked):
    from policies.models import GuardianModelJob

    retrained, top, _, _ = stacked
    client.force_login(admin)
    on_retrained = client.get(reverse("policies:model_detail", args=[retrained.pk]))
    assert f"Recalibrate on top of version {retrained.number}" in on_retrained.content.decode()
    on_map = client.get(reverse("policies:model_detail", args=[top.pk])).content.decode()
    assert f"Recalibrate on top of version {top.number}" not in on_map
    assert f"Fit a new map over version {retrained.number}" in on_map
    assert f'name="over" value="{retrained.number}"' in on_map
    refused = client.post(
        reverse("policies:models"),
        {"kind": "recalibrate", "adapter": "local", "over": str(top.number)},
    )
    assert refused.status_code == 400
    body = refused.content.decode()
    assert f"Version {top.number} is itself a map" in body
    assert '<a href="#id_over">On top of version</a>' in body  # the field's label, not "Over"
    assert GuardianModelJob.objects.count() == 1


def test_a_job_the_same_as_one_queued_is_refused_saying_so(
    client, admin, stacked, django_capture_on_commit_callbacks
):
    from policies.models import GuardianModelJob

    retrained, _, _, _ = stacked
    client.force_login(admin)
    fields = {"kind": "recalibrate", "adapter": "local", "over": str(retrained.number)}
    with django_capture_on_commit_callbacks():
        assert client.post(reverse("policies:models"), fields).status_code == 302
    queued = GuardianModelJob.objects.latest("pk")
    again = client.post(reverse("policies:models"), fields)
    assert again.status_code == 400
    assert f"Job {queued.pk}, the same" in _text(again.content.decode())
    assert "already queued" in again.content.decode()
    assert GuardianModelJob.objects.count() == 2
    other = {**fields, "conditions": ["integrity"]}  # other conditions: another job
    with django_capture_on_commit_callbacks():
        assert client.post(reverse("policies:models"), other).status_code == 302


def test_the_version_underneath_is_chosen_among_retrained_versions(client, admin, stacked):
    retrained, top, _, _ = stacked
    client.force_login(admin)
    page = client.get(reverse("policies:models")).content.decode()
    form_field = page.split('<select id="id_over"', 1)[1].split("</select>", 1)[0]
    assert f'<option value="{retrained.number}">version {retrained.number}' in form_field
    assert f'value="{top.number}"' not in form_field  # a map is not stacked on
    assert '<option value="">None: the guardian as it ships</option>' in form_field


def test_the_evaluate_form_names_what_a_map_sits_on_and_the_version_page_opens_it_on_examples(
    client, admin, stacked
):
    """A map over a retrained version was offered as "a map over the base model's
    probabilities"; and the version page's link left the traces on "a file", so pressing
    Evaluate came back with "Choose a trace file"."""
    retrained, top, _, _ = stacked
    client.force_login(admin)
    detail = client.get(reverse("policies:model_detail", args=[top.pk])).content.decode()
    link = re.search(r'href="([^"]*)">Evaluate as this version</a>', detail).group(1)
    assert "source=examples" in link
    form = client.get(html_lib.unescape(link)).content.decode()
    assert re.search(r'<input[^>]*value="examples"[^>]*checked', form)
    assert not re.search(r'<input[^>]*value="file"[^>]*checked', form)
    options = _text(form)
    assert (
        f"Scored by guardian model version {top.number} (a map over version "
        f"{retrained.number}, {top.model_version})" in options
    )
    assert f"Scored by guardian model version {retrained.number} (retrained," in options
    assert "the base model's probabilities" not in options


def test_the_version_pages_say_no_live_prior_once_and_the_select_in_plain_words(
    client, admin, stacked
):
    retrained, top, _, note = stacked
    client.force_login(admin)
    page = _text(client.get(reverse("policies:model_detail", args=[top.pk])).content.decode())
    assert f"{note[0].upper()}{note[1:]}." in page
    assert "No live prior: no live prior" not in page
    assert "answering at the live prior when one is known (else at the labelled share)" in page
    listed = client.get(reverse("policies:models")).content.decode()
    assert (
        f'<option value="{retrained.number}">version {retrained.number} (retrained, '
        f"{retrained.model_version})</option>" in listed
    )
    assert 'aria-describedby="id_adapter_hint"' in listed
    assert 'id="id_adapter_hint"' in listed
    # When a job was asked reads apart from the version it made ("version 2 asked …" did not).
    assert f"recalibrated on top: version {top.number} (asked " in _text(listed)


def test_a_limit_warning_is_drawn_as_one_and_the_hourly_figure_names_where_its_share_is_read():
    """A version that passes with runs over a limit already (e.g. 194 escalations an hour
    against a capacity of 10) said so in plain text under "The gate passes this version"; and
    "the share of decisions that escalate" read as measured on the traffic, when it is each
    condition's rate on the labelled examples."""
    from django.template.loader import render_to_string

    warning = "the candidate would send about 194.4 escalations per hour"
    summary = render_to_string(
        "policies/_gate_activation.html",
        {"part": "summary", "report": {"limit_warnings": [warning], "flips": []}},
    )
    assert '<div class="warning gate-warnings" role="note">' in summary
    assert warning in summary
    figures = _text(
        render_to_string(
            "policies/_guardian_gate_figures.html",
            {
                "report": {
                    "conditions": {},
                    "escalations_per_hour": {
                        "current": 215.2,
                        "candidate": 194.4,
                        "decisions_per_hour": 395.8,
                        "span_words": "5 minutes",
                        "capacity": 10.0,
                    },
                }
            },
        )
    )
    assert (
        "395.8 decisions per hour over the last 5 minutes of traffic times the share of them "
        "that would escalate: each condition's escalation rate in the tables above, on the "
        "labelled examples at the prior its heading names" in figures
    )
    assert "the share of decisions that escalate" not in figures
