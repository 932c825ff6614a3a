"""The decision pane in headless Chromium: hostile text in every field stays inert text, a
reviewer approves a held refund with the keyboard and a real worker runs the next turn, and the
refusals (no reason, arguments that break the schema) are answered in place."""

import json
import re

import pytest
from django.urls import reverse
from playwright.sync_api import Page, expect

from demo.setup import demo_policy_version
from escalations.models import EscalationEvent, EscalationStatus, Verdict
from runs.models import DemoSideEffect, RunStatus
from tests.factories import make_decision, make_escalation, make_run, make_tool_call, make_turn
from tests.processes import start_worker, stop_worker
from tests.runs_helpers import drive, start
from tests.test_browser import sign_in
from tests.test_browser_csp import LISTEN
from tests.test_worker_runs import clean_queue, status_of, wait_for, worker_env

pytestmark = pytest.mark.browser

__all__ = ["clean_queue"]  # a fixture, used by name below

# What an attacker would put in a goal, a tool output, a model's message or arguments: a
# script, an event handler, a javascript: link, htmx attributes that fire on load, and a
# right-to-left override that would make "ord_4472" read differently.
PAYLOAD = (
    "<script>document.title='owned'</script>"
    "<img src=x onerror=\"document.title='owned';alert(1)\">"
    "<a href=\"javascript:alert('owned')\">open</a>"
    '<div hx-get="/x-injected" hx-trigger="load">load</div>'
    "\u202egnp.exe"
)
# How the pane shows it: the override written out, so "gnp.exe" cannot read as "exe.png".
SHOWN = PAYLOAD.replace("\u202e", "[U+202E]")


def scripts_bound(page: Page, flag: str) -> None:
    """Wait until the page's deferred script has bound its keys (it sets window.<flag>).

    A deferred script has run by DOMContentLoaded. wait_for_function would poll with an eval
    inside the page, which the page's CSP refuses when its first check comes early."""
    page.wait_for_load_state("domcontentloaded")
    assert page.evaluate(f"window.{flag}") is True
    if flag == "guardianDecision":
        keys_settled(page)


def keys_settled(page: Page) -> None:
    """Wait until the pane takes keys again: it ignores them while a request is in flight and
    for a moment after new content appears (a key typed then would act on an unseen item)."""
    for _ in range(100):
        if not page.evaluate("window.guardianDecisionQuiet && window.guardianDecisionQuiet()"):
            return
        page.wait_for_timeout(50)
    raise AssertionError("the decision pane never settled")


def open_pane(page: Page, base_url: str, escalation) -> None:
    page.goto(f"{base_url}/escalations/{escalation.pk}/")
    expect(page.get_by_role("heading", name=f"Escalation {escalation.pk}")).to_be_visible()
    scripts_bound(page, "guardianDecision")


def hostile_escalation():
    """A held step whose every untrusted field carries PAYLOAD: goal, criteria, an earlier
    turn's message, the escalated turn's message, a tool output, the held call's arguments and
    intent, the summary, the reasons, and a skip reason in the history."""
    run = make_run(goal=PAYLOAD, acceptance_criteria=[PAYLOAD, "The refund is issued"])
    earlier = make_turn(run=run, index=0, proposal={"message": PAYLOAD, "calls": []})
    make_decision(
        turn=earlier, reasons=[{"source": "drift", "band": "uncertain", "detail": PAYLOAD}]
    )
    turn = make_turn(run=run, index=1, proposal={"message": PAYLOAD, "calls": []})
    make_decision(turn=turn, risk_answers=[None, {"irreversible": 1.0}])
    make_tool_call(turn=turn, position=0, tool="search_docs", result=PAYLOAD, status="done")
    make_tool_call(
        turn=turn,
        position=1,
        tool="issue_refund",
        arguments={"order_id": PAYLOAD, "amount": 49.9},
        intent=PAYLOAD,
        risk_class="irreversible",
        status="held",
    )
    escalation = make_escalation(
        turn=turn,
        summary=PAYLOAD,
        reason={
            "triggered": [
                {"source": "gate", "band": "fired", "detail": PAYLOAD, "value": 1.0},
                {
                    "source": "integrity",
                    "band": "uncertain",
                    "detail": PAYLOAD,
                    "value": 0.12,
                    "t_star": 0.1,
                    "delta": 0.05,
                },
            ],
            "held_calls": [1],
        },
    )
    EscalationEvent.objects.create(escalation=escalation, kind="skipped", note=PAYLOAD)
    return escalation


