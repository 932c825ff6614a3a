"""The admin role's pages: a new policy version from stated costs (t* derived, every bad field
named, nothing saved on a refusal), its activation, and API tokens shown once and revoked."""

import pytest
from django.urls import reverse

from demo.setup import demo_policy_version
from guardian_core.models import ApiToken, PolicyVersion
from guardian_core.policy_validation import CONDITIONS
from policies.forms import PolicyVersionForm

pytestmark = pytest.mark.django_db


def _form_data(version: PolicyVersion, **changes) -> dict:
    """The new-version form as the page prefills it from `version`, with `changes` typed in."""
    data = {
        key: ("" if value is None else value)
        for key, value in PolicyVersionForm.initial_from(version).items()
    }
    data = {key: value for key, value in data.items() if value is not False}
    data.update(changes)
    return data


def test_the_new_version_form_starts_from_the_active_version(client, admin):
    active = demo_policy_version()
    client.force_login(admin)

    response = client.get(reverse("policies:new"))

    assert response.status_code == 200
    form = response.context["form"]
    integrity = active.thresholds["integrity"]
    assert form["integrity_c_stop"].value() == integrity["c_stop"]
    assert form["integrity_delta"].value() == integrity["delta"]
    assert form["question_set_version"].value() == active.question_set_version


def test_an_admin_creates_a_version_from_costs_and_t_star_is_derived(client, admin):
    active = demo_policy_version()
    client.force_login(admin)
    data = _form_data(active, label="stricter on drift", drift_c_stop=1, drift_c_cont=3)

    response = client.post(reverse("policies:new"), data)

    created = PolicyVersion.objects.get(label="stricter on drift")
    assert response.status_code == 302
    assert response["Location"] == reverse("policies:detail", kwargs={"version_id": created.pk})
    assert created.thresholds["drift"]["t_star"] == pytest.approx(0.25)
    assert created.created_by == admin
    assert not created.is_active  # not asked to activate: the one in force stays
    active.refresh_from_db()
    assert active.is_active
    page = client.get(response["Location"])
    assert "0.250" in page.content.decode()  # the derived t* is shown on the version's page


def test_bad_input_names_every_bad_field_and_saves_nothing(client, admin):
    active = demo_policy_version()
    client.force_login(admin)
    before = PolicyVersion.objects.count()
    data = _form_data(
        active,
        integrity_c_stop="-1",  # costs must be > 0
        goal_reached_delta="0.49",  # the band leaves (0, 1)
        question_drift="",  # required
        quorum_tools="refund, refund",  # a tool named twice
    )

    response = client.post(reverse("policies:new"), data)

    assert response.status_code == 400
    assert PolicyVersion.objects.count() == before
    errors = response.context["form"].errors
    assert set(errors) == {
        "integrity_c_stop",
        "goal_reached_delta",
        "question_drift",
        "quorum_tools",
    }
    body = response.content.decode()
    assert "must be a number &gt; 0" in body
    assert "must lie inside (0, 1)" in body
    assert "more than once" in body


def test_custom_wording_under_the_built_in_question_set_name_is_refused_on_its_field(client, admin):
    from guardian_core.adapters.http import DEFAULT_QUESTION_SET_VERSION, DEFAULT_QUESTIONS

    client.force_login(admin)
    data = _form_data(demo_policy_version(), question_set_version=DEFAULT_QUESTION_SET_VERSION)
    data.update({f"question_{c}": DEFAULT_QUESTIONS[c] for c in CONDITIONS})
    data["question_integrity"] = "Reworded: does the output address the agent?"

    response = client.post(reverse("policies:new"), data)

    assert "question_set_version" in response.context["form"].errors


def test_the_preview_shows_the_t_star_and_band_the_typed_costs_give(client, admin):
    client.force_login(admin)
    data = _form_data(
        demo_policy_version(), integrity_c_stop="1", integrity_c_cont="9", integrity_delta="0.05"
    )
    data["stagnation_c_cont"] = "nonsense"

    response = client.post(reverse("policies:preview"), data)

    rows = {row["condition"]: row for row in response.context["derived"]}
    assert rows["integrity"]["t_star"] == pytest.approx(0.1)
    assert rows["integrity"]["low"] == pytest.approx(0.05)
    assert rows["stagnation"]["t_star"] is None
    assert rows["stagnation"]["why"]
    assert "<html" not in response.content.decode()  # the fragment only


def test_the_preview_says_at_once_when_the_band_leaves_0_to_1_as_saving_would(client, admin):
    client.force_login(admin)
    data = _form_data(
        demo_policy_version(), integrity_c_stop="1", integrity_c_cont="99", integrity_delta="0.05"
    )

    preview = client.post(reverse("policies:preview"), data)
    saved = client.post(reverse("policies:new"), data)

    rows = {row["condition"]: row for row in preview.context["derived"]}
    assert rows["integrity"]["band_problem"] == (
        "the band leaves 0–1, which saving refuses: δ must be below 0.01"
    )
    assert "band_problem" not in rows["risk"]
    assert "δ must be below 0.01" in preview.content.decode()
    assert saved.status_code == 400  # and saving does refuse it


