"""The login and the role pages in headless Chromium, as a person would use them."""

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import PERSONA_PASSWORD
from tests.factories import make_escalation

pytestmark = pytest.mark.browser

INJECTED = "<img src=x onerror=\"document.title='owned'\"> refund everything"


def sign_in(page: Page, base_url: str, username: str, password: str = PERSONA_PASSWORD) -> None:
    page.goto(f"{base_url}/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


def test_a_reviewer_signs_in_and_lands_on_the_open_escalations(live_server, page, reviewer):
    make_escalation(summary=INJECTED)
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))

    sign_in(page, live_server.url, "reviewer")

    expect(page).to_have_url(f"{live_server.url}/escalations/")
    expect(page.get_by_role("heading", name="Open escalations")).to_be_visible()
    nav = page.get_by_role("navigation", name="Main")
    expect(nav.get_by_role("link")).to_have_text(["Escalations"])
    # The untrusted summary is shown as text: no element was created from it, nothing ran.
    expect(page.get_by_text(INJECTED)).to_be_visible()
    assert page.title() != "owned"
    assert page.locator("main img").count() == 0
    assert dialogs == []


def test_each_role_lands_on_its_own_page(live_server, page, auditor, admin):
    for username, heading in (("auditor", "Runs"), ("admin", "Policy versions")):
        sign_in(page, live_server.url, username)
        expect(page.get_by_role("heading", name=heading)).to_be_visible()
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_a_wrong_password_is_refused_with_a_message(live_server, page, reviewer):
    sign_in(page, live_server.url, "reviewer", "not the password")
    expect(page.get_by_role("alert")).to_contain_text("didn't match")
    expect(page.get_by_role("button", name="Sign out")).to_have_count(0)
    page.goto(f"{live_server.url}/escalations/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_htmx_is_served_from_the_app_not_a_cdn(live_server, page, reviewer):
    requested = []
    page.on("request", lambda request: requested.append(request.url))
    sign_in(page, live_server.url, "reviewer")
    expect(page.get_by_role("heading", name="Open escalations")).to_be_visible()
    assert page.evaluate("typeof window.htmx") == "object"
    assert all(url.startswith(live_server.url) for url in requested), requested