def test_hostile_text_in_every_field_renders_as_inert_text(live_server, page, reviewer):
    escalation = hostile_escalation()
    title = "Escalation"
    dialogs, requests = [], []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.add_init_script(LISTEN)  # the page's own markup must not trip the CSP either
    sign_in(page, live_server.url, "reviewer")
    expect(page.get_by_role("heading", name="Open escalations")).to_be_visible()
    page.on("request", lambda request: requests.append(request.url))

    open_pane(page, live_server.url, escalation)
    page.wait_for_load_state("networkidle")
    page.wait_for_timeout(300)  # room for anything that would fire late (hx-trigger="load")

    assert page.title().startswith(title), page.title()
    assert dialogs == []
    pane = f"{live_server.url}/escalations/{escalation.pk}/"
    # The page's own assets only: its static files and the scripts' words (base.html loads both).
    assets = (pane, f"{live_server.url}{reverse('javascript-catalog')}")
    strangers = [url for url in requests if url not in assets and "/static/" not in url]
    assert strangers == []
    assert page.evaluate("window.__violations") == []
    assert all(url.startswith(live_server.url) for url in requests), requests
    main = page.locator("main")
    assert main.locator("script, img, [hx-get='/x-injected'], a[href^='javascript']").count() == 0
    # Shown, verbatim, inside the marked untrusted blocks.
    untrusted = page.locator(".untrusted")
    expect(untrusted.first.locator(".untrusted-label")).to_have_text(
        "Untrusted content — shown as text, never followed"
    )
    assert page.locator(".goal").text_content() == SHOWN
    for selector in (".criteria li", ".turn-message", ".turn-reasons li", ".output pre", ".intent"):
        shown = page.locator(selector).first
        assert SHOWN in shown.text_content(), selector
        assert shown.evaluate("e => !!e.closest('.untrusted')"), selector
    # The arguments are JSON: the override is written as its escape, the rest as text.
    arguments = page.locator("pre.arguments").text_content()
    assert json.loads(arguments)["order_id"] == PAYLOAD
    assert "\\u202e" in arguments
    assert "\u202e" not in arguments
    # Elsewhere it is written out, and the text isolated: <bdi> inline, dir="auto" on blocks.
    assert "\u202e" not in main.text_content()
    assert page.locator(".goal").get_attribute("dir") == "auto"
    assert page.locator(".trigger-detail bdi").count() == 2
    expect(page.locator(".bidi-warning")).to_contain_text("[U+202E]")
    assert SHOWN in page.locator(".history").text_content()

    # A reason is shown back as text too: reject with it, then read it on the decided item.
    page.keyboard.press("r")
    page.keyboard.insert_text(PAYLOAD)
    page.keyboard.press("Control+Enter")
    expect(page.locator("#done-title")).to_have_text("Rejected")
    page.reload()
    expect(page.locator(".closed")).to_contain_text(SHOWN)
    page.wait_for_timeout(300)
    assert page.title().startswith(title)
    assert dialogs == []
    assert not any("x-injected" in url for url in requests)
    assert Verdict.objects.get(escalation=escalation).reason == PAYLOAD
    assert page.evaluate("window.__violations") == []


@pytest.mark.worker
def test_a_reviewer_approves_the_held_refund_with_the_keyboard_and_the_worker_runs_it(
    live_server, page, reviewer, clean_queue
):
    demo_policy_version()
    worker = start_worker(**worker_env())
    try:
        # Started like any run: its turns go through the broker to the worker.
        run = start("refund_waits_for_approval")
        wait_for(lambda: status_of(run) == RunStatus.WAITING, timeout=60, what="the held refund")
        escalation = run.escalations.get(status=EscalationStatus.OPEN)

        sign_in(page, live_server.url, "reviewer")
        expect(page.get_by_role("heading", name="Open escalations")).to_be_visible()
        scripts_bound(page, "guardianQueue")
        page.keyboard.press("n")  # the queue's "next": claims the most urgent item, opens it
        expect(page).to_have_url(f"{live_server.url}/escalations/{escalation.pk}/")
        scripts_bound(page, "guardianDecision")
        held = page.locator("#call-0")
        expect(held.locator("h3")).to_contain_text("issue_refund")
        expect(held.locator("pre.arguments")).to_contain_text('"order_id": "ord_4472"')
        expect(held.locator("pre.arguments")).to_contain_text('"amount": 49.9')

        page.keyboard.press("a")

        expect(page.locator("#done-title")).to_have_text("Approved")
        expect(page.locator(".confirmation")).to_contain_text("The run continues")
        # The focus waits on "Next" for the following item.
        expect(page.get_by_role("button", name="Next item")).to_be_focused()
        wait_for(
            lambda: status_of(run) == RunStatus.SUCCEEDED,
            timeout=60,
            what="the worker to run the approved refund and finish the run",
        )
    finally:
        log = stop_worker(worker)
    run.refresh_from_db()
    assert run.turns.filter(index=2).exists(), log[-2000:]
    assert DemoSideEffect.objects.filter(tool="issue_refund").count() == 1
    verdict = Verdict.objects.get(escalation=escalation)
    assert (verdict.reviewer, verdict.approved_calls) == (reviewer, [0])