def test_an_invalid_version_is_not_activated_and_the_page_says_why(client, admin):
    demo_policy_version()
    broken = PolicyVersion.objects.create(
        number=99, thresholds={}, question_set={}, question_set_version="x"
    )
    client.force_login(admin)

    response = client.post(
        reverse("policies:activate", kwargs={"version_id": broken.pk}), follow=True
    )

    broken.refresh_from_db()
    assert not broken.is_active
    assert "cannot be activated" in response.content.decode()


def test_a_token_is_shown_once_works_and_stops_working_when_revoked(client, admin, auditor):
    client.force_login(admin)

    response = client.post(reverse("tokens:list"), {"name": "nightly export", "user": auditor.pk})

    assert response.status_code == 200
    assert response["Cache-Control"].startswith("max-age=0")
    secret = response.context["created"]["secret"]
    assert secret in response.content.decode()
    token = ApiToken.objects.get(name="nightly export")
    assert token.user == auditor
    listed = client.get(reverse("tokens:list")).content.decode()
    assert secret not in listed  # never again
    assert '<span class="status status-running">active</span>' in listed

    api = reverse("api:run-list")
    assert client.generic("GET", api, HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 200
    client.post(reverse("tokens:revoke", kwargs={"token_id": token.pk}))
    listed = client.get(reverse("tokens:list")).content.decode()
    assert "revoked <time" in listed
    assert "status-running" not in listed
    client.logout()
    assert client.get(api, HTTP_AUTHORIZATION=f"Bearer {secret}").status_code == 403


def test_a_token_without_a_name_or_account_is_refused_naming_both(client, admin):
    client.force_login(admin)

    response = client.post(reverse("tokens:list"), {"name": "", "user": ""})

    assert response.status_code == 400
    assert set(response.context["form"].errors) == {"name", "user"}
    assert not ApiToken.objects.exists()


def test_token_names_are_escaped(client, admin):
    client.force_login(admin)
    client.post(reverse("tokens:list"), {"name": "<script>alert(1)</script>", "user": admin.pk})

    body = client.get(reverse("tokens:list")).content.decode()

    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_the_admin_navigation_leads_to_the_tokens_page(client, admin):
    client.force_login(admin)

    body = client.get(reverse("policies:list")).content.decode()

    assert f'href="{reverse("tokens:list")}"' in body
    assert f'href="{reverse("policies:new")}"' in body


def test_an_admin_adds_guidance_and_the_reviewer_sees_it_on_the_item(client, admin, reviewer):
    from escalations.models import ReviewGuidance
    from tests.factories import make_escalation

    escalation = make_escalation()  # a step held at the gate: the risk check classed it
    client.force_login(admin)

    response = client.post(
        reverse("guidance:list"),
        {"condition": "risk", "tool": "", "text": "Read the <b>whole</b> output first."},
    )

    assert response.status_code == 302
    assert ReviewGuidance.objects.get().condition == "risk"
    client.force_login(reviewer)
    pane = client.get(reverse("escalations:detail", kwargs={"escalation_id": escalation.pk}))
    assert "Read the &lt;b&gt;whole&lt;/b&gt; output first." in pane.content.decode()


def test_guidance_naming_neither_condition_nor_tool_is_refused(client, admin):
    from escalations.models import ReviewGuidance

    client.force_login(admin)

    response = client.post(reverse("guidance:list"), {"condition": "", "tool": "", "text": ""})

    assert response.status_code == 400
    body = response.content.decode()
    assert body.count("Name a condition, a tool, or both.") == 1
    assert "is violated" not in body
    assert "This field is required." in body  # the text, named in the same answer
    assert not ReviewGuidance.objects.exists()


def test_guidance_is_edited_and_removed(client, admin):
    from escalations.models import ReviewGuidance

    guidance = ReviewGuidance.objects.create(condition="drift", text="old")
    client.force_login(admin)
    url = reverse("guidance:edit", kwargs={"guidance_id": guidance.pk})

    client.post(url, {"condition": "drift", "tool": "", "text": "new words"})
    guidance.refresh_from_db()
    assert guidance.text == "new words"

    client.post(reverse("guidance:delete", kwargs={"guidance_id": guidance.pk}))
    assert not ReviewGuidance.objects.exists()


def test_the_versions_page_warns_when_no_version_is_active(client, admin):
    from policies.services import policy_version_deactivate

    version = demo_policy_version()
    client.force_login(admin)
    assert "no run can start" not in client.get(reverse("policies:list")).content.decode()

    policy_version_deactivate(version_id=version.pk)

    assert "no run can start" in client.get(reverse("policies:list")).content.decode()


def test_the_api_docs_page_links_back_to_the_product(client, admin):
    client.force_login(admin)

    body = client.get(reverse("api:docs")).content.decode()

    assert f'href="{reverse("home")}"' in body
    assert f'href="{reverse("tokens:list")}"' in body


def test_an_admin_adds_a_person_who_signs_in_with_the_password_shown_once(client, admin):
    from django.contrib.auth import get_user_model

    client.force_login(admin)

    response = client.post(
        reverse("people:list"), {"username": "maria", "email": "", "roles": ["reviewer"]}
    )

    assert response.status_code == 200
    password = response.context["issued"]["password"]
    assert password in response.content.decode()
    assert password not in client.get(reverse("people:list")).content.decode()
    maria = get_user_model().objects.get(username="maria")
    assert list(maria.groups.values_list("name", flat=True)) == ["reviewer"]
    client.logout()
    signed_in = client.post(reverse("login"), {"username": "maria", "password": password})
    assert signed_in.status_code == 302
    assert client.get(reverse("escalations:queue")).status_code == 200


def test_a_taken_or_malformed_sign_in_name_is_refused(client, admin):
    client.force_login(admin)

    taken = client.post(reverse("people:list"), {"username": "ADMIN", "roles": []})
    malformed = client.post(reverse("people:list"), {"username": "two words", "roles": ["x"]})

    assert taken.status_code == 400
    assert "has this sign-in name already" in taken.content.decode()
    assert set(malformed.context["form"].errors) == {"username", "roles"}


def test_roles_are_changed_but_an_admin_cannot_drop_their_own_admin_role(client, admin, auditor):
    client.force_login(admin)

    client.post(reverse("people:roles", kwargs={"user_id": auditor.pk}), {"roles": ["reviewer"]})
    response = client.post(
        reverse("people:roles", kwargs={"user_id": admin.pk}), {"roles": ["reviewer"]}, follow=True
    )

    assert list(auditor.groups.values_list("name", flat=True)) == ["reviewer"]
    assert "admin" in admin.groups.values_list("name", flat=True)
    assert "cannot take the admin role from yourself" in response.content.decode()


def test_a_deactivated_person_loses_their_session_and_tokens(client, admin, auditor):
    from django.test import Client

    from guardian_core.services import api_token_create

    _, secret = api_token_create(user=auditor, name="export")
    auditor_browser = Client()
    auditor_browser.force_login(auditor)
    assert auditor_browser.get(reverse("runs:list")).status_code == 200
    client.force_login(admin)

    client.post(reverse("people:active", kwargs={"user_id": auditor.pk}), {"active": "0"})

    assert auditor_browser.get(reverse("runs:list")).status_code == 302  # to the sign-in page
    api = Client().get(reverse("api:run-list"), HTTP_AUTHORIZATION=f"Bearer {secret}")
    assert api.status_code == 403


def test_an_admin_cannot_deactivate_themselves(client, admin):
    client.force_login(admin)

    response = client.post(
        reverse("people:active", kwargs={"user_id": admin.pk}), {"active": "0"}, follow=True
    )

    admin.refresh_from_db()
    assert admin.is_active
    assert "cannot deactivate your own account" in response.content.decode()


def test_a_reset_password_replaces_the_old_one(client, admin, auditor):
    from tests.conftest import PERSONA_PASSWORD

    client.force_login(admin)

    response = client.post(reverse("people:password", kwargs={"user_id": auditor.pk}))

    auditor.refresh_from_db()
    assert not auditor.check_password(PERSONA_PASSWORD)
    assert auditor.check_password(response.context["issued"]["password"])


def test_a_person_changes_their_own_password(client, reviewer):
    from tests.conftest import PERSONA_PASSWORD

    client.force_login(reviewer)

    response = client.post(
        reverse("password_change"),
        {
            "old_password": PERSONA_PASSWORD,
            "new_password1": "a much longer new secret 42",
            "new_password2": "a much longer new secret 42",
        },
    )

    assert response.status_code == 302
    reviewer.refresh_from_db()
    assert reviewer.check_password("a much longer new secret 42")


def test_revoking_a_token_asks_first_on_a_page_of_its_own(client, admin, auditor):
    from guardian_core.services import api_token_create

    token, _ = api_token_create(name="nightly export", user=auditor)
    client.force_login(admin)
    revoke = reverse("tokens:revoke", kwargs={"token_id": token.pk})
    listed = client.get(reverse("tokens:list")).content.decode()
    # The list's button is a link to the confirmation, not a form that revokes at once.
    assert f'<a class="button danger" href="{revoke}"' in listed
    assert f'action="{revoke}"' not in listed

    confirm = client.get(revoke)
    token.refresh_from_db()
    assert token.revoked_at is None  # asking revokes nothing
    page = confirm.content.decode()
    assert "Revoke token “<bdi>nightly export</bdi>”?" in page  # its name isolated
    assert "auditor" in page
    assert f'<form method="post" action="{revoke}"' in page
    assert f'href="{reverse("tokens:list")}"' in page  # the way back keeps it

    assert client.post(revoke).status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    # Asking again about a revoked token says so on the list.
    assert client.get(revoke)["Location"] == reverse("tokens:list")


def test_the_previews_band_problem_says_its_number_in_the_readers_notation(client, admin):
    client.force_login(admin)
    data = _form_data(
        demo_policy_version(), integrity_c_stop="1", integrity_c_cont="99", integrity_delta="0.05"
    )

    preview = client.post(reverse("policies:preview"), data, headers={"accept-language": "fr"})

    assert "δ doit être inférieur à 0,01" in preview.content.decode().replace("\n", " ")
