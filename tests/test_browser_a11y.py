"""What axe cannot see (issue 28), in Chromium: charts carry their figures, colour is never the
only signal, focus is visible and in reading order, every htmx swap is announced and keeps the
focus where the person was, and the keyboard shortcuts never fire in a text field and obey a
person's off switch (WCAG 2.1.4). tests/test_browser_axe.py runs the machine's rules."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import Page, expect

from escalations.models import EscalationKind
from runs.models import Run
from tests.factories import make_decision, make_escalation, make_turn
from tests.runs_helpers import drive, start
from tests.test_browser import sign_in
from tests.test_browser_decision import keys_settled, open_pane
from tests.test_browser_queue import focused_id, open_queue, row
from tests.test_evaluation_page import active_version  # noqa: F401 (a fixture)
from tests.test_run_page import run_with_turns

pytestmark = pytest.mark.browser

# ---- Charts ----------------------------------------------------------------------------------

CHARTS = """() => [...document.querySelectorAll('svg')].map(svg => {
    const ids = (name) => (svg.getAttribute(name) || '').split(/\\s+/).filter(Boolean);
    const text = (list) => list.map(id => document.getElementById(id)?.textContent || '')
                               .join(' ').trim();
    return {
        cls: svg.getAttribute('class') || '',
        runChart: !!svg.closest('figure.run-chart'),
        role: svg.getAttribute('role'),
        name: (svg.getAttribute('aria-label') || text(ids('aria-labelledby'))).trim(),
        desc: text(ids('aria-describedby')),
        descInside: ids('aria-describedby').every(id => svg.querySelector('desc#' + id)),
        points: [...svg.querySelectorAll('circle title, rect title')].map(t => t.textContent),
    };
})"""


def charts(page: Page) -> list[dict]:
    return page.evaluate(CHARTS)


def test_every_chart_is_an_image_named_and_described_with_its_figures(live_server, page, auditor):
    run = drive(start("refund_waits_for_approval"))
    sign_in(page, live_server.url, "auditor")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    found = charts(page)
    [run_chart] = [c for c in found if c["runChart"]]
    assert run_chart["role"] == "img"
    assert run_chart["name"]
    assert run_chart["desc"], "the run chart has no description"
    assert run_chart["points"]
    assert run_chart["descInside"], "the description is the chart's own <desc>"
    # Every plotted point's figure is in the words a screen reader hears.
    for title in run_chart["points"]:
        if re.search(r"turn \d+", title):
            said = title.split(", ", 1)[1]
            assert said in run_chart["desc"], (said, run_chart["desc"])
    assert re.search(r"\d\.\d", run_chart["desc"])
    # The other pictures (probability bars) are images whose name carries their figures.
    for other in found:
        assert other["role"] == "img", other
        assert re.search(r"\d", other["name"]), other


def test_the_reliability_and_monitoring_charts_say_their_figures(
    live_server,
    page,
    admin,
    active_version,  # noqa: F811
):
    from tests.test_browser_evaluation_page import TRACES

    sign_in(page, live_server.url, "admin")
    page.goto(f"{live_server.url}/policies/monitoring/")
    monitoring = [c for c in charts(page) if "monitoring-chart" in c["cls"]]
    page.goto(f"{live_server.url}/policies/evaluate/")
    page.get_by_label("Trace file", exact=True).set_input_files(
        {"name": "traces.jsonl", "mimeType": "application/x-ndjson", "buffer": TRACES.encode()}
    )
    page.get_by_label("Bins", exact=True).fill("5")
    with page.expect_navigation():
        page.get_by_role("button", name="Evaluate").click()
    expect(page.get_by_role("heading", name="Report")).to_be_visible()
    reliability = [c for c in charts(page) if "reliability-svg" in c["cls"]]
    assert monitoring, "the monitoring page draws its charts"
    assert reliability, "the report draws a reliability diagram"
    for chart in monitoring + reliability:
        assert chart["role"] == "img", chart
        assert chart["name"], chart
        assert chart["descInside"], chart
        if chart["points"]:  # a day with no turn draws nothing, and says nothing
            assert re.search(r"\d", chart["desc"]), chart
        for title in chart["points"]:
            if "reliability-svg" in chart["cls"] and "predicted" not in title:
                continue  # the row count strip: the dots' titles say the same rows
            assert title in chart["desc"], (title, chart["desc"])


# ---- Colour is never the only signal ---------------------------------------------------------


def test_a_fired_band_is_said_in_words_next_to_its_colour(live_server, page, reviewer):
    triggered = [
        {"source": "integrity", "band": "fired", "value": 0.91, "t_star": 0.1, "delta": 0.05},
        {"source": "drift", "band": "uncertain", "value": 0.5, "t_star": 0.5, "delta": 0.1},
    ]
    escalation = make_escalation(kind=EscalationKind.UNCERTAIN, reason={"triggered": triggered})
    open_queue(page, live_server.url, "reviewer")
    bars = row(page, escalation).locator(".pbar")
    expect(bars).to_have_count(2)
    fired = row(page, escalation).locator(".pbar.band-fired")
    uncertain = row(page, escalation).locator(".pbar.band-uncertain")
    # The red marker is not alone: the band is a visible word beside it.
    expect(fired.locator(".pbar-band-word")).to_be_visible()
    expect(fired.locator(".pbar-band-word")).to_have_text("fired")
    expect(uncertain.locator(".pbar-band-word")).to_have_text("in the uncertain band")


# ---- Focus visible and in reading order ------------------------------------------------------

FOCUS = """() => {
    const e = document.activeElement;
    const luminance = (rgb) => {
        const c = rgb.match(/[\\d.]+/g).slice(0, 3).map(Number).map(v => v / 255)
            .map(v => v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4);
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2];
    };
    const opaque = (c) => {
        const a = c.match(/[\\d.]+/g);
        return a && (a.length < 4 || +a[3] > 0.5);
    };
    let shown = e;
    // A visually hidden radio or checkbox shows its focus on its label (.choices).
    if (e.matches('.choices input')) shown = e.closest('label');
    const s = getComputedStyle(shown);
    let back = shown.parentElement, bg = 'rgb(255, 255, 255)';
    while (back) {
        const c = getComputedStyle(back).backgroundColor;
        if (opaque(c)) { bg = c; break; }
        back = back.parentElement;
    }
    const l1 = luminance(s.outlineColor), l2 = luminance(bg);
    return {
        tag: e.tagName, id: e.id, text: (e.innerText || e.value || '').trim().slice(0, 40),
        width: s.outlineStyle === 'none' ? 0 : parseFloat(s.outlineWidth),
        style: s.outlineStyle,
        contrast: (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05),
    };
}"""

AFTER = """(previous) => {
    const e = document.activeElement;
    return !!(window.__previous && (window.__previous.compareDocumentPosition(e)
              & Node.DOCUMENT_POSITION_FOLLOWING));
}"""


def walk_the_tab_order(page: Page, stops: int = 40) -> list[str]:
    """Tab through the page; every stop must show a solid outline of 2 px or more at 3:1
    against what is behind it, and come after the one before in the document (reading
    order). Returns the problems found."""
    problems = []
    assert page.locator("[tabindex]:not([tabindex^='-']):not([tabindex='0'])").count() == 0, (
        "a positive tabindex reorders the page"
    )
    page.evaluate("window.__previous = null")
    seen = set()
    for _ in range(stops):
        page.keyboard.press("Tab")
        now = page.evaluate(FOCUS)
        if now["tag"] == "BODY":
            break
        key = (now["tag"], now["id"], now["text"])
        if key in seen:
            break  # wrapped round
        seen.add(key)
        if not (now["width"] >= 2 and now["style"] != "auto" and now["contrast"] >= 3):
            problems.append(f"{page.url}: {now}")
        if page.evaluate("window.__previous !== null") and not page.evaluate(AFTER):
            problems.append(f"{page.url}: {now} comes before the stop it follows")
        page.evaluate("window.__previous = document.activeElement")
    return problems


@pytest.mark.parametrize("width", [1280, 390])
def test_focus_is_visible_and_in_reading_order(live_server, page, auditor, width):
    read = drive(start("refund_waits_for_approval"))
    sign_in(page, live_server.url, "auditor")
    page.set_viewport_size({"width": width, "height": 900})
    problems = []
    for path in ("/runs/", f"/runs/{read.pk}/", f"/runs/{read.pk}/turns/0/probe/"):
        page.goto(f"{live_server.url}{path}")
        problems += walk_the_tab_order(page)
    assert not problems, "\n".join(problems)


def test_focus_is_visible_on_the_admin_pages(live_server, page, admin):
    sign_in(page, live_server.url, "admin")
    problems = []
    for path in ("/policies/", "/policies/new/", "/people/", "/tokens/"):
        page.goto(f"{live_server.url}{path}")
        problems += walk_the_tab_order(page, stops=60)
    assert not problems, "\n".join(problems)


# ---- htmx swaps: announced, focus kept -------------------------------------------------------


def status(page: Page) -> str:
    return page.evaluate("document.getElementById('swap-status')?.textContent || ''")


def test_a_filter_swap_is_announced_and_the_focus_stays_in_the_field(live_server, page, auditor):
    drive(start("refund_waits_for_approval"))
    sign_in(page, live_server.url, "auditor")
    page.goto(f"{live_server.url}/runs/")
    region = page.locator("#swap-status")
    expect(region).to_have_attribute("aria-live", "polite")
    expect(region).to_have_attribute("role", "status")
    with page.expect_response(lambda r: "/runs/?" in r.url):
        page.locator("#filter-q").press_sequentially("nothing-matches-this")
    expect(page.locator("#run-results")).to_contain_text("No run matches these filters.")
    expect(region).to_have_text("No run matches these filters.")
    assert page.evaluate("document.activeElement.id") == "filter-q"

    with page.expect_response(lambda r: "/runs/?" in r.url):
        page.locator("#filter-q").fill("")
    expect(region).to_contain_text("Newest first")
    assert page.evaluate("document.activeElement.id") == "filter-q"


def test_older_turns_swapped_in_keep_the_focus_off_the_body_and_are_announced(
    live_server, page, auditor
):
    run = run_with_turns(55, status="succeeded", stop_reason="goal_reached")
    sign_in(page, live_server.url, "auditor")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.wait_for_load_state("load")
    page.get_by_role("link", name="Older turns").focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{live_server.url}/runs/{run.pk}/?before=5")
    expect(page.locator(".tl-turn")).to_have_count(5)
    expect(page.locator("#swap-status")).to_contain_text("Turns before turn 5")
    # The link left with the old turns: the focus is where the swap showed, not on <body>.
    focused = page.evaluate("document.activeElement.id")
    assert focused == "timeline-title", focused
    # Tab goes on from there, into the older turns.
    page.keyboard.press("Tab")
    assert page.evaluate(
        "document.getElementById('timeline-title').compareDocumentPosition("
        "document.activeElement) & Node.DOCUMENT_POSITION_FOLLOWING"
    )


def test_a_live_poll_speaks_only_when_the_run_changed(live_server, page, auditor):
    run = drive(start("refund_waits_for_approval"))
    Run.objects.filter(pk=run.pk).update(status="running")
    sign_in(page, live_server.url, "auditor")
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    page.get_by_role("button", name="Verify chain").focus()
    # Two polls with nothing new: silence.
    page.wait_for_timeout(4500)
    assert status(page) == ""

    now = timezone.now()
    turn = make_turn(run=run, index=2, proposal={"message": "more", "calls": []}, started_at=now)
    make_decision(turn=turn, outcome="stop_failure", stop_reason="turn_cap")
    Run.objects.filter(pk=run.pk).update(
        status="failed", stop_reason="turn_cap", finished_at=now, updated_at=timezone.now()
    )
    expect(page.locator("#turn-2")).to_be_visible(timeout=8000)
    expect(page.locator("#swap-status")).to_contain_text("Turn cap reached")
    # The person's place is kept: the button they were on still has the focus.
    assert page.evaluate("document.activeElement.textContent") == "Verify chain"


def test_a_queue_filter_is_announced_with_the_counts(live_server, page, reviewer):
    make_escalation(kind=EscalationKind.UNCERTAIN)
    make_escalation()
    open_queue(page, live_server.url, "reviewer")
    with page.expect_response(lambda r: "/escalations/?" in r.url):
        page.locator("#count-uncertain").click()
    expect(page.locator("#swap-status")).to_contain_text("All")
    assert re.search(r"\d", status(page))


# ---- Keyboard shortcuts ----------------------------------------------------------------------


def shortcuts_off(page: Page, off: bool = True) -> None:
    """What the lead's preference renders: <body data-keyboard-shortcuts="off">."""
    page.evaluate(
        "(off) => off ? document.body.dataset.keyboardShortcuts = 'off'"
        " : delete document.body.dataset.keyboardShortcuts",
        off,
    )


