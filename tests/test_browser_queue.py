"""The reviewers' queue in headless Chromium: the keyboard, the live updates two reviewers see
of each other's work, focus kept across an update, a phone's width, and filters in the URL."""

from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from escalations.claims import escalation_claim
from escalations.models import Escalation, EscalationKind, EscalationStatus
from escalations.verdicts import escalation_resolve
from tests.runs_helpers import drive, start
from tests.test_browser import sign_in
from tests.test_escalation_queue_page import queued

pytestmark = pytest.mark.browser

LIVE = 3_000  # ms: "within 3 seconds, without a reload"


def focused_id(page: Page) -> str | None:
    return page.evaluate(
        "() => { const row = document.activeElement.closest('.queue-row');"
        " return row ? row.dataset.escalationId : null; }"
    )


def open_queue(page: Page, base_url: str, username: str) -> None:
    """Sign in (a reviewer lands on the queue) and wait until the page's keys are bound."""
    sign_in(page, base_url, username)
    expect(page.get_by_role("heading", name="Open escalations")).to_be_visible()
    # A deferred script has run by DOMContentLoaded. (wait_for_function would poll with an
    # eval inside the page, which the page's CSP refuses when the first check comes early.)
    page.wait_for_load_state("domcontentloaded")
    assert page.evaluate("window.guardianQueue") is True


def row(page: Page, escalation: Escalation):
    return page.locator(f'.queue-row[data-escalation-id="{escalation.pk}"]')


def three_in_order() -> list[Escalation]:
    now = timezone.now()
    return [queued(deadline=now + timedelta(minutes=20 + 10 * i)) for i in range(3)]


def test_j_and_k_move_between_rows_and_enter_opens_the_focused_one(live_server, page, reviewer):
    first, second, _ = three_in_order()
    problems = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on(
        "console",
        lambda message: (
            # The icon too: base.html names one, so no /favicon.ico guess ends in a 404.
            problems.append(f"{message.text} {message.location}")
            if message.type == "error"
            else None
        ),
    )
    open_queue(page, live_server.url, "reviewer")
    expect(page.locator(".queue-row")).to_have_count(3)

    page.keyboard.press("j")
    assert focused_id(page) == str(first.pk)
    page.keyboard.press("j")
    page.keyboard.press("j")
    page.keyboard.press("j")  # stays on the last row
    page.keyboard.press("k")
    assert focused_id(page) == str(second.pk)
    # The focus ring is drawn (an outline), not left to the browser's defaults.
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") == "solid"

    assert problems == [], "no script error and no CSP refusal on the queue"
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{live_server.url}/escalations/{second.pk}/")
    second.refresh_from_db()
    assert second.claimed_by == reviewer, "opening an item claims it"


def test_n_claims_the_most_urgent_unclaimed_item_and_opens_it(live_server, page, reviewer):
    first, *_ = three_in_order()
    open_queue(page, live_server.url, "reviewer")
    page.keyboard.press("n")
    expect(page).to_have_url(f"{live_server.url}/escalations/{first.pk}/")
    first.refresh_from_db()
    assert first.claimed_by == reviewer


def test_x_ticks_the_row_slash_goes_to_the_filters_and_question_mark_shows_the_keys(
    live_server, page, reviewer
):
    first, *_ = three_in_order()
    open_queue(page, live_server.url, "reviewer")
    page.keyboard.press("j")
    page.keyboard.press("x")
    expect(row(page, first).locator(".queue-pick")).to_be_checked()

    page.keyboard.press("?")
    dialog = page.get_by_role("dialog", name="Keyboard shortcuts")
    expect(dialog).to_be_visible()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()

    page.keyboard.press("/")
    assert page.evaluate("document.activeElement.id") == "filter-kind"

    # Typing in a field types: no key is taken for a shortcut.
    page.locator("#filter-tool").fill("")
    page.locator("#filter-tool").press_sequentially("jkxn/")
    expect(page.locator("#filter-tool")).to_have_value("jkxn/")
    expect(page).to_have_url(f"{live_server.url}/escalations/")


