"""Accessibility checked by a machine (issue 28): the axe-core engine, pinned and vendored in
tests/vendor/axe-core/ (tests/vendor/MANIFEST.md), run in Chromium on every page of every role
(queue, decision pane, run page, replay, probe, policies, editor, gate, shadow, monitoring,
evaluation, models, tokens, people, login), each with real data on it, at 1280 and 390 px, in
English and French. A page passes with no violation of impact "serious" or "critical" under
the WCAG 2.0/2.1 A and AA rules (and 2.2 AA).

The page's CSP refuses an injected <script>, so axe's source is evaluated through DevTools
(page.evaluate), which the policy does not govern. One browser page per role, width and
language visits all of that role's pages."""

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest
from django.utils import translation
from django.utils.translation import gettext as _
from django.utils.translation import ngettext
from playwright.sync_api import Browser, Page, expect

from tests.conftest import PERSONA_PASSWORD
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.browser

VENDOR = Path(__file__).resolve().parent / "vendor"
AXE = VENDOR / "axe-core" / "axe.min.js"
TAGS = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
FAILING_IMPACTS = ("serious", "critical")
WIDTHS = (1280, 390)
LANGUAGES = ("en", "fr")

RUN_AXE = r"""async (tags) => {
    const results = await axe.run(document, {runOnly: {type: "tag", values: tags},
                                              resultTypes: ["violations"]});
    return results.violations.map(v => ({
        id: v.id, impact: v.impact, help: v.help,
        targets: v.nodes.map(n => {
            const why = (n.failureSummary || "").split("\n").slice(1).join(" ").slice(0, 160);
            return `${n.target.join(" ")} ${n.html.slice(0, 120)}` + (why ? ` (${why})` : "");
        }),
    }));
}"""


def axe_source() -> str:
    """axe.min.js as vendored, checked against the sha256 its manifest line pins."""
    source = AXE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()
    assert digest in (VENDOR / "MANIFEST.md").read_text(), "axe.min.js is not the pinned one"
    return source.decode()


def axe_violations(page: Page, source: str) -> list[dict]:
    """The serious and critical violations axe finds on the page as it is now."""
    if not page.evaluate("typeof window.axe === 'object'"):
        page.evaluate(source)
    found = page.evaluate(RUN_AXE, TAGS)
    return [v for v in found if v["impact"] in FAILING_IMPACTS]


def describe(url: str, violations: list[dict]) -> str:
    lines = []
    for v in violations:
        more = f"\n      … and {len(v['targets']) - 6} more" if len(v["targets"]) > 6 else ""
        targets = "".join(f"\n      {target}" for target in v["targets"][:6]) + more
        lines.append(f"  {url}: [{v['impact']}] {v['id']}: {v['help']}{targets}")
    return "\n".join(lines)


# The pages of each role, with data on them: each builder makes the rows and returns the
# pages to visit: a path, what to wait for before axe looks (a selector, or None), and what a
# person does next on the page (htmx swaps, a refusal), after which axe looks again.
Step = Callable[[Page], None]
Visit = tuple[str, str | None] | tuple[str, str | None, Step]


def _refuse_a_reject_without_reason(page: Page) -> None:
    page.locator("#decision-form button[value=reject]").first.click()
    expect(page.locator("#decision-area")).to_contain_text(
        _("a rejection needs a reason the actor can act on")
    )


def _verify_the_chain(page: Page) -> None:
    page.locator("button[hx-get$='/verify/']").click()
    intact = ngettext(
        "Chain intact: %(counter)s decision; head hash <code>%(head)s</code>",
        "Chain intact: %(counter)s decisions; head hash <code>%(head)s</code>",
        2,
    ).split(":")[0]
    expect(page.locator("#chain-report")).to_contain_text(intact)


def _filter_the_runs(page: Page) -> None:
    with page.expect_response(lambda r: "/runs/?" in r.url):
        page.locator("#run-filters input[type=search]").first.fill("refund")
    page.wait_for_load_state("networkidle")


