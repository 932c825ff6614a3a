"""Untrusted text in Chromium: an unbroken run of 300 000 characters in a verdict's reason (a
row written before reasons were capped, or imported) wraps inside its column on the run page
and the decision pane, and the verdict says what the reviewer edited (issue 22, item 5)."""

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from escalations.held_calls import escalation_held_calls
from escalations.models import EscalationKind, EscalationStatus, ReviewGuidance, Verdict
from escalations.verdicts import escalation_resolve
from tests.factories import make_escalation
from tests.runs_helpers import drive, start
from tests.test_browser import sign_in
from tests.test_browser_csp import Violations

pytestmark = pytest.mark.browser

SCREENSHOT = "/tmp/h5a_run_page_edited_verdict.png"
VIEWPORT = 1280
MARGIN = 20
LONG = "W" * 300_000


def a_run_with_an_edited_verdict_and_a_long_reason(reviewer):
    """The demo refund approved with its amount cut to 39.9, and on the same turn an older
    rejection whose reason is 300 000 characters with no space."""
    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    (call,) = escalation_held_calls(escalation)
    escalation_resolve(
        escalation_id=escalation.pk,
        reviewer=reviewer,
        decision="approve",
        reason="Refund the price paid after the voucher.",
        edited_arguments={0: {**call.arguments, "amount": 39.9}},
        seen_hashes={0: call.action_hash},
    )
    older = make_escalation(
        turn=escalation.turn,
        kind=EscalationKind.UNCERTAIN,
        status=EscalationStatus.REJECTED,
        resolved_at=timezone.now(),
        summary="An uncertain answer",
    )
    Verdict.objects.create(escalation=older, decision="reject", reason=LONG, reviewer=reviewer)
    return run, escalation, older


def page_width(page) -> int:
    return page.evaluate("document.documentElement.scrollWidth")


def test_a_300000_character_reason_wraps_on_the_run_page(live_server, page, reviewer, auditor):
    run, _, _ = a_run_with_an_edited_verdict_and_a_long_reason(reviewer)
    page.set_viewport_size({"width": VIEWPORT, "height": 1000})
    violations = Violations(page)
    sign_in(page, live_server.url, "auditor")
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()

    assert violations.visit(f"{live_server.url}/runs/{run.pk}/") == []
    assert page_width(page) <= VIEWPORT + MARGIN
    edits = page.locator(".tl-verdict-edits")
    expect(edits).to_contain_text("approved with edited arguments: amount 49.9 → 39.9")
    edits.scroll_into_view_if_needed()
    page.mouse.wheel(0, -250)
    page.screenshot(path=SCREENSHOT)


def test_a_long_reason_and_long_guidance_wrap_on_the_decision_pane(
    live_server, page, reviewer, other_reviewer
):
    _, _, older = a_run_with_an_edited_verdict_and_a_long_reason(reviewer)
    ReviewGuidance.objects.create(condition="drift", text="G" * 2000)
    page.set_viewport_size({"width": VIEWPORT, "height": 1000})
    violations = Violations(page)
    sign_in(page, live_server.url, "other_reviewer")
    expect(page.get_by_role("button", name="Sign out")).to_be_visible()

    assert violations.visit(f"{live_server.url}/escalations/{older.pk}/") == []
    expect(page.locator("#closed-title")).to_be_visible()
    assert page_width(page) <= VIEWPORT + MARGIN
