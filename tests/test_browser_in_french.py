"""A French-speaking reviewer, auditor and admin each do their job in French, in Chromium.

The browser asks for French (its locale and Accept-Language), as a French-speaking person's
browser does; each person signs in on the French login page and finds every step of their job
in French words, literal here so a missing translation fails by name. The reviewer also
switches the pages to English and back with the top bar's switch, which the next session keeps.
"""

import pytest
from playwright.sync_api import Browser, Page, expect

from escalations.models import Verdict
from guardian_core.models import PersonPreferences, PolicyVersion
from policies.models import PolicyActivation
from tests.conftest import PERSONA_PASSWORD
from tests.runs_helpers import drive, start
from tests.test_policy_gate import (  # noqa: F401 (fixtures)
    current,
    examples,
    history_from_v1,
    version,
    worse,
)

pytestmark = pytest.mark.browser


@pytest.fixture
def french(browser: Browser):
    """A page in a browser that asks for French."""
    context = browser.new_context(locale="fr-FR", extra_http_headers={"Accept-Language": "fr"})
    yield context.new_page()
    context.close()


def sign_in_in_french(page: Page, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/")
    expect(page.locator("html")).to_have_attribute("lang", "fr")
    expect(page.get_by_role("heading", name="Se connecter")).to_be_visible()
    page.get_by_label("Nom d’utilisateur").fill(username)
    page.get_by_label("Mot de passe").fill(PERSONA_PASSWORD)
    with page.expect_navigation():
        page.locator("main").get_by_role("button", name="Se connecter").click()
    expect(page.get_by_role("button", name="Se déconnecter")).to_be_visible()


def test_a_french_reviewer_approves_a_held_refund_in_french(live_server, french, reviewer):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    sign_in_in_french(french, live_server.url, "reviewer")

    expect(french.get_by_role("heading", name="Escalades ouvertes")).to_be_visible()
    expect(french.get_by_role("navigation", name="Principale")).to_contain_text("Escalades")
    french.goto(f"{live_server.url}/escalations/{escalation.pk}/")
    expect(french.get_by_role("heading", name=f"Escalade {escalation.pk}")).to_be_visible()
    french.locator("#decision-form button[value=approve]").first.click()

    expect(french.locator("#done-title")).to_have_text("Approuvé")
    verdict = Verdict.objects.get(escalation=escalation)
    assert (verdict.reviewer, verdict.approved_calls) == (reviewer, [0])


def test_a_reviewer_switches_to_english_and_the_next_session_keeps_it(
    live_server, french, browser, reviewer
):
    sign_in_in_french(french, live_server.url, "reviewer")
    french.screenshot(path="/tmp/fr_admin.png", full_page=True)
    with french.expect_navigation():
        french.get_by_role("button", name="English").click()
    expect(french.locator("html")).to_have_attribute("lang", "en")
    expect(french.get_by_role("heading", name="Open escalations")).to_be_visible()
    assert PersonPreferences.objects.get(user=reviewer).language == "en"

    # Another browser, which still asks for French: the person's choice wins once signed in.
    other = browser.new_context(locale="fr-FR", extra_http_headers={"Accept-Language": "fr"})
    try:
        page = other.new_page()
        page.goto(f"{live_server.url}/")
        page.get_by_label("Nom d’utilisateur").fill("reviewer")
        page.get_by_label("Mot de passe").fill(PERSONA_PASSWORD)
        with page.expect_navigation():
            page.locator("main").get_by_role("button", name="Se connecter").click()
        expect(page.locator("html")).to_have_attribute("lang", "en")
        expect(page.get_by_role("heading", name="Open escalations")).to_be_visible()
    finally:
        other.close()


def test_a_french_auditor_reads_a_run_and_verifies_its_chain_in_french(
    live_server, french, auditor
):
    run = drive(start("refund_waits_for_approval"))
    sign_in_in_french(french, live_server.url, "auditor")

    expect(french.get_by_role("heading", name="Exécutions")).to_be_visible()
    french.goto(f"{live_server.url}/runs/{run.pk}/")
    french.get_by_role("button", name="Vérifier la chaîne").click()
    expect(french.locator("#chain-report")).to_contain_text("Chaîne intacte")


@pytest.fixture
def refused_candidate(live_server, french, admin, current):  # noqa: F811
    """A version the gate refuses, its activate page open for the French admin."""
    candidate = worse()
    sign_in_in_french(french, live_server.url, "admin")
    expect(french.get_by_role("heading", name="Versions de politique")).to_be_visible()
    french.goto(f"{live_server.url}/policies/{candidate.pk}/activate")
    return candidate


def test_a_french_admin_activates_a_version_over_the_gate_in_french(french, refused_candidate):
    candidate = refused_candidate
    # The gate's reasons are worded for her: French template, French numbers.
    expect(french.locator(".gate-refused")).to_contain_text(
        "integrity\u00a0: le coût attendu par exemple se dégrade au-delà de 5\u00a0%"
    )
    # French typography: a no-break space before the question mark.
    expect(french.locator("label[for=id_comment]")).to_have_text(
        "Pourquoi l’activer\u00a0? (obligatoire)"
    )
    french.locator("#id_comment").fill("Moins d’escalades pour le pilote")
    french.get_by_label(
        "Raison de la dérogation (obligatoire pour activer malgré la barrière d’évaluation)"
    ).fill("Les étiquettes importées précèdent les nouveaux outils")
    with french.expect_navigation():
        french.get_by_role(
            "button", name="Passer outre la barrière d’évaluation et activer"
        ).click()

    expect(french.get_by_text(f"La version de politique {candidate} est active")).to_be_visible()
    assert PolicyVersion.objects.get(is_active=True) == candidate
    record = PolicyActivation.objects.get(version=candidate)
    assert record.override_reason == "Les étiquettes importées précèdent les nouveaux outils"


def test_the_flips_link_takes_the_focus_to_the_flips(french, refused_candidate):
    french.locator(".gate-summary").get_by_role("link").click()

    # An in-page link moves the focus with the view, so the next Tab continues from there.
    expect(french.locator("#gate-flips")).to_be_focused()
