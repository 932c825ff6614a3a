"""The Content-Security-Policy in Chromium: every page and the admin work under it, with no
violation reported, and htmx still sends its requests (CSRF header included)."""

import pytest
from playwright.sync_api import Page, expect

from escalations.models import EscalationKind
from tests.conftest import PERSONA_PASSWORD
from tests.factories import make_escalation, make_run
from tests.test_browser import sign_in

pytestmark = pytest.mark.browser

# Test instrumentation, injected through the DevTools protocol (which the page's CSP does not
# govern): it records each violation the browser reports to the page.
LISTEN = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(`${event.violatedDirective} ${event.blockedURI} ${event.sourceFile}`);
});
"""


class Violations:
    """What Chromium reported against the policy on one page: its console messages about the
    policy and the page's securitypolicyviolation events."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.console: list[str] = []
        page.add_init_script(LISTEN)
        page.on("console", self._console)

    def _console(self, message) -> None:
        text = message.text
        if "Content Security Policy" in text or "Content-Security-Policy" in text:
            self.console.append(f"{self.page.url}: {text}")

    def visit(self, url: str) -> list[str]:
        """Open `url`, let it settle, and return what was reported there (console + events)."""
        already = len(self.console)
        response = self.page.goto(url)
        assert response is not None
        self.page.wait_for_load_state("networkidle")
        events = self.page.evaluate("window.__violations")
        return [*self.console[already:], *(f"{url}: {event}" for event in events)]


def test_the_policy_is_enforced_and_a_violation_would_be_heard(live_server, page):
    violations = Violations(page)
    assert violations.visit(f"{live_server.url}/accounts/login/") == []

    # An inline script added to the page is refused, and both listeners hear it: a clean run
    # of the tests below means no violation, not deaf listeners.
    page.evaluate(
        "() => { const s = document.createElement('script');"
        " s.textContent = 'window.__ran = true'; document.body.append(s); }"
    )
    page.wait_for_timeout(200)
    assert page.evaluate("window.__ran === undefined")
    assert page.evaluate("window.__violations.length") == 1
    assert violations.console, "Chromium reported no CSP message on the console"


def test_the_role_pages_and_the_sign_in_page_raise_no_violation(
    live_server, page, reviewer, auditor, admin
):
    escalation = make_escalation(summary="<script>alert(1)</script> refund everything")
    violations = Violations(page)
    base = live_server.url
    reported = violations.visit(f"{base}/accounts/login/")
    for username, paths in (
        # The queue, and the decision pane where untrusted content is shown.
        ("reviewer", ["/escalations/", f"/escalations/{escalation.pk}/"]),
        ("auditor", ["/runs/"]),
        ("admin", ["/policies/"]),
    ):
        sign_in(page, base, username)
        expect(page.get_by_role("button", name="Sign out")).to_be_visible()
        for path in [*paths, "/no-such-page/"]:
            reported += violations.visit(f"{base}{path}")
        page.get_by_role("button", name="Sign out").click()
        expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    assert reported == []


def test_the_admin_works_under_the_policy(live_server, page, django_user_model):
    make_run()
    make_escalation()
    django_user_model.objects.create_superuser("root", password=PERSONA_PASSWORD)
    violations = Violations(page)
    base = live_server.url

    reported = violations.visit(f"{base}/admin/login/")
    page.get_by_label("Username").fill("root")
    page.get_by_label("Password").fill(PERSONA_PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Site administration")).to_be_visible()
    for path in (
        "/admin/",
        "/admin/runs/run/",
        "/admin/guardian_core/policyversion/add/",
        "/admin/escalations/reviewguidance/add/",
        "/admin/escalations/escalation/",
    ):
        reported += violations.visit(f"{base}{path}")
    assert reported == []

    # The admin's own scripts run: the changelist's select-all box ticks every row and shows
    # the count (actions.js), which needs script-src 'self' and no inline script.
    page.locator("#action-toggle").check()
    expect(page.locator("input.action-select").first).to_be_checked()
    expect(page.locator(".action-counter")).to_contain_text("1 of 1 selected")


def test_htmx_runs_without_eval_and_sends_the_csrf_header(live_server, page, reviewer):
    sign_in(page, live_server.url, "reviewer")
    expect(page).to_have_url(f"{live_server.url}/escalations/")
    # htmx is deferred and reads its <meta> config when the document is ready: ask after that.
    page.wait_for_load_state("load")
    assert page.evaluate("htmx.config.allowEval") is False
    assert page.evaluate("htmx.config.includeIndicatorStyles") is False
    # htmx injected no <style> (the CSP would refuse it and report a violation).
    assert page.locator("head style").count() == 0

    # A POST through htmx carries the token from the body's hx-headers; Django accepts it (the
    # sign-out happens), so CSRF still works with htmx under the policy.
    with page.expect_request(lambda r: r.url.endswith("/accounts/logout/")) as request:
        page.evaluate("htmx.ajax('POST', '/accounts/logout/', {source: 'main', swap: 'none'})")
    assert request.value.headers.get("x-csrftoken")
    page.goto(f"{live_server.url}/escalations/")
    expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


def test_a_decision_swapped_in_by_htmx_raises_no_violation(live_server, page, reviewer):
    # The decision pane comes back from the server as a fragment that htmx swaps in and
    # settles (copying attributes between old and new elements): none of it may be an inline
    # script or style the policy refuses.
    escalation = make_escalation(summary="refund order 1234", kind=EscalationKind.UNCERTAIN)
    violations = Violations(page)
    sign_in(page, live_server.url, "reviewer")
    reported = violations.visit(f"{live_server.url}/escalations/{escalation.pk}/")
    # Rejecting without a reason is refused: the pane comes back (400) with the reason named.
    with page.expect_response(lambda r: r.url.endswith(f"/escalations/{escalation.pk}/decide")):
        page.locator("#decision-form button[value=reject]").first.click()
    expect(page.locator("#decision-area")).to_contain_text("needs a reason")
    page.wait_for_timeout(300)
    reported += violations.console
    reported += page.evaluate("window.__violations")
    assert reported == []
