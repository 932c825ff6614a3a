"""The admins' shadow pages: start a trial, read where its candidate decides otherwise, stop it."""

import pytest
from django.contrib.auth.models import Group
from django.urls import reverse

from policies import shadow
from policies.models import ShadowTrial
from tests.runs_helpers import drive, start
from tests.test_shadow import _candidate

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settled_at_once(settings):
    settings.GUARDIAN_SHADOW_SETTLE_SECONDS = 0


def test_an_admin_starts_a_trial_from_the_page_and_lands_on_it(client, admin):
    candidate = _candidate(goal_reached={"c_stop": 1.0, "c_cont": 1.0, "delta": 0.49})
    client.force_login(admin)
    page = client.get(reverse("policies:shadow"), {"candidate": f"policy:{candidate.pk}"})
    assert f'<option value="policy:{candidate.pk}" selected>' in page.content.decode()

    response = client.post(
        reverse("policies:shadow"),
        {"candidate": f"policy:{candidate.pk}", "comment": "wider goal band"},
    )
    trial = ShadowTrial.objects.get()
    assert response["Location"] == reverse("policies:shadow_detail", args=[trial.pk])
    assert (trial.policy_version, trial.started_by, trial.comment) == (
        candidate,
        admin,
        "wider goal band",
    )


def test_a_bad_start_names_every_problem_and_starts_nothing(client, admin):
    _candidate()
    client.force_login(admin)
    response = client.post(reverse("policies:shadow"), {"candidate": "", "comment": " "})
    assert response.status_code == 400
    body = response.content.decode()
    assert "Choose one candidate" in body
    assert "Say what this trial is for." in body
    assert not ShadowTrial.objects.exists()


def test_the_active_version_is_not_offered_as_a_candidate(client, admin):
    candidate = _candidate()
    client.force_login(admin)
    body = client.get(reverse("policies:shadow")).content.decode()
    assert f'value="policy:{candidate.pk}"' in body
    active = candidate.__class__.objects.get(is_active=True)
    assert f'value="policy:{active.pk}"' not in body


def test_the_trial_page_shows_the_turns_decided_otherwise_with_links_to_them(
    client, admin, django_user_model
):
    candidate = _candidate(goal_reached={"c_stop": 1.0, "c_cont": 1.0, "delta": 0.49})
    trial = shadow.shadow_trial_start(policy_version_id=candidate.pk, comment="wide")
    run = drive(start("goal_reached"))
    shadow.shadow_trials_catch_up()
    url = reverse("policies:shadow_detail", args=[trial.pk])
    # An admin who is not an auditor sees the run and turn named: their page would be a 403.
    client.force_login(admin)
    named = client.get(url).content.decode()
    assert f"<td>Run {run.pk}</td><td>Turn 1</td>" in named
    assert reverse("runs:detail", args=[run.pk]) not in named
    both = django_user_model.objects.create_user(username="lead")
    both.groups.set(Group.objects.filter(name__in=["admin", "auditor"]))
    client.force_login(both)

    body = client.get(url).content.decode()
    assert "real 0.000 (0) → candidate 1.000 (2)" in body
    assert f'href="{reverse("runs:detail", args=[run.pk])}#turn-1"' in body
    assert '<td><span class="cell-label">Real: </span>Stop with success — Goal reached</td>' in body
    assert '<tr class="differs"><td>Stop with success</td><td>Escalate</td><td>1</td>' in body
    assert "Goal reached: p=0.970 is within δ=0.49 of t*=0.500</span></td>" in body


def test_older_differences_are_a_page_away(client, admin, monkeypatch):
    monkeypatch.setattr("policies.shadow_views.DIFFERENCES_PER_PAGE", 1)
    candidate = _candidate(goal_reached={"c_stop": 1.0, "c_cont": 1.0, "delta": 0.49})
    trial = shadow.shadow_trial_start(policy_version_id=candidate.pk, comment="wide")
    run = drive(start("goal_reached"))
    shadow.shadow_trials_catch_up()
    client.force_login(admin)
    url = reverse("policies:shadow_detail", args=[trial.pk])
    first = client.get(url)
    newest = first.context["differences"]
    assert [d.turn_index for d in newest] == [1]
    older = client.get(url, {"before": first.context["older"]}).context["differences"]
    assert [(d.run_id, d.turn_index) for d in older] == [(run.pk, 0)]


def test_stopping_from_the_page_keeps_what_the_trial_recorded(client, admin):
    trial = shadow.shadow_trial_start(policy_version_id=_candidate().pk, comment="stop")
    drive(start("goal_reached"))
    shadow.shadow_trials_catch_up()
    client.force_login(admin)
    response = client.post(reverse("policies:shadow_stop", args=[trial.pk]))
    assert response.status_code == 302
    trial.refresh_from_db()
    assert (trial.running, trial.stopped_by) == (False, admin)
    assert trial.decisions.count() == 2
    listing = client.get(reverse("policies:shadow")).context
    assert [t.pk for t in listing["stopped"]] == [trial.pk]
    assert listing["running"] == []


def test_a_draft_versions_page_offers_to_try_it_in_shadow(client, admin):
    candidate = _candidate()
    client.force_login(admin)
    body = client.get(reverse("policies:detail", args=[candidate.pk])).content.decode()
    link = f"{reverse('policies:shadow')}?candidate=policy:{candidate.pk}"
    assert f'href="{link}"' in body
    assert f'<option value="policy:{candidate.pk}" selected>' in client.get(link).content.decode()


def test_activating_the_candidate_stops_its_trial_and_says_why(client, admin):
    from policies.services import policy_version_activate

    candidate = _candidate()
    trial = shadow.shadow_trial_start(policy_version_id=candidate.pk, comment="try it")

    policy_version_activate(version_id=candidate.pk, comment="it did well", user=admin)

    trial.refresh_from_db()
    assert trial.stopped_at is not None
    assert trial.stopped_by == admin
    assert f"v{candidate.number} was activated" in trial.stop_note
    client.force_login(admin)
    body = client.get(reverse("policies:shadow_detail", args=[trial.pk])).content.decode()
    assert "was activated: new runs now decide under it for real" in body
    assert reverse("policies:activate", args=[candidate.pk]) not in body


def test_activating_a_candidate_model_stops_its_trial(admin):
    from demo.setup import demo_policy_version
    from policies.learning import guardian_model_activate
    from tests.factories import make_guardian_model_version

    demo_policy_version()
    model = make_guardian_model_version()
    trial = shadow.shadow_trial_start(guardian_model_version_id=model.pk, comment="try it")

    guardian_model_activate(number=model.number, activated_by=admin, comment="it did well")

    trial.refresh_from_db()
    assert trial.stopped_at is not None
    assert f"guardian model version {model.number} was activated" in trial.stop_note