def test_a_claim_made_elsewhere_shows_on_another_reviewers_row_within_3s(
    live_server, page, reviewer, other_reviewer
):
    first, second, _ = three_in_order()
    open_queue(page, live_server.url, "reviewer")
    expect(row(page, first)).to_contain_text("Unclaimed")

    escalation_claim(escalation_id=first.pk, reviewer=other_reviewer)

    expect(row(page, first)).to_contain_text("Held by other_reviewer since", timeout=LIVE)
    expect(row(page, first)).to_have_class("queue-row held-other")
    expect(row(page, second)).to_contain_text("Unclaimed")


def test_a_decided_item_leaves_another_reviewers_list_within_3s(
    live_server, page, reviewer, other_reviewer
):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    open_queue(page, live_server.url, "reviewer")
    expect(row(page, escalation)).to_be_visible()

    escalation_resolve(escalation_id=escalation.pk, reviewer=other_reviewer, decision="approve")

    expect(row(page, escalation)).to_have_count(0, timeout=LIVE)
    # (scoped: the swap is also announced in #swap-status, in the same words)
    expect(page.locator("#queue-rows").get_by_text("Nothing waits for a reviewer.")).to_be_visible()


def test_two_reviewers_in_two_browsers_see_each_others_claims_and_new_items(
    live_server, browser, reviewer, other_reviewer
):
    first, second, _ = three_in_order()
    mine = browser.new_context()
    theirs = browser.new_context()
    try:
        mine_page, their_page = mine.new_page(), theirs.new_page()
        open_queue(mine_page, live_server.url, "reviewer")
        open_queue(their_page, live_server.url, "other_reviewer")
        expect(row(their_page, first)).to_contain_text("Unclaimed")

        # The first reviewer presses n in their own browser: the other sees it held.
        mine_page.keyboard.press("n")
        expect(mine_page).to_have_url(f"{live_server.url}/escalations/{first.pk}/")
        expect(row(their_page, first)).to_contain_text("Held by reviewer since", timeout=LIVE)

        # A new escalation appears in both lists without a reload.
        arrived = queued(deadline=timezone.now() + timedelta(minutes=5))
        expect(row(their_page, arrived)).to_be_visible(timeout=LIVE)
        mine_page.goto(f"{live_server.url}/escalations/")
        expect(row(mine_page, first)).to_contain_text("Held by you since")
    finally:
        mine.close()
        theirs.close()


def test_focus_scroll_and_ticks_survive_a_live_update(live_server, page, reviewer):
    page.set_viewport_size({"width": 1000, "height": 500})
    now = timezone.now()
    items = [queued(deadline=now + timedelta(minutes=30 + i)) for i in range(8)]
    open_queue(page, live_server.url, "reviewer")
    for _ in range(3):
        page.keyboard.press("j")
    page.keyboard.press("x")
    for _ in range(3):
        page.keyboard.press("j")
    page.keyboard.press("x")
    focused = items[5]
    assert focused_id(page) == str(focused.pk)
    assert page.evaluate("window.scrollY") > 0
    on_screen = row(page, focused).bounding_box()["y"]

    # A more urgent item arrives at the top of the list while the reviewer is at row 6.
    arrived = queued(deadline=now + timedelta(minutes=1))
    expect(row(page, arrived)).to_be_visible(timeout=LIVE)

    assert focused_id(page) == str(focused.pk)
    assert page.evaluate("document.activeElement.classList.contains('queue-row')")
    # The row being read stays where it was on screen, though a row arrived above it.
    assert abs(row(page, focused).bounding_box()["y"] - on_screen) <= 1
    expect(row(page, focused).locator(".queue-pick")).to_be_checked()
    expect(row(page, items[2]).locator(".queue-pick")).to_be_checked()
    page.keyboard.press("j")
    assert focused_id(page) == str(items[6].pk), "j goes on from where the reviewer was"