def _evaluate_the_labelled_examples(page: Page) -> None:
    page.get_by_label(
        _("The labelled examples: reviewers' verdicts and imported traces (this app's own export)")
    ).check()
    with page.expect_navigation():
        page.locator("form.evaluate-form button[type=submit]").click()
    expect(page.get_by_role("heading", name=_("Report"))).to_be_visible()


def _edit_a_threshold(page: Page) -> None:
    with page.expect_response(lambda r: r.url.endswith("/policies/new/preview")):
        page.locator(".policy-costs td input").first.fill("7")
    page.wait_for_load_state("networkidle")


def _login_pages() -> list[Visit]:
    return [("/accounts/login/", None)]


def _reviewer_pages() -> list[Visit]:
    from escalations.models import EscalationKind
    from tests.factories import make_decision, make_escalation, make_tool_call, make_turn

    held = drive(start("refund_waits_for_approval")).escalations.get()
    turn = make_turn(proposal={"message": "Shall I close the ticket?", "calls": []})
    make_decision(
        turn=turn,
        outcome="escalate",
        reasons=[{"source": "goal_reached", "band": "uncertain", "detail": "0.48 near 0.5"}],
    )
    make_tool_call(turn=turn, tool="search_docs", result="an order record", status="done")
    uncertain = make_escalation(
        turn=turn, kind=EscalationKind.UNCERTAIN, summary="Is the goal reached?"
    )
    return [
        ("/escalations/", "#queue-rows"),
        (f"/escalations/{held.pk}/", "#decision-form"),
        (f"/escalations/{uncertain.pk}/", "#decision-form", _refuse_a_reject_without_reason),
        ("/escalations/examples/", None),
        ("/accounts/password/", None),
        ("/accounts/preferences/", "#id_language"),
    ]


def _auditor_pages() -> list[Visit]:
    run = drive(start("refund_waits_for_approval"))
    drive(start("injected_instruction"))
    return [
        ("/runs/", "#run-results", _filter_the_runs),
        (f"/runs/{run.pk}/", "figure.run-chart svg", _verify_the_chain),
        (f"/runs/{run.pk}/replay/", None),
        (f"/runs/{run.pk}/turns/0/replay/", None),
        (f"/runs/{run.pk}/turns/0/probe/", None),
    ]


def _admin_pages() -> list[Visit]:
    from django.contrib.auth import get_user_model

    from escalations.models import ExampleSource, LabelledExample, ReviewGuidance
    from guardian_core.adapters.http import DEFAULT_QUESTION_SET_VERSION
    from guardian_core.services import api_token_create
    from policies import shadow
    from policies.learning import guardian_model_activate
    from tests.factories import default_costs_policy_version_create, make_guardian_model_version
    from tests.test_guardian_model_gate import ALARMED, BENIGN, IDENTITY, INJECTED
    from tests.test_shadow import _candidate

    # The labelled examples a guardian model's gate measures on (test_guardian_model_pages).
    default_costs_policy_version_create()
    for texts, label in ((BENIGN, False), (INJECTED, True)):
        for text in texts:
            LabelledExample.objects.create(
                condition="integrity",
                projection={"goal": "Summarise my inbox", "last_results": [text]},
                label=label,
                source=ExampleSource.HUMAN,
                question_set_version=DEFAULT_QUESTION_SET_VERSION,
                model_version="someone-else-1",
            )
    good = make_guardian_model_version(calibration={"integrity": IDENTITY})
    guardian_model_activate(number=good.number, comment="the first map")
    bad = make_guardian_model_version(
        calibration={"integrity": ALARMED},
        figures={
            "integrity": {
                "method": "isotonic",
                "before": {"n": 20, "ece": 0.12, "brier": 0.2},
                "after": {"n": 20, "ece": 0.05, "brier": 0.15},
            }
        },
    )
    candidate = _candidate(goal_reached={"c_stop": 1.0, "c_cont": 1.0, "delta": 0.49})
    trial = shadow.shadow_trial_start(policy_version_id=candidate.pk, comment="wider goal band")
    drive(start("goal_reached"))
    shadow.shadow_trials_catch_up()
    admin = get_user_model().objects.get(username="admin")
    api_token_create(user=admin, name="ci pipeline")
    ReviewGuidance.objects.create(condition="integrity", text="Check who wrote the note.")
    return [
        ("/policies/", None),
        ("/policies/new/", None, _edit_a_threshold),
        (f"/policies/{candidate.pk}/", None),
        (f"/policies/{candidate.pk}/diff/", None),
        (f"/policies/{candidate.pk}/activate", None),
        ("/policies/evaluate/", None, _evaluate_the_labelled_examples),
        ("/policies/monitoring/", None),
        ("/policies/models/", None),
        (f"/policies/models/{bad.pk}/", None),
        (f"/policies/models/{bad.pk}/activate", ".gate-refused"),
        ("/policies/shadow/", None),
        (f"/policies/shadow/{trial.pk}/", None),
        ("/tokens/", None),
        ("/people/", None),
        ("/guidance/", None),
    ]


