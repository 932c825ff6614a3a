"""Every page's first Tab stop skips the top bar: a keyboard user reaches the page in one key."""

import pytest
from playwright.sync_api import expect

from tests.test_browser import sign_in
from tests.test_browser_policy_admin import focused

pytestmark = pytest.mark.browser


@pytest.mark.parametrize(("persona", "path"), [("admin", "/policies/"), ("auditor", "/runs/")])
def test_the_first_tab_stop_skips_to_the_page(live_server, page, request, persona, path):
    request.getfixturevalue(persona)
    sign_in(page, live_server.url, persona)
    page.goto(f"{live_server.url}{path}")
    page.keyboard.press("Tab")
    assert focused(page)["text"] == "Skip to the page"
    expect(page.locator(".skip-link")).to_be_in_viewport()
    page.keyboard.press("Enter")
    assert focused(page)["tag"] == "MAIN"
    page.keyboard.press("Tab")
    assert focused(page)["text"] not in ("Policy versions", "Runs")  # past the top bar