def test_the_decision_pane_keys_obey_the_off_switch(live_server, page, reviewer):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    open_pane(page, live_server.url, escalation)
    requests = []
    page.on("request", lambda r: requests.append(r.url) if r.method == "POST" else None)
    dialog = page.locator("#shortcuts")

    shortcuts_off(page)
    for key in ("?", "a", "r", "e", "s"):
        page.keyboard.press(key)
    page.wait_for_timeout(300)
    expect(dialog).not_to_be_visible()
    assert requests == [], "a key decided with the shortcuts off"
    assert page.evaluate("document.activeElement === document.body")
    # The keys the page advertised go with them.
    expect(page.locator("[data-shortcut='approve'] kbd")).to_be_hidden()
    expect(page.locator("button[data-shortcut='help']")).to_be_hidden()

    shortcuts_off(page, False)
    keys_settled(page)
    page.keyboard.press("?")
    expect(dialog).to_be_visible()


def test_the_queue_keys_obey_the_off_switch(live_server, page, reviewer):
    make_escalation()
    open_queue(page, live_server.url, "reviewer")
    shortcuts_off(page)
    page.keyboard.press("j")
    page.keyboard.press("?")
    assert focused_id(page) is None
    expect(page.locator("#queue-shortcuts")).not_to_be_visible()
    expect(page.locator(".queue-shortcuts-open")).to_be_hidden()

    shortcuts_off(page, False)
    page.keyboard.press("j")
    assert focused_id(page) is not None


