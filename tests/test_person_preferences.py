"""A person's language, time zone and keyboard shortcuts: chosen once, kept, obeyed everywhere."""

import re
from datetime import UTC, datetime

import pytest
from django.conf import settings

from guardian_core.models import ApiToken, PersonPreferences
from guardian_core.preferences import preferences_of

pytestmark = pytest.mark.django_db
SWITCH = re.compile(
    r'<button type="submit" name="language" value="(\w+)" lang="(\w+)"[^>]*>([^<]+)<'
)


def _sign_in(client, user):
    client.force_login(user)
    return client


def test_the_switch_speaks_french_to_someone_not_signed_in(client):
    response = client.post("/language", {"language": "fr", "next": "/accounts/login/"})
    assert response.status_code == 302
    assert response.headers["Location"] == "/accounts/login/"
    assert response.cookies[settings.LANGUAGE_COOKIE_NAME].value == "fr"
    page = client.get("/accounts/login/", headers={"accept-language": "en"})
    assert '<html lang="fr"' in page.text
    assert "Aller au contenu de la page" in page.text


def test_a_signed_in_persons_choice_is_kept_for_their_next_session(client, reviewer):
    _sign_in(client, reviewer).post("/language", {"language": "fr", "next": "/escalations/"})
    assert PersonPreferences.objects.get(user=reviewer).language == "fr"
    client.cookies.clear()  # another browser, which asks for English
    _sign_in(client, reviewer)
    page = client.get("/escalations/", headers={"accept-language": "en"})
    assert '<html lang="fr"' in page.text
    assert page.headers["Content-Language"] == "fr"


def test_the_browsers_language_speaks_until_the_person_chooses(client, reviewer):
    page = _sign_in(client, reviewer).get("/escalations/", headers={"accept-language": "fr-CA"})
    assert '<html lang="fr"' in page.text
    assert not PersonPreferences.objects.filter(user=reviewer).exists()


def test_the_switch_offers_the_other_language_named_in_itself(client):
    page = client.get("/accounts/login/", headers={"accept-language": "en"})
    buttons = SWITCH.findall(page.text)
    assert buttons == [("fr", "fr", "Français")]
    page = client.get("/accounts/login/", headers={"accept-language": "fr"})
    buttons = SWITCH.findall(page.text)
    assert buttons == [("en", "en", "English")]


def test_an_unknown_language_is_refused_by_name_and_changes_nothing(client, reviewer):
    response = _sign_in(client, reviewer).post("/language", {"language": "xx", "next": "/"})
    assert response.status_code == 400
    assert "'xx'" in response.text
    assert "en, fr" in response.text
    assert settings.LANGUAGE_COOKIE_NAME not in response.cookies
    assert not PersonPreferences.objects.filter(user=reviewer).exists()


@pytest.mark.parametrize("away", ["https://elsewhere.example/", "//elsewhere.example/x"])
def test_the_switch_never_sends_a_person_to_another_site(client, away):
    response = client.post("/language", {"language": "fr", "next": away})
    assert response.headers["Location"] == "/"


def test_preferences_page_saves_every_choice(client, auditor):
    page = _sign_in(client, auditor).get("/accounts/preferences/")
    assert page.status_code == 200
    response = client.post(
        "/accounts/preferences/",
        {"language": "fr", "time_zone": "Europe/Paris", "keyboard_shortcuts": ""},
    )
    assert response.status_code == 302
    saved = preferences_of(auditor)
    assert (saved.language, saved.time_zone, saved.keyboard_shortcuts) == (
        "fr",
        "Europe/Paris",
        False,
    )
    page = client.get("/accounts/preferences/")
    assert "Vos préférences sont enregistrées." in page.text


def test_a_bad_time_zone_is_named_and_nothing_is_saved(client, auditor):
    response = _sign_in(client, auditor).post(
        "/accounts/preferences/", {"language": "de", "time_zone": "Mars/Olympus"}
    )
    assert response.status_code == 400
    problems = response.context["form"].errors
    assert set(problems) == {"language", "time_zone"}
    assert not PersonPreferences.objects.filter(user=auditor).exists()


def test_dates_are_shown_in_the_persons_time_zone(client, admin):
    token = ApiToken.objects.create(user=admin, name="hook", prefix="abc", digest="d" * 64)
    ApiToken.objects.filter(pk=token.pk).update(
        created_at=datetime(2026, 1, 15, 12, 30, tzinfo=UTC)
    )
    page = _sign_in(client, admin).get("/tokens/")
    assert "2026-01-15 12:30" in page.text
    client.post("/accounts/preferences/", {"time_zone": "Asia/Tokyo", "keyboard_shortcuts": "on"})
    page = client.get("/tokens/")
    assert "2026-01-15 21:30" in page.text


def test_shortcuts_turned_off_are_said_on_every_page(client, reviewer):
    page = _sign_in(client, reviewer).get("/escalations/")
    assert 'data-keyboard-shortcuts="on"' in page.text
    client.post("/accounts/preferences/", {"language": "", "time_zone": ""})
    page = client.get("/escalations/")
    assert 'data-keyboard-shortcuts="off"' in page.text
    client.logout()  # and in the next session
    page = _sign_in(client, reviewer).get("/runs/")
    assert 'data-keyboard-shortcuts="off"' in page.text


def test_a_page_costs_no_query_for_the_persons_preferences(client, reviewer):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    PersonPreferences.objects.create(user=reviewer, language="fr")
    _sign_in(client, reviewer)
    with CaptureQueriesContext(connection) as queries:
        page = client.get("/escalations/")
    assert '<html lang="fr"' in page.text
    assert not [q for q in queries if "person_preferences" in q["sql"].lower()]


def test_api_messages_follow_accept_language(client):
    english = client.get("/api/runs/", headers={"accept-language": "en"})
    french = client.get("/api/runs/", headers={"accept-language": "fr"})
    assert english.status_code == french.status_code == 403
    assert english.json()["detail"] == ["Authentication credentials were not provided."]
    assert french.json()["detail"] == ["Informations d'authentification non fournies."]
