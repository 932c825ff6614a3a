"""An admin activates a guardian model version in Chromium, keyboard only, on a desktop and a
phone: from the policy versions to the guardian models, a version's held-out figures, the gate's
refusal with its flips, and an override recorded in the history (screenshots in
/tmp/h4_guardian_model_*.png)."""

import pytest
from playwright.sync_api import expect

from runs.guardian_models import guardian_model_version_active
from tests.test_browser import sign_in
from tests.test_browser_policy_admin import fits, tab_to
from tests.test_guardian_model_pages import good_active_bad_candidate, labelled  # noqa: F401

pytestmark = pytest.mark.browser


@pytest.mark.parametrize("width", [1280, 390])
def test_an_admin_overrides_the_gate_on_a_guardian_model_with_the_keyboard_only(
    live_server,
    page,
    admin,
    good_active_bad_candidate,  # noqa: F811
    width,
):
    good, bad = good_active_bad_candidate
    base = live_server.url
    sign_in(page, base, "admin")
    page.set_viewport_size({"width": width, "height": 844 if width < 600 else 800})

    tab_to(page, text="Guardian models")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Guardian model versions")).to_be_visible()
    expect(page.locator(".adapters-in-use")).to_contain_text(good.model_version)
    fits(page, width)
    page.screenshot(path=f"/tmp/h4_guardian_model_list_{width}.png", full_page=True)

    tab_to(page, text=f"version {bad.number}")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    expect(page.locator("table.guardian-model-figures")).to_contain_text("0.1200 → 0.0500")
    fits(page, width)

    assert tab_to(page, text=f"Activate version {bad.number}")["outline"] >= 2
    with page.expect_navigation():
        page.keyboard.press("Enter")
    expect(page.locator(".gate-refused")).to_contain_text("integrity: calibration worsens")
    # The report came in place of "Computing the gate…": the focus is on it, not on <body>.
    expect(page.locator("#gate-title")).to_be_focused()
    expect(page.locator("table.gate-flips tbody tr").first).to_contain_text(
        "fires: a person decides"
    )
    fits(page, width)
    page.screenshot(path=f"/tmp/h4_guardian_model_gate_{width}.png", full_page=True)

    tab_to(page, element_id="id_comment")
    page.keyboard.type("The vendor's new model, recalibrated")
    tab_to(page, element_id="id_override_reason")
    page.keyboard.type("The old verdicts predate the new tools")
    tab_to(page, text="Override the gate and activate")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    expect(page.locator(".messages .success")).to_contain_text("is active: runs on the local")
    expect(page.locator("table.activations")).to_contain_text(
        "refused, overridden: The old verdicts predate the new tools"
    )
    fits(page, width)
    page.screenshot(path=f"/tmp/h4_guardian_model_active_{width}.png", full_page=True)
    assert guardian_model_version_active(adapter="local") == bad


@pytest.mark.parametrize("width", [1280, 390])
def test_an_admin_evaluates_a_version_from_its_page_with_the_keyboard_only(
    live_server,
    page,
    admin,
    labelled,  # noqa: F811
    width,
):
    """From a version's page, "Evaluate as this version" opens the form on the labelled
    examples, scored by that version (named by what its map sits on): Enter twice gives the
    report, which takes the focus and says which examples it left out. It opened on "a trace
    file", so the first Evaluate came back with "Choose a trace file"."""
    from escalations.models import LabelledExample
    from tests.factories import make_guardian_model_version

    learnt = list(LabelledExample.objects.order_by("pk").values_list("pk", flat=True)[:2])
    version = make_guardian_model_version(example_ids=learnt)
    base = live_server.url
    sign_in(page, base, "admin")
    page.set_viewport_size({"width": width, "height": 844 if width < 600 else 800})
    page.goto(f"{base}/policies/models/{version.pk}/")

    assert tab_to(page, text="Evaluate as this version")["outline"] >= 2
    with page.expect_navigation():
        page.keyboard.press("Enter")
    expect(
        page.get_by_label("The labelled examples: reviewers' verdicts and imported traces")
    ).to_be_checked()
    expect(page.get_by_label("Rows without a probability")).to_contain_text(
        f"guardian model version {version.number} (a map over the Local (in process) guardian "
        "as it ships"
    )
    tab_to(page, text="Evaluate")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    report = page.get_by_role("heading", name="Report")
    expect(report).to_be_focused()
    expect(page.locator(".evaluate-left-out")).to_contain_text(
        f"Left out: 2 rows exported from the labelled examples guardian model version "
        f"{version.number} learnt from"
    )
    expect(page.locator(".problems")).to_have_count(0)
    fits(page, width)
    page.screenshot(path=f"/tmp/walk_evaluate_version_{width}.png", full_page=True)
