"""The run page in Chromium: it renders under the CSP with no violation, the chart is drawn, a
collapsed tool result opens, and a live run's head updates itself."""

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from runs.models import Run
from tests.factories import make_decision, make_turn
from tests.runs_helpers import drive, start
from tests.test_browser import sign_in
from tests.test_browser_csp import Violations
from tests.test_run_page import run_with_turns

pytestmark = pytest.mark.browser

SCREENSHOT = "/tmp/b10_run.png"


def test_the_run_page_renders_under_the_policy_with_its_chart_and_results(
    live_server, page, auditor
):
    read = drive(start("refund_waits_for_approval"))
    injected = drive(start("injected_instruction"))
    reviewed = drive(start("coder_reviewer_round_cap"))
    violations = Violations(page)
    base = live_server.url
    sign_in(page, base, "auditor")
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()

    reported = []
    for run in (injected, reviewed, read):
        reported += violations.visit(f"{base}/runs/{run.pk}/")
    assert reported == []

    # The last page open is the refund's: its chart, then the read's result, collapsed.
    chart = page.locator("figure.run-chart svg")
    expect(chart).to_be_visible()
    assert chart.locator("circle.chart-point").count() == 5  # one condition-turn each
    assert chart.locator("line.chart-tstar").count() == 5
    result = page.locator("#turn-0 details.tl-result")
    body = result.locator("pre")
    expect(body).to_be_hidden()
    result.locator("summary").click()
    expect(body).to_be_visible()
    expect(body).to_contain_text('"damaged": true')
    page.set_viewport_size({"width": 1280, "height": 1400})
    page.screenshot(path=SCREENSHOT, full_page=True)

    # The injected output reads as text, inside its untrusted block.
    page.goto(f"{base}/runs/{injected.pk}/")
    injected_result = page.locator("#turn-0 details.tl-result")
    injected_result.locator("summary").click()
    expect(injected_result.locator("pre")).to_contain_text("IGNORE")
    assert page.evaluate("window.__violations") == []


def test_a_live_run_shows_a_new_turn_without_a_reload(live_server, page, auditor):
    run = drive(start("refund_waits_for_approval"))
    Run.objects.filter(pk=run.pk).update(status="running")
    violations = Violations(page)
    sign_in(page, live_server.url, "auditor")
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    assert violations.visit(f"{live_server.url}/runs/{run.pk}/") == []
    expect(page.locator("#turn-2")).to_have_count(0)

    now = timezone.now()
    turn = make_turn(
        run=run,
        index=2,
        proposal={"message": "a new step", "calls": []},
        started_at=now,
        finished_at=now,
    )
    make_decision(turn=turn, outcome="stop_failure", stop_reason="turn_cap")
    Run.objects.filter(pk=run.pk).update(
        status="failed", stop_reason="turn_cap", finished_at=now, updated_at=timezone.now()
    )

    expect(page.locator("#turn-2")).to_be_visible(timeout=8000)
    expect(page.locator(".run-status")).to_contain_text("Turn cap reached")
    # Ended: the new head no longer polls.
    expect(page.locator("#run-live")).not_to_have_attribute("hx-trigger", "every 2s")
    assert page.evaluate("window.__violations") == []


def test_older_turns_page_in_place_and_back_returns_to_the_latest(live_server, page, auditor):
    run = run_with_turns(55, status="succeeded", stop_reason="goal_reached")
    violations = Violations(page)
    sign_in(page, live_server.url, "auditor")
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()
    assert violations.visit(f"{live_server.url}/runs/{run.pk}/") == []
    expect(page.locator(".tl-turn")).to_have_count(50)

    page.get_by_role("link", name="Older turns").click()

    expect(page).to_have_url(f"{live_server.url}/runs/{run.pk}/?before=5")
    expect(page.locator(".tl-turn")).to_have_count(5)
    expect(page.locator("#turn-0")).to_be_visible()
    page.go_back()
    expect(page.locator(".tl-turn")).to_have_count(50)
    assert page.evaluate("window.__violations") == []


def test_held_turns_the_chain_head_and_the_replay_notes_render_under_the_policy(
    live_server, page, auditor, reviewer
):
    from escalations.models import EscalationStatus
    from escalations.verdicts import escalation_resolve

    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    escalation_resolve(escalation_id=escalation.pk, reviewer=reviewer, decision="approve")
    run = drive(run)
    held = run.turns.get(projection={}).index
    violations = Violations(page)
    base = live_server.url
    sign_in(page, base, "auditor")
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()

    reported = violations.visit(f"{base}/runs/{run.pk}/")
    mark = page.locator("figure.run-chart g.chart-held")
    assert mark.count() == 1
    expect(mark.locator("rect.chart-held-stripe")).to_be_visible()
    assert mark.locator("title").text_content() == (
        f"turn {held}: held at the gate, guardian not asked"
    )
    expect(page.locator(".chain-head code").first).to_have_text(
        run.turns.order_by("-index")[0].decision.content_hash
    )
    page.get_by_role("button", name="Verify chain").click()
    expect(page.locator("#chain-report")).to_contain_text("Chain intact: 4 decisions")
    page.set_viewport_size({"width": 1280, "height": 1400})
    page.screenshot(path="/tmp/b10_run_held.png", full_page=True)

    reported += violations.visit(f"{base}/runs/{run.pk}/turns/{held}/replay/")
    expect(
        page.get_by_text("Not offered on this turn: the step was held at the gate")
    ).to_be_visible()
    assert page.get_by_role("link", name="Ask the guardian again").count() == 0
    reported += violations.visit(f"{base}/runs/{run.pk}/turns/{held + 1}/probe/")
    expect(page.locator(".probe-scripted")).to_contain_text("This run's guardian is scripted")
    assert reported == []