@pytest.mark.parametrize(
    "field",
    [
        "<input type='date' id='typed'>",
        "<input type='number' id='typed'>",
        "<input type='time' id='typed'>",
        "<div contenteditable='plaintext-only' id='typed' tabindex='0'>x</div>",
    ],
)
def test_no_pane_key_fires_inside_a_field_that_takes_text(live_server, page, reviewer, field):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    open_pane(page, live_server.url, escalation)
    page.evaluate(
        "(html) => document.querySelector('main').insertAdjacentHTML('afterbegin', html)", field
    )
    page.locator("#typed").focus()
    page.keyboard.press("?")
    page.keyboard.press("e")
    expect(page.locator("#shortcuts")).not_to_be_visible()
    assert page.evaluate("document.activeElement.id") == "typed"


def test_no_queue_key_fires_inside_an_editable_region(live_server, page, reviewer):
    make_escalation()
    open_queue(page, live_server.url, "reviewer")
    page.evaluate(
        "() => document.querySelector('main').insertAdjacentHTML('afterbegin',"
        " \"<div contenteditable='plaintext-only' id='typed'>x</div>\")"
    )
    page.locator("#typed").focus()
    page.keyboard.press("j")
    page.keyboard.press("?")
    assert page.evaluate("document.activeElement.id") == "typed"
    expect(page.locator("#queue-shortcuts")).not_to_be_visible()


def test_a_probes_result_takes_the_focus(live_server, page, auditor):
    read = drive(start("refund_waits_for_approval"))
    sign_in(page, live_server.url, "auditor")
    page.goto(f"{live_server.url}/runs/{read.pk}/turns/0/probe/")

    with page.expect_navigation():
        page.locator(".probe-form").get_by_role("button").click()

    # The result is below the form: a keyboard or screen-reader user lands on it, not at the
    # top of the page they must walk down again.
    expect(page.locator("#result-title")).to_be_focused()


def test_escape_leaves_a_text_field_for_its_form_not_the_page(live_server, page, reviewer):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    sign_in(page, live_server.url, "reviewer")
    open_pane(page, live_server.url, escalation)
    page.locator("#reason").fill("not this one")

    page.keyboard.press("Escape")

    # Focus is kept, visibly, where the person was, and the single keys work again from there.
    expect(page.locator("#decision-form")).to_be_focused()
    page.keyboard.press("?")
    expect(page.get_by_role("dialog", name="Keyboard shortcuts")).to_be_visible()
