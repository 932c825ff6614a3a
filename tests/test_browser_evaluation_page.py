"""The evaluation page in Chromium: an admin goes from the policy versions to it, uploads a
trace file and reads the report under the CSP, at desktop and phone widths (screenshots in
/tmp/h8_evaluate_*.png to look at)."""

import pytest
from playwright.sync_api import expect

from tests.test_browser import sign_in
from tests.test_browser_csp import Violations
from tests.test_evaluate import _integrity_lines, _line, _risk_lines
from tests.test_evaluation_page import active_version  # noqa: F401 (a fixture)

pytestmark = pytest.mark.browser

TRACES = "\n".join(
    [*_integrity_lines(), *_risk_lines(), '{"condition": "<img src=x>"}', _line("drift", 4)]
)


@pytest.mark.parametrize("width", [1280, 390])
def test_an_admin_uploads_traces_and_reads_a_diagram_per_condition(
    live_server,
    page,
    admin,
    active_version,  # noqa: F811
    width,
):
    violations = Violations(page)
    base = live_server.url
    reported = violations.visit(f"{base}/accounts/login/")
    sign_in(page, base, "admin")
    page.set_viewport_size({"width": width, "height": 900})
    reported += violations.visit(f"{base}/policies/")

    page.get_by_role("link", name="Evaluate on traces").click()
    expect(page.get_by_role("heading", name="Evaluate on traces")).to_be_visible()
    page.get_by_label("Trace file", exact=True).set_input_files(
        {"name": "traces.jsonl", "mimeType": "application/x-ndjson", "buffer": TRACES.encode()}
    )
    page.get_by_label("Bins", exact=True).fill("5")
    page.get_by_role("button", name="Evaluate").click()
    page.wait_for_load_state("networkidle")

    expect(page.get_by_role("heading", name="Report")).to_be_visible()
    # The focus is on the report, below the long form, not on <body>.
    expect(page.get_by_role("heading", name="Report")).to_be_focused()
    expect(page.get_by_role("heading", name="Report")).to_be_in_viewport()
    diagrams = page.locator("svg.reliability-svg")
    expect(diagrams).to_have_count(2)  # integrity and risk; drift has no scored row
    for i in range(2):
        expect(diagrams.nth(i).locator("line.rel-diagonal")).to_have_count(1)
        box = diagrams.nth(i).bounding_box()
        assert box is not None
        assert box["width"] > 200  # legible, not squeezed
        assert box["x"] + box["width"] <= width
    expect(page.get_by_role("region", name="Malformed lines (1)")).to_contain_text(
        "line 15: condition: '<img src=x>'"
    )
    assert page.locator(".evaluate-lines img").count() == 0
    # Nothing wider than the window: the page does not scroll sideways.
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.screenshot(path=f"/tmp/h8_evaluate_{width}.png", full_page=True)
    page.locator(".evaluate-condition").first.screenshot(path=f"/tmp/h8_evaluate_{width}_one.png")
    reported += violations.console
    reported += page.evaluate("window.__violations")
    assert reported == []
