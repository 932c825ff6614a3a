"""/api/docs/ in Chromium: Swagger UI served from the sidecar package renders every operation
of the schema under the strict Content-Security-Policy, with no violation reported."""

import pytest
from playwright.sync_api import expect

from guardian_core.api import API_ENDPOINTS
from tests.test_browser import sign_in
from tests.test_browser_csp import Violations

pytestmark = pytest.mark.browser


def test_the_api_docs_render_every_operation_with_no_csp_violation(live_server, page, auditor):
    violations = Violations(page)
    base = live_server.url
    reported = violations.visit(f"{base}/accounts/login/")
    sign_in(page, base, "auditor")
    # Nothing comes from a CDN: every request the page makes stays on this server.
    outside: list[str] = []
    page.on("request", lambda r: None if r.url.startswith(base) else outside.append(r.url))

    reported += violations.visit(f"{base}/api/docs/")

    expect(page.locator(".swagger-ui .info .title")).to_contain_text("Guardian API")
    resolve = page.locator(".opblock-summary-path", has_text="/api/escalations/{id}/resolve/")
    expect(resolve).to_be_visible()
    # Every operation of the schema: the index's endpoints but the schema and this page, and
    # the index itself.
    assert page.locator(".opblock").count() == len(API_ENDPOINTS) - 2 + 1
    assert reported == []
    assert outside == []
