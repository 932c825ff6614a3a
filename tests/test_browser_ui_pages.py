"""What a reviewer, auditor and admin met in Chromium (issue 22, item 5): long goals in the
runs list, the monitoring charts, the gates' verdicts, the guardian model pages."""

import pytest
from playwright.sync_api import expect

from tests.factories import make_run
from tests.test_browser import sign_in

pytestmark = pytest.mark.browser

LONG_GOAL = (
    "Refund every order of the customer who wrote on Monday about the broken kettle, after "
    "checking each order's delivery status and the return policy that applied on the day of "
    "purchase, then write to the customer saying what was refunded and why, and close the "
    "ticket only when the customer has confirmed; "
) * 3


def test_a_long_goal_takes_two_lines_of_the_runs_list_at_1280_px(live_server, page, auditor):
    run = make_run(goal=LONG_GOAL)
    make_run(goal="Short goal")
    sign_in(page, live_server.url, "auditor")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_server.url}/runs/")
    cell = page.locator(f"#run-row-{run.pk} .run-goal")
    expect(cell).to_be_visible()
    lines = cell.evaluate(
        """el => {
            const text = el.querySelector('bdi');
            const line = parseFloat(getComputedStyle(text).lineHeight);
            return text.getBoundingClientRect().height / line;
        }"""
    )
    assert lines <= 2.05, f"the goal cell is {lines:.1f} lines high"
    # The whole goal is a click away.
    link = cell.locator("a")
    with page.expect_navigation():
        link.click()
    expect(page.locator("body")).to_contain_text(LONG_GOAL.strip())