ROLES: dict[str, Callable[[], list[Visit]]] = {
    "anonymous": _login_pages,
    "reviewer": _reviewer_pages,
    "auditor": _auditor_pages,
    "admin": _admin_pages,
}


@pytest.fixture(autouse=True)
def _shadow_settled_at_once(settings):
    settings.GUARDIAN_SHADOW_SETTLE_SECONDS = 0
    settings.GUARDIAN_MONITORING_SETTLE_SECONDS = 0


@pytest.mark.parametrize("language", LANGUAGES)
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("role", list(ROLES))
def test_no_serious_or_critical_axe_violation_on_any_page_of_a_role(
    live_server, browser: Browser, request, role, width, language
):
    if role != "anonymous":
        request.getfixturevalue(role)
    visits = ROLES[role]()
    source = axe_source()
    context = browser.new_context(
        locale=language,
        extra_http_headers={"Accept-Language": language},
        viewport={"width": width, "height": 900},
    )
    page = context.new_page()
    base = live_server.url
    problems: list[str] = []
    # The steps look for the page's words in the language it speaks.
    with translation.override(language):
        try:
            if role == "anonymous":
                page.goto(f"{base}/accounts/login/")
                problems.append(describe("/accounts/login/", axe_violations(page, source)))
                # The refusal as well: the form with its alert.
                page.locator("#id_username").fill("nobody")
                page.locator("#id_password").fill("not the password")
                page.locator("main form button[type=submit]").click()
                expect(page.get_by_role("alert")).to_be_visible()
                refused = axe_violations(page, source)
                problems.append(describe("/accounts/login/ (refused)", refused))
            else:
                page.goto(f"{base}/accounts/login/")
                page.locator("#id_username").fill(role)
                page.locator("#id_password").fill(PERSONA_PASSWORD)
                with page.expect_navigation():
                    page.locator("main form button[type=submit]").click()
                for path, ready, *then in visits:
                    response = page.goto(f"{base}{path}")
                    assert response is not None, path
                    assert response.ok, f"{path}: {response.status}"
                    page.wait_for_load_state("load")
                    if ready:
                        expect(page.locator(ready).first).to_be_attached(timeout=60_000)
                    problems.append(describe(path, axe_violations(page, source)))
                    for step in then:
                        step(page)
                        after = f"{path} (after {step.__name__.strip('_').replace('_', ' ')})"
                        problems.append(describe(after, axe_violations(page, source)))
        finally:
            context.close()
    problems = [p for p in problems if p]
    assert not problems, (
        f"axe found serious or critical violations ({role}, {width} px, {language}):\n"
        + "\n".join(problems)
    )
