"""The auditors' replay, turn replay and probe pages and the runs list in Chromium: they render
under the CSP with no violation and read in words (screenshots in /tmp/h6_*.png to look at)."""

import pytest
from playwright.sync_api import expect

from tests.runs_helpers import drive, start
from tests.test_browser import sign_in
from tests.test_browser_csp import Violations

pytestmark = pytest.mark.browser


def test_the_replay_and_probe_pages_read_in_words_under_the_policy(live_server, page, auditor):
    done = drive(start("goal_reached"))
    held = drive(start("refund_waits_for_approval"))
    last = done.turns.order_by("-index").first().index
    gated = held.turns.get(projection={}).index
    violations = Violations(page)
    base = live_server.url
    sign_in(page, base, "auditor")
    page.set_viewport_size({"width": 1280, "height": 900})

    shots = {
        "runs": f"{base}/runs/",
        "run_held": f"{base}/runs/{held.pk}/",
        "replay": f"{base}/runs/{done.pk}/replay/",
        "turn_replay_held": f"{base}/runs/{held.pk}/turns/{gated}/replay/",
        "turn_replay": f"{base}/runs/{done.pk}/turns/{last}/replay/",
        "probe": f"{base}/runs/{done.pk}/turns/{last}/probe/?probe=1&goal=Another+goal",
    }
    reported = []
    for name, url in shots.items():
        reported += violations.visit(url)
        page.screenshot(path=f"/tmp/h6_{name}.png", full_page=True)
    assert reported == []

    page.goto(shots["probe"])
    expect(page.locator("table.probe-table")).to_contain_text("Injected instructions")
    expect(page.locator("table.probe-table")).to_contain_text("Stop with success — Goal reached")
    page.goto(shots["run_held"])
    expect(page.locator("#run-actions")).to_contain_text("cannot be probed: held at the gate")
    expect(page.get_by_role("link", name=f"Probe turn {gated}")).to_have_count(0)