def test_the_queue_fits_a_390px_phone_without_sideways_scrolling(live_server, page, reviewer):
    page.set_viewport_size({"width": 390, "height": 844})
    queued(goal="Refund order ord_4472 " + "x" * 200, tool="issue_refund_with_a_long_name_" * 3)
    queued(
        kind=EscalationKind.UNCERTAIN, source="drift", value=0.55, t_star=0.5, delta=0.1, tool=""
    )
    open_queue(page, live_server.url, "reviewer")
    expect(page.locator(".queue-row")).to_have_count(2)
    widths = page.evaluate(
        "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert widths[0] <= widths[1], widths
    page.screenshot(path="/tmp/e1_queue_390.png", full_page=True)


def test_filters_put_their_state_in_the_url_and_back_restores_it(live_server, page, reviewer):
    gated = queued()
    drift = queued(kind=EscalationKind.UNCERTAIN, source="drift", t_star=0.5, delta=0.1)
    open_queue(page, live_server.url, "reviewer")
    page.set_viewport_size({"width": 1200, "height": 900})
    expect(page.locator(".queue-row")).to_have_count(2)
    page.screenshot(path="/tmp/e1_queue.png", full_page=True)

    page.select_option("#filter-kind", "uncertain")
    expect(page).to_have_url(f"{live_server.url}/escalations/?kind=uncertain")
    expect(page.locator(".queue-row")).to_have_count(1)
    expect(row(page, drift)).to_be_visible()

    page.select_option("#filter-sort", "oldest")
    expect(page).to_have_url(f"{live_server.url}/escalations/?kind=uncertain&sort=oldest")

    page.go_back()
    expect(page).to_have_url(f"{live_server.url}/escalations/?kind=uncertain")
    expect(page.locator("#filter-kind")).to_have_value("uncertain")
    expect(page.locator("#filter-sort")).to_have_value("urgent")
    expect(page.locator(".queue-row")).to_have_count(1)

    page.go_back()
    expect(page).to_have_url(f"{live_server.url}/escalations/")
    expect(page.locator("#filter-kind")).to_have_value("")
    expect(page.locator(".queue-row")).to_have_count(2)
    expect(row(page, gated)).to_be_visible()

    # The shared address opens the same view in a fresh page.
    page.goto(f"{live_server.url}/escalations/?kind=uncertain&sort=oldest")
    expect(page.locator("#filter-sort")).to_have_value("oldest")
    expect(page.locator(".queue-row")).to_have_count(1)


def test_a_count_filters_the_list_and_the_keys_still_work_after_it(live_server, page, reviewer):
    queued()
    drift = queued(kind=EscalationKind.UNCERTAIN, source="drift", t_star=0.5, delta=0.1)
    open_queue(page, live_server.url, "reviewer")
    page.get_by_role("link", name="Uncertain guardian answer 1").click()
    expect(page).to_have_url(f"{live_server.url}/escalations/?kind=uncertain")
    expect(page.locator("#filter-kind")).to_have_value("uncertain")
    expect(page.locator(".queue-row")).to_have_count(1)
    page.keyboard.press("j")
    assert focused_id(page) == str(drift.pk)
    assert Escalation.objects.filter(status=EscalationStatus.OPEN).count() == 2


def bulk_posts(page: Page) -> list[str]:
    """The bulk decisions the page sends, as they leave the browser."""
    sent: list[str] = []
    page.on(
        "request",
        lambda request: (
            sent.append(request.post_data or "")
            if request.method == "POST" and request.url.endswith("/escalations/bulk")
            else None
        ),
    )
    return sent


def test_bulk_approve_asks_first_and_only_an_accepted_question_decides(live_server, page, reviewer):
    first = drive(start("refund_waits_for_approval")).escalations.get()
    second = drive(start("refund_waits_for_approval")).escalations.get()
    sent = bulk_posts(page)
    open_queue(page, live_server.url, "reviewer")
    expect(page.locator("#queue-counts")).to_contain_text("All 2")
    decided_today = page.locator("#queue-stats div", has_text="Decided today").locator("dd")
    expect(decided_today).to_have_text("0")
    page.keyboard.press("j")
    page.keyboard.press("x")
    page.keyboard.press("j")
    page.keyboard.press("x")
    expect(page.locator("#bulk-selection")).to_have_text(
        "2 selected: Irreversible or regulated step holding issue_refund. "
        "Each gets its own verdict."
    )

    page.get_by_role("button", name="Approve selected").click()
    dialog = page.get_by_role("dialog", name="Approve 2 held issue_refund calls?")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("They will run.")
    yes = dialog.get_by_role("button", name="Approve 2")
    expect(yes).to_be_focused()
    page.screenshot(path="/tmp/h5_queue_bulk_confirm.png")
    # While it asks, the queue's keys are not taken: j moves no row behind the dialog.
    page.keyboard.press("j")
    expect(dialog).to_be_visible()

    # Dismissed (Escape): nothing is sent, nothing decided.
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    page.wait_for_timeout(300)
    assert sent == []
    expect(page.locator("#bulk-results")).to_be_empty()
    for escalation in (first, second):
        escalation.refresh_from_db()
        assert escalation.status == EscalationStatus.OPEN

    # Asked again and accepted from the keyboard: both are decided, each on its own.
    page.get_by_role("button", name="Approve selected").click()
    expect(yes).to_be_focused()
    page.keyboard.press("Enter")
    expect(dialog).to_be_hidden()

    report = page.locator("#bulk-results .bulk-report")
    expect(report.get_by_role("heading")).to_have_text("Approve selected: 2 approved")
    for escalation in (first, second):
        line = report.locator(f'li[data-escalation-id="{escalation.pk}"]')
        expect(line).to_contain_text(f"#{escalation.pk} approved")
        expect(line.get_by_role("link", name=f"#{escalation.pk}")).to_have_attribute(
            "href", f"/escalations/{escalation.pk}/"
        )
    assert len(sent) == 1
    assert "decision=approve" in sent[0]
    expect(page.locator(".queue-row")).to_have_count(0, timeout=LIVE)
    # The counts and the reviewer's own stats follow without a reload.
    expect(page.locator("#queue-counts")).to_contain_text("All 0")
    expect(decided_today).to_have_text("2")
    expect(page).to_have_url(f"{live_server.url}/escalations/")
    for escalation in (first, second):
        escalation.refresh_from_db()
        assert escalation.status == EscalationStatus.APPROVED


def test_without_the_queues_script_htmx_still_asks_before_a_bulk_decision(
    live_server, page, reviewer
):
    """hx-confirm alone, under the CSP with allowEval off: htmx's plain confirm() asks."""
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    page.route("**/static/js/queue.js", lambda route: route.abort())
    sent = bulk_posts(page)
    sign_in(page, live_server.url, "reviewer")
    row(page, escalation).locator(".queue-pick").check()
    asked: list[str] = []

    def dismiss(dialog):
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    page.get_by_role("button", name="Approve selected").click()
    page.wait_for_timeout(300)
    assert asked == ["Decide every ticked item? Approved calls will run."]
    assert sent == [], "a dismissed question sends nothing"

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Approve selected").click()
    expect(page.locator("#bulk-results")).to_contain_text(f"#{escalation.pk} approved")
    escalation.refresh_from_db()
    assert escalation.status == EscalationStatus.APPROVED


def test_mixed_kinds_are_named_before_sending_and_the_report_says_why(live_server, page, reviewer):
    gated = drive(start("refund_waits_for_approval")).escalations.get()
    other = drive(start("refund_waits_for_approval")).escalations.get()
    injected = drive(start("injected_instruction")).escalations.get()
    sent = bulk_posts(page)
    open_queue(page, live_server.url, "reviewer")
    page.set_viewport_size({"width": 1200, "height": 900})
    for escalation in (gated, other, injected):
        row(page, escalation).locator(".queue-pick").check()
    selection = page.locator("#bulk-selection")
    expect(selection).to_contain_text(
        f"#{injected.pk} (Injected instructions with no tool) cannot go with #{gated.pk} "
        "(Irreversible or regulated step holding issue_refund)"
    )
    expect(selection).to_contain_text("it would be left open")
    expect(selection).to_have_class("hint bulk-selection mixed")

    page.locator("#bulk-reason").fill("Not this week")
    page.get_by_role("button", name="Reject selected").click()
    dialog = page.get_by_role("dialog", name="Reject 2 held issue_refund calls?")
    expect(dialog).to_contain_text("They will not run")
    expect(dialog).to_contain_text("“Not this week”")
    expect(dialog.locator("#bulk-confirm-apart")).to_contain_text(
        f"#{injected.pk} (Injected instructions with no tool) cannot go with"
    )
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    page.wait_for_timeout(300)
    assert sent == [], "Cancel sends nothing"

    page.get_by_role("button", name="Reject selected").click()
    dialog.get_by_role("button", name="Reject 2").click()
    report = page.locator("#bulk-results .bulk-report")
    expect(report.get_by_role("heading")).to_have_text(
        "Reject selected: 2 rejected · 1 not decided"
    )
    refused = report.locator(f'li[data-escalation-id="{injected.pk}"]')
    expect(refused).to_contain_text(f"#{injected.pk} not decided")
    expect(refused).to_contain_text("is not like the first selected")
    expect(row(page, injected)).to_be_visible()
    expect(page.locator(".queue-row")).to_have_count(1, timeout=LIVE)
    # The hint follows what is still ticked once the decided items left.
    expect(selection).to_have_text(
        "1 selected: Injected instructions with no tool. Each gets its own verdict."
    )
    page.screenshot(path="/tmp/h5_queue_bulk_results.png", full_page=True)
    injected.refresh_from_db()
    assert injected.status == EscalationStatus.OPEN
    for escalation in (gated, other):
        escalation.refresh_from_db()
        assert escalation.status == EscalationStatus.REJECTED


def test_nothing_left_to_claim_is_a_styled_notice_over_a_deliberate_empty_queue(
    live_server, page, reviewer
):
    open_queue(page, live_server.url, "reviewer")
    page.set_viewport_size({"width": 1200, "height": 800})
    page.keyboard.press("n")
    notice = page.locator("main > ul.messages > li.info")
    expect(notice).to_have_text("Nothing left to claim: nothing waits for a reviewer.")
    # Drawn like the other notices: a card with a coloured edge, not bare text.
    style = notice.evaluate(
        "e => { const s = getComputedStyle(e);"
        " return [s.borderLeftWidth, s.borderLeftStyle, s.backgroundColor, s.listStyleType]; }"
    )
    assert style == ["4px", "solid", "rgb(255, 255, 255)", "none"], style
    empty = page.locator(".queue-empty.all-clear")
    expect(empty.get_by_text("Nothing waits for a reviewer.", exact=True)).to_be_visible()
    assert empty.evaluate("e => getComputedStyle(e).borderStyle") == "dashed"
    page.screenshot(path="/tmp/h5_queue_empty.png", full_page=True)


def test_the_examples_page_styles_its_links_and_its_filter_button(live_server, page, reviewer):
    open_queue(page, live_server.url, "reviewer")
    page.get_by_role("link", name="Your labelled examples and their export").click()
    expect(page.get_by_role("heading", name="Labelled examples")).to_be_visible()
    accent = "rgb(47, 93, 155)"
    button = page.get_by_role("button", name="Filter")
    assert button.evaluate("e => getComputedStyle(e).backgroundColor") == accent
    assert button.evaluate("e => getComputedStyle(e).color") == "rgb(255, 255, 255)"
    for name in ("Clear", "Download as JSON Lines"):
        link = page.get_by_role("link", name=name)
        assert link.evaluate("e => getComputedStyle(e).color") == accent, name
    page.screenshot(path="/tmp/h5_examples.png", full_page=True)


def test_a_letter_typed_as_the_next_item_loads_does_not_act_on_it(live_server, page, reviewer):
    from escalations.models import EscalationEvent, EscalationEventKind

    item = queued()
    open_queue(page, live_server.url, "reviewer")
    with page.expect_navigation():
        page.keyboard.press("n")
    # The reviewer's next letter, typed before they could see the item: s would skip it.
    page.keyboard.press("s")
    page.wait_for_timeout(300)
    assert page.url.endswith(f"/escalations/{item.pk}/")
    assert not EscalationEvent.objects.filter(kind=EscalationEventKind.SKIPPED).exists()
    # Once the item has settled, the keys are the reviewer's again.
    page.wait_for_timeout(800)
    page.keyboard.press("?")
    expect(page.locator("#shortcuts")).to_be_visible()
