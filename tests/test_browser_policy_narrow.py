"""The policy version pages on a 390 px phone: the costs table of the new-version form scrolls
in its own box and a version's thresholds stack as one card per condition, so the page never
scrolls sideways and t*, the band and the caption stay in view (screenshots in
/tmp/h6_policy_*.png)."""

import pytest
from playwright.sync_api import expect

from tests.test_browser import sign_in
from tests.test_evaluation_page import active_version  # noqa: F401 (a fixture)

pytestmark = pytest.mark.browser

WIDTH = 390


def test_the_policy_form_and_version_page_fit_a_phone(live_server, page, admin, active_version):  # noqa: F811
    base = live_server.url
    page.goto(f"{base}/accounts/login/")
    sign_in(page, base, "admin")
    page.set_viewport_size({"width": WIDTH, "height": 900})

    page.goto(f"{base}/policies/new/")
    expect(page.get_by_role("heading", name="New policy version")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    page.screenshot(path="/tmp/h6_policy_new_390.png", full_page=True)

    page.goto(f"{base}/policies/{active_version.pk}/")
    expect(page.get_by_role("heading", name="Thresholds")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    # Each condition is a card: its t* and band are in view without scrolling anything.
    t_star = page.locator("table.derived-thresholds td", has_text="t* ").first
    expect(t_star).to_be_in_viewport()
    box = t_star.bounding_box()
    assert box is not None
    assert box["x"] + box["width"] <= WIDTH
    # The caption wraps between words within the window, not past it.
    caption = page.locator("table.derived-thresholds caption")
    right = caption.evaluate("el => el.getBoundingClientRect().right")
    assert right <= WIDTH
    page.screenshot(path="/tmp/h6_policy_version_390.png", full_page=True)