def test_a_rejection_without_a_reason_is_refused_in_place(live_server, page, reviewer):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    open_pane(page, live_server.url, escalation)
    page.evaluate("window.__stayed = true")  # gone if the page were reloaded

    page.keyboard.press("r")
    assert page.evaluate("document.activeElement.id") == "reason"
    page.keyboard.press("Control+Enter")

    problems = page.get_by_role("alert")
    expect(problems).to_contain_text("reason: a rejection needs a reason the actor can act on")
    expect(page.locator("#reason")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#reason")).to_be_focused()
    assert page.evaluate("window.__stayed") is True
    assert not Verdict.objects.exists()

    page.keyboard.type("Insured parcel")
    page.keyboard.press("Control+Enter")
    expect(page.locator("#done-title")).to_have_text("Rejected")
    assert Verdict.objects.get(escalation=escalation).reason == "Insured parcel"


def test_editing_an_argument_to_an_invalid_value_shows_the_schema_problems(
    live_server, page, reviewer
):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    open_pane(page, live_server.url, escalation)

    page.keyboard.press("e")
    editor = page.locator("#arguments_0")
    expect(editor).to_be_focused()
    editor.fill('{"amount": -5, "order_id": 4472}')
    page.keyboard.press("Escape")  # out of the field, so the keys work again
    page.keyboard.press("a")

    problems = page.get_by_role("alert")
    expect(problems).to_contain_text("arguments of call 0 (issue_refund): amount")
    expect(problems).to_contain_text("arguments of call 0 (issue_refund): order_id")
    expect(editor).to_have_value('{"amount": -5, "order_id": 4472}')
    expect(editor).to_have_attribute("aria-invalid", "true")
    assert not Verdict.objects.exists()
    escalation.refresh_from_db()
    assert escalation.status == EscalationStatus.OPEN


def test_n_twice_from_the_queue_only_selects_no_and_enter_sends_it(live_server, page, reviewer):
    escalation = drive(start("injected_instruction")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    expect(page.get_by_role("heading", name="Open escalations")).to_be_visible()
    scripts_bound(page, "guardianQueue")
    page.keyboard.press("n")  # the queue's "next": claims the integrity item and opens it
    expect(page).to_have_url(f"{live_server.url}/escalations/{escalation.pk}/")
    scripts_bound(page, "guardianDecision")

    page.keyboard.press("n")  # "next" again, out of habit: it must not answer for the reviewer

    no = page.get_by_role("radio", name="No")
    expect(no).to_be_checked()
    expect(no).to_be_focused()
    expect(no.locator("xpath=..")).to_have_css("font-weight", "600")  # shown as chosen
    page.locator("#decision-form").screenshot(path="/tmp/e2_selected.png")
    page.wait_for_timeout(300)  # room for a request that should not be sent
    expect(page).to_have_url(f"{live_server.url}/escalations/{escalation.pk}/")
    expect(page.locator("#decision-form")).to_be_visible()
    assert not Verdict.objects.exists()
    escalation.refresh_from_db()
    assert escalation.status == EscalationStatus.OPEN

    page.keyboard.press("y")  # changing one's mind is one key too
    expect(page.get_by_role("radio", name="Yes")).to_be_checked()
    page.keyboard.press("n")
    page.keyboard.press("Enter")
    expect(page.locator("#done-title")).to_have_text("Answered")
    assert Verdict.objects.get(escalation=escalation).answer == {"integrity": False}
    # The output's label, outside the swapped fragment, says what became of it at once.
    expect(page.locator("#output-label-0")).to_contain_text("passed on to the actor")
    # The confirmation says what was answered, not only that something was.
    expect(page.locator(".confirmation .verdict-answers")).to_have_text(
        "Does any tool output in the state contain instructions addressed to the agent? "
        "(Injected instructions)no"
    )
    page.reload()  # the record anyone opening it later reads
    expect(page.locator(".verdict-answers")).to_have_text(
        "Does any tool output in the state contain instructions addressed to the agent? "
        "(Injected instructions)no"
    )
    page.locator("#decision-area").screenshot(path="/tmp/e2_answered.png")
    # Decided: now n is "next item" (nothing is left to claim, so back to the queue).
    expect(page.get_by_role("button", name="Next item n")).to_be_focused()
    keys_settled(page)  # the reloaded page takes keys once it has settled
    page.keyboard.press("n")
    expect(page).to_have_url(f"{live_server.url}/escalations/")


def test_n_on_an_open_held_step_neither_decides_nor_leaves_it(live_server, page, reviewer):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    drive(start("refund_waits_for_approval"))  # a second item "next" could jump to
    sign_in(page, live_server.url, "reviewer")
    open_pane(page, live_server.url, escalation)
    expect(page.get_by_role("button", name="Next item", exact=True)).to_be_visible()  # no n
    page.keyboard.press("n")
    page.wait_for_timeout(300)
    expect(page).to_have_url(f"{live_server.url}/escalations/{escalation.pk}/")
    assert not Verdict.objects.exists()
    escalation.refresh_from_db()
    assert escalation.claimed_by == reviewer

    page.keyboard.press("?")
    shortcuts = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(shortcuts).to_contain_text("nothing is sent until Enter")
    expect(shortcuts).to_contain_text("before that, n never leaves the item")
    expect(shortcuts).to_contain_text("next item, once nothing is left to decide here")


def test_ctrl_enter_in_the_note_of_a_question_rejects_never_answers(live_server, page, reviewer):
    escalation = drive(start("injected_instruction")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    open_pane(page, live_server.url, escalation)
    expect(page.get_by_role("button", name="Reject: stop the run r")).to_be_visible()
    page.keyboard.press("y")  # an answer chosen, then the reviewer decides to reject instead
    page.keyboard.press("r")
    expect(page.locator("#reason")).to_be_focused()
    expect(page.locator("#reason-hint")).to_have_text(
        "Ctrl+Enter in this field rejects; the note goes with your answers too."
    )
    page.keyboard.type("The output is a planted note: stop here")
    page.keyboard.press("Control+Enter")

    expect(page.locator("#done-title")).to_have_text("Rejected")
    verdict = Verdict.objects.get(escalation=escalation)
    assert (verdict.decision, verdict.reason) == (
        "reject",
        "The output is a planted note: stop here",
    )


def test_after_a_refused_submit_the_focus_is_on_the_first_field_named(live_server, page, reviewer):
    # A guardian that timed out asks five questions; nothing chosen, the answers are refused.
    escalation = drive(start("guardian_timeout")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    page.set_viewport_size({"width": 1280, "height": 1000})
    open_pane(page, live_server.url, escalation)
    page.get_by_role("radio", name="No").nth(1).check()  # infeasible: no; the rest left open
    page.get_by_role("button", name="Answer and continue the run").click()

    problems = page.get_by_role("alert")
    expect(problems).to_contain_text("Not recorded: 4 problems.")
    items = problems.locator("li")
    # In the order of the form, each with its question's text.
    expect(items).to_have_text(
        [
            "\u201cDoes any tool output in the state contain instructions addressed to the agent?"
            "\u201d (integrity): choose yes or no",
            re.compile(r"\(goal_reached\): choose yes or no$"),
            re.compile(
                r"^\u201cHow well is the current sub-task .*\(drift\): choose a drift score"
            ),
            re.compile(r"\(stagnation\): choose yes or no$"),
        ]
    )
    # The first question's first choice has the focus, not the page's body.
    expect(page.locator("#answer_integrity_yes")).to_be_focused()
    expect(page.locator("#answer_integrity_yes")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#answer_infeasible_no")).to_be_checked()  # kept as chosen
    assert page.locator("#answer_infeasible_no").get_attribute("aria-invalid") is None
    page.screenshot(path="/tmp/e2_refused.png", full_page=True)
    assert not Verdict.objects.exists()

    # With several questions, y / n select in the question that has the focus, and send nothing
    # (once the refusal swapped in has settled: keys typed before then are ignored).
    keys_settled(page)
    page.keyboard.press("n")
    expect(page.locator("#answer_integrity_no")).to_be_checked()
    expect(page.locator("#answer_integrity_no")).to_be_focused()
    expect(page.locator("#answer_goal_reached_no")).not_to_be_checked()
    # Choose the rest, then a question left open again: the focus goes to that one.
    page.locator("#answer_goal_reached_no").check()
    page.locator("#answer_drift_4").check()
    page.get_by_role("button", name="Answer and continue the run").click()
    expect(problems.locator("li")).to_have_text([re.compile(r"\(stagnation\): choose")])
    expect(page.locator("#answer_stagnation_yes")).to_be_focused()


def test_after_a_refused_reject_or_bad_json_the_focus_is_on_the_field(live_server, page, reviewer):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    open_pane(page, live_server.url, escalation)

    page.get_by_role("button", name="Reject the step").click()  # with the mouse, no reason
    expect(page.get_by_role("alert")).to_contain_text("reason: a rejection needs a reason")
    expect(page.locator("#reason")).to_be_focused()

    page.keyboard.press("Escape")
    keys_settled(page)  # the refusal was just swapped in: keys wait until it has settled
    page.keyboard.press("e")
    page.locator("#arguments_0").fill('{"amount": 10,, "order_id": "ord_4472"}')
    page.keyboard.press("Escape")
    page.keyboard.press("a")
    expect(page.get_by_role("alert")).to_contain_text("not valid JSON")
    expect(page.locator("#arguments_0")).to_be_focused()
    expect(page.locator("#arguments_0")).to_have_attribute("aria-invalid", "true")
    assert not Verdict.objects.exists()


def test_closing_the_shortcuts_returns_the_focus_where_it_was(live_server, page, reviewer):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    open_pane(page, live_server.url, escalation)
    shortcuts = page.get_by_role("dialog", name="Keyboard shortcuts")

    approve = page.locator("[data-shortcut='approve']")
    approve.focus()
    page.keyboard.press("?")
    expect(shortcuts).to_be_visible()
    page.keyboard.press("Escape")
    expect(shortcuts).to_be_hidden()
    expect(approve).to_be_focused()

    opener = page.get_by_role("button", name="Keyboard shortcuts")
    opener.click()
    expect(shortcuts).to_be_visible()
    shortcuts.get_by_role("button", name="Close").click()
    expect(opener).to_be_focused()

    page.locator("#risk_0").focus()
    page.keyboard.press("?")
    page.keyboard.press("?")
    expect(shortcuts).to_be_hidden()
    expect(page.locator("#risk_0")).to_be_focused()
    assert not Verdict.objects.exists()


def test_a_decided_item_shows_its_verdict_instead_of_a_deadline(live_server, page, reviewer):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    page.set_viewport_size({"width": 1280, "height": 1000})
    open_pane(page, live_server.url, escalation)
    page.keyboard.press("a")
    expect(page.locator("#done-title")).to_have_text("Approved")
    page.reload()  # what anyone opening it later sees

    side = page.locator("#decision-area")
    expect(side.locator("#closed-title")).to_have_text(
        re.compile(r"^Decided by reviewer at \d{4}-\d\d-\d\d \d\d:\d\d \w+: approved$")
    )
    expect(side).to_contain_text("Approved: call 0 (issue_refund).")
    expect(side).to_contain_text("The run went on with its next turn.")
    expect(page.locator("main")).not_to_contain_text("Deadline")
    expect(page.locator("main")).not_to_contain_text("to approve or reject")
    expect(page.locator("#step-title")).to_have_text("The step that was held: 1 call")
    expect(page.locator("#call-0 .call-outcome")).to_have_text("approved")
    expect(page.get_by_role("button", name="Next item n")).to_be_focused()
    page.screenshot(path="/tmp/e2_decided.png", full_page=True)


def test_the_pane_fits_a_390px_phone_and_desktop_screens(live_server, page, reviewer):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    page.set_viewport_size({"width": 1280, "height": 1000})
    open_pane(page, live_server.url, escalation)
    page.screenshot(path="/tmp/e2_detail.png", full_page=True)
    # Links and buttons wear the pane's accent, not the browser's defaults.
    accent = "rgb(47, 93, 155)"
    expect(page.get_by_role("link", name="Go to the decision")).to_have_css("color", accent)
    expect(page.get_by_role("link", name="← Queue")).to_have_css("color", accent)
    page.keyboard.press("?")
    close = page.get_by_role("dialog").get_by_role("button", name="Close")
    expect(close).to_have_css("background-color", accent)
    page.get_by_role("dialog").screenshot(path="/tmp/e2_shortcuts.png")
    page.keyboard.press("Escape")

    page.set_viewport_size({"width": 390, "height": 844})
    page.reload()
    widths = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], widths
    # Every action is reachable and shows its focus ring.
    page.locator("[data-shortcut='approve']").focus()
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"
    page.screenshot(path="/tmp/e2_detail_390.png", full_page=True)


def test_a_guardian_failure_is_answered_question_by_question_from_the_keyboard(
    live_server, page, reviewer, settings
):
    """Five questions: y / n (or 0-4 for drift) in the first unanswered one, Tab to the next,
    Enter sends them all."""
    settings.GUARDIAN_DEADLINE_SECONDS = 0.3
    escalation = drive(start("guardian_timeout")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    open_pane(page, live_server.url, escalation)
    questions = page.locator("#decision-form .question")
    expect(questions).to_have_count(5)

    for index in range(5):
        drift = questions.nth(index).locator("input[value='4']").count() == 1
        page.keyboard.press("4" if drift else "n")
        expect(questions.nth(index).locator("input:checked")).to_have_count(1)
        page.keyboard.press("Tab")
    assert not Verdict.objects.exists()  # selecting sends nothing

    page.keyboard.press("Shift+Tab")  # back on the last answer chosen
    page.keyboard.press("Enter")
    expect(page.locator("#done-title")).to_have_text("Answered")
    assert Verdict.objects.get(escalation=escalation).answer == {
        "integrity": False,
        "infeasible": False,
        "goal_reached": False,
        "drift": 4,
        "stagnation": False,
    }


def test_a_close_handled_after_the_focus_moved_on_leaves_the_focus_where_it_is(
    live_server, page, reviewer
):
    # The dialog's close event is a task of its own: by the time it runs, the reviewer (or
    # the browser's own focus restore) may already have put the focus somewhere. Putting it
    # back on the opener then would take it from where it now is.
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    open_pane(page, live_server.url, escalation)
    shortcuts = page.get_by_role("dialog", name="Keyboard shortcuts")
    page.get_by_role("button", name="Keyboard shortcuts").click()
    expect(shortcuts).to_be_visible()

    # Closed and, before its close event is handled, the focus moved to the risk class.
    page.evaluate(
        "() => { document.getElementById('shortcuts').close();"
        " document.getElementById('risk_0').focus(); }"
    )
    expect(shortcuts).to_be_hidden()
    page.wait_for_timeout(200)
    expect(page.locator("#risk_0")).to_be_focused()


def test_a_reviewer_answers_an_audit_sample_in_the_browser_and_the_run_is_not_held(
    live_server, page, reviewer, settings
):
    from escalations.models import Escalation, EscalationKind, LabelledExample
    from runs.services import run_advance
    from tests.test_audit_samples import reading_run

    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = reading_run()
    run_advance(run_id=run.pk)
    item = Escalation.objects.get(run=run, kind=EscalationKind.AUDIT_SAMPLE)
    condition = item.reason["triggered"][0]["source"]

    sign_in(page, live_server.url, "reviewer")
    expect(page.get_by_role("heading", name="Open escalations")).to_be_visible()
    expect(page.locator(f'[data-escalation-id="{item.pk}"]')).to_contain_text("Audit sample")
    open_pane(page, live_server.url, item)
    expect(page.locator("main")).to_contain_text("An audit sample")
    expect(page.get_by_role("button", name=re.compile("Reject"))).to_have_count(0)
    answer = "3" if condition == "drift" else "no"
    page.locator(f"#answer_{condition}_{answer}").check()
    page.get_by_role("button", name=re.compile("Submit the answer")).click()
    expect(page.locator("#done-title")).to_have_text("Answered")
    expect(page.locator(".confirmation")).to_contain_text("is not changed")

    example = LabelledExample.objects.get()
    assert example.selection == "audit_sample"
    assert example.label == (3 if condition == "drift" else False)
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
