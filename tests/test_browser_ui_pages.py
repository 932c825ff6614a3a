"""What a reviewer, auditor and admin met in Chromium (issue 22, item 5): long goals in the
runs list, the monitoring charts, the gates' verdicts, the guardian model pages."""

import pytest
from playwright.sync_api import expect

from policies.learning import guardian_model_job_start
from policies.models import GuardianModelJob
from tests.factories import make_guardian_model_version, make_run
from tests.test_browser import sign_in
from tests.test_guardian_model_pages import good_active_bad_candidate, labelled  # noqa: F401

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


def test_the_guardian_model_gate_loads_its_report_and_says_the_verdict_in_the_first_screen(
    live_server,
    page,
    admin,
    good_active_bad_candidate,  # noqa: F811
):
    _, bad = good_active_bad_candidate
    sign_in(page, live_server.url, "admin")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{live_server.url}/policies/models/{bad.pk}/activate")
    # The page came at once; the report comes by itself (htmx) in place of the progress.
    refused = page.locator(".gate-refused")
    expect(refused).to_contain_text("integrity: calibration worsens", timeout=120_000)
    expect(page.locator("#gate-pending")).to_have_count(0)
    assert refused.bounding_box()["y"] + 40 < 800, "the verdict is in the first screen"
    expect(page.locator(".gate-summary")).to_contain_text("change outcome")
    summary_top = page.locator(".gate-summary").bounding_box()["y"]
    assert summary_top < page.locator("table.gate-flips").bounding_box()["y"]
    # The form came with the report: the override reason it needs is there to fill.
    expect(page.locator("#id_override_reason")).to_be_visible()
    page.screenshot(path="/tmp/h5b_guardian_model_gate.png", full_page=False)


def test_the_versions_table_refreshes_when_the_polled_job_ends(
    live_server,
    page,
    admin,
    good_active_bad_candidate,  # noqa: F811
):
    job = guardian_model_job_start(kind="recalibrate", adapter="local", conditions=["integrity"])
    sign_in(page, live_server.url, "admin")
    page.goto(f"{live_server.url}/policies/models/")
    expect(page.locator("#model-jobs")).to_contain_text(f"Job {job.pk}")
    table = page.locator("#model-versions table")
    before = table.locator("tbody tr").count()

    # What the worker does when the job ends: a new version, the job done.
    made = make_guardian_model_version()
    GuardianModelJob.objects.filter(pk=job.pk).update(status="done", version=made)

    expect(page.locator("#model-jobs")).to_contain_text("Done", timeout=15_000)
    expect(table.locator("tbody tr")).to_have_count(before + 1, timeout=15_000)
    expect(table).to_contain_text(f"version {made.number}")


@pytest.mark.parametrize("width", [1280, 390])
def test_the_monitoring_charts_fill_the_width_with_readable_labels_and_a_y_axis(
    live_server, page, admin, settings, width
):
    from django.db import connection

    from runs.models import DecisionOutcome
    from tests.test_policy_monitoring import _decisions_today, _suggestion_fixture

    if connection.vendor != "postgresql":
        pytest.skip(
            "its fixture backdates decisions with PostgreSQL's SET (test_policy_monitoring)"
        )
    settings.GUARDIAN_REVIEWER_CAPACITY_PER_HOUR = 0.1
    settings.GUARDIAN_MONITORING_SETTLE_SECONDS = 0  # fold the decisions made just now
    _suggestion_fixture()
    _decisions_today([(DecisionOutcome.ESCALATE, 0.55), (DecisionOutcome.CONTINUE, 0.05)])
    sign_in(page, live_server.url, "admin")
    page.set_viewport_size({"width": width, "height": 900})
    page.goto(f"{live_server.url}/policies/monitoring/")
    charts = page.locator("svg.monitoring-chart")
    assert charts.count() == 7  # the escalation rate and one per condition
    main = page.locator("main").evaluate("el => el.clientWidth")
    for chart in charts.all():
        box = chart.bounding_box()
        # The whole content width (less main's padding), or 720 px in a box that scrolls.
        assert box["width"] >= min(main - 48, 720) - 1, box
        sizes = chart.evaluate(
            """svg => [...svg.querySelectorAll('text')].map(
                t => parseFloat(t.getAttribute('font-size')) * svg.getScreenCTM().a)"""
        )
        assert sizes
        assert min(sizes) >= 12, sizes
        labels = chart.locator("text.chart-axis-label").all_text_contents()
        assert len(labels) == 2, labels  # a y label and the x label
        assert labels[1] == "day"
        assert chart.locator("line.chart-grid").count() >= 3  # the y ticks' grid lines
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    # The day above capacity and the suggestions say one thing: which escalations each counts.
    banner = page.locator(".problems").first
    expect(banner).to_contain_text("held irreversible calls included, which no δ changes")
    expect(page.locator("body")).not_to_contain_text("keeps its own condition within")
    page.screenshot(path=f"/tmp/h5b_monitoring_{width}.png", full_page=True)
    page.locator("#escalations-title").scroll_into_view_if_needed()
    page.locator("section").first.screenshot(path=f"/tmp/h5b_monitoring_rate_{width}.png")
    page.locator("section", has=page.locator("#cond-infeasible")).screenshot(
        path=f"/tmp/h5b_monitoring_infeasible_{width}.png"
    )


@pytest.mark.parametrize(("width", "height"), [(1280, 600), (390, 640)])
def test_the_argument_problems_are_on_screen_when_the_focus_goes_to_the_field(
    live_server, page, reviewer, width, height
):
    from tests.runs_helpers import drive, start
    from tests.test_browser_decision import keys_settled, open_pane

    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    page.set_viewport_size({"width": width, "height": height})
    open_pane(page, live_server.url, escalation)
    page.keyboard.press("e")
    page.locator("#arguments_0").fill('{"amount": "lots", "order_id": "ord_4472"}')
    # Where a reviewer who typed in the field is: scrolled down to it, the top of the pane out
    # of sight.
    page.locator("#arguments_0").evaluate("el => el.scrollIntoView({block: 'start'})")
    page.keyboard.press("Escape")
    page.keyboard.press("a")
    problems = page.locator("#decision-problems")
    expect(problems).to_be_visible()
    keys_settled(page)
    box = problems.bounding_box()
    assert box["y"] >= 0, f"the problems start {-box['y']:.0f} px above the screen"
    assert box["y"] < height, "the problems are below the screen"
    # The focus is on the field when both fit, else on the summary, whose link leads there.
    focused = page.evaluate("document.activeElement.id")
    assert focused in ("arguments_0", "decision-problems")
    if focused == "arguments_0":
        field = page.locator("#arguments_0").bounding_box()
        assert field["y"] + field["height"] <= height
    page.screenshot(path=f"/tmp/h5b_argument_problems_{width}.png")
