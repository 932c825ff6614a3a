"""The reviewers' queue page through the Django client: what a row shows, filters and their
addresses, the live poll's 204, keyset pages, "next", bulk decisions and who may see it."""

import html
import json
import re
import time
from datetime import timedelta

import pytest
from django.contrib.staticfiles import finders
from django.utils import timezone

from escalations.claims import escalation_claim
from escalations.models import Escalation, EscalationKind, EscalationStatus, queue_fields
from escalations.verdicts import escalation_resolve
from tests.factories import make_escalation, make_run, make_tool_call, make_turn
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def queued(
    *,
    kind: str = EscalationKind.GATED_STEP,
    source: str = "gate",
    value: float | None = 0.93,
    t_star: float | None = None,
    delta: float | None = None,
    tool: str = "issue_refund",
    goal: str = "Refund order ord_1",
    **overrides,
) -> Escalation:
    """An open escalation whose reason and queue columns look like the ones a run writes."""
    turn = make_turn(run=make_run(goal=goal))
    make_tool_call(turn=turn, tool=tool)
    held = [0] if kind == EscalationKind.GATED_STEP else []
    reason = {
        "triggered": [
            {
                "source": source,
                "band": "fired" if t_star is None else "uncertain",
                "outcome": "escalate",
                "detail": "test",
                "value": value,
                "t_star": t_star,
                "delta": delta,
            }
        ],
        "held_calls": held,
        "ambiguous_calls": [],
    }
    fields = {"kind": kind, "reason": reason, **queue_fields(reason, {0: tool})}
    fields.update(overrides)
    return make_escalation(turn=turn, **fields)


def rows_of(page: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'data-escalation-id="(\d+)"', page)]


def attribute(page: str, element_id: str, name: str) -> str:
    tag = re.search(rf'<[^>]*id="{element_id}"[^>]*>', page, re.S).group(0)
    return html.unescape(re.search(rf'\s{name}="([^"]*)"', tag).group(1))


def away_from_a_minute_boundary() -> None:
    # The page's stamp carries the minute (so countdowns refresh); a test comparing two polls
    # must not straddle one.
    if timezone.now().second >= 57:
        time.sleep(4)


def test_a_row_shows_kind_conditions_run_goal_tools_deadline_and_holder(client, reviewer):
    escalation = queued(
        kind=EscalationKind.UNCERTAIN,
        source="integrity",
        value=0.42,
        t_star=0.4,
        delta=0.05,
        goal="Refund the broken parcel",
    )
    client.force_login(reviewer)
    page = client.get("/escalations/").content.decode()
    assert rows_of(page) == [escalation.pk]
    assert "Uncertain guardian answer" in page
    assert "integrity" in page
    assert "p 0.42" in page
    assert "t* 0.40±0.05" in page
    # The uncertain band t*±δ is drawn with SVG attributes: from 35 to 45 of 100.
    assert '<rect class="pbar-band" x="35" y="1" width="10" height="10">' in page
    assert f"Run {escalation.run_id}: <bdi>Refund the broken parcel</bdi>" in page
    assert f'href="/escalations/{escalation.pk}/"' in page
    assert "due <strong>in 59 min</strong>" in page
    assert f'<time datetime="{timezone.localtime(escalation.deadline).isoformat()}' in page
    assert "UTC" in page
    assert "Unclaimed" in page


def test_a_row_with_more_reasons_than_it_draws_says_how_many_more(client, reviewer):
    escalation = queued(kind=EscalationKind.GUARDIAN_FAILURE, source="integrity", value=0.5)
    reason = dict(escalation.reason)
    reason["triggered"] = [
        {**reason["triggered"][0], "source": source}
        for source in ("integrity", "infeasible", "goal_reached", "drift", "stagnation")
    ]
    Escalation.objects.filter(pk=escalation.pk).update(reason=reason)
    client.force_login(reviewer)
    page = client.get("/escalations/").content.decode()
    assert page.count('class="pbar-svg"') == 3
    assert "and 2 more" in page


def test_no_element_of_the_page_carries_an_inline_style_or_script(client, reviewer):
    queued(source="risk", value=0.5, t_star=0.3, delta=0.1)
    client.force_login(reviewer)
    page = client.get("/escalations/").content.decode()
    assert "style=" not in page
    assert "<script>" not in page
    assert " hx-on" not in page
    assert '<script src="/static/js/queue.js" defer>' in page


def test_a_goal_with_markup_and_a_bidi_override_stays_text_inside_bdi(client, reviewer):
    queued(goal="\u202eevil <img src=x onerror=alert(1)> hx-get=/admin/")
    client.force_login(reviewer)
    page = client.get("/escalations/").content.decode()
    assert "<img" not in page
    assert "<bdi>[U+202E]evil &lt;img src=x onerror=alert(1)&gt; hx-get=/admin/</bdi>" in page


def test_the_holder_and_since_when_are_shown_and_a_lapsed_claim_reads_unclaimed(
    client, reviewer, other_reviewer
):
    held = queued()
    lapsed = queued()
    escalation_claim(escalation_id=held.pk, reviewer=other_reviewer)
    Escalation.objects.filter(pk=lapsed.pk).update(
        claimed_by=other_reviewer,
        claimed_at=timezone.now() - timedelta(hours=1),
        claim_expires_at=timezone.now() - timedelta(minutes=1),
    )
    client.force_login(reviewer)
    page = client.get("/escalations/").content.decode()
    held_row = page[page.index(f'id="queue-row-{held.pk}"') :]
    held_row = held_row[: held_row.index("</li>")]
    assert "held-other" in page[: page.index(f'data-escalation-id="{held.pk}"')].rsplit("<li", 1)[1]
    assert "Held by <bdi>other_reviewer</bdi> since" in held_row
    lapsed_row = page[page.index(f'id="queue-row-{lapsed.pk}"') :]
    assert "Unclaimed" in lapsed_row[: lapsed_row.index("</li>")]


def test_counts_per_kind_are_links_that_filter(client, reviewer):
    queued()
    queued()
    queued(kind=EscalationKind.INTEGRITY, source="integrity", tool="send_email")
    client.force_login(reviewer)
    page = client.get("/escalations/?sort=oldest").content.decode()
    link = re.search(
        r'<a href="([^"]*kind=gated_step[^"]*)" hx-get="([^"]*)"[^>]*>'
        r'Irreversible or regulated step <span class="count">2</span>',
        page,
    )
    assert link, "the gated-step count links to its filter"
    href = html.unescape(link.group(1))
    assert href == html.unescape(link.group(2))
    assert "sort=oldest" in href, "a count keeps the other filters"
    assert 'All <span class="count">3</span>' in page
    assert 'Injected instructions <span class="count">1</span>' in page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("kind=integrity", {"integrity"}),
        ("condition=drift", {"drift"}),
        ("tool=send_email", {"mail"}),
        ("holder=unclaimed", {"mail", "drift"}),
        ("holder=mine", {"integrity"}),
        ("kind=gated_step&tool=issue_refund", set()),
    ],
)
def test_each_filter_narrows_the_list(client, reviewer, query, expected):
    by_name = {
        "mail": queued(tool="send_email"),
        "integrity": queued(kind=EscalationKind.INTEGRITY, source="integrity"),
        "drift": queued(kind=EscalationKind.UNCERTAIN, source="drift", t_star=0.5, delta=0.1),
    }
    escalation_claim(escalation_id=by_name["integrity"].pk, reviewer=reviewer)
    client.force_login(reviewer)
    page = client.get(f"/escalations/?{query}").content.decode()
    assert set(rows_of(page)) == {by_name[name].pk for name in expected}
    if not expected:
        assert "Nothing open matches these filters." in page


def test_the_run_filter_shows_that_runs_escalation(client, reviewer):
    wanted = queued()
    queued()
    client.force_login(reviewer)
    page = client.get(f"/escalations/?run={wanted.run_id}").content.decode()
    assert rows_of(page) == [wanted.pk]


def test_an_htmx_filter_change_gets_the_listing_and_a_short_url_to_push(client, reviewer):
    queued()
    client.force_login(reviewer)
    response = client.get(
        "/escalations/?kind=gated_step&condition=&tool=&run=&holder=&sort=urgent", **HX
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in body
    assert body.lstrip().startswith('<div id="queue-listing"')
    assert response["HX-Push-Url"] == "/escalations/?kind=gated_step"
    assert "HX-Request" in response["Vary"]


def test_every_hx_get_on_the_page_has_the_same_address_as_a_real_href(client, reviewer):
    for _ in range(3):
        queued()
    client.force_login(reviewer)
    page = client.get("/escalations/?holder=unclaimed").content.decode()
    form = re.search(r'<form id="queue-filters"[^>]*>', page, re.S).group(0)
    assert 'method="get"' in form
    assert 'action="/escalations/"' in form
    assert 'hx-push-url="true"' in form
    tags = re.findall(r"<(\w+)\s[^>]*hx-get=[^>]*>", page, re.S)
    full = re.findall(r"<\w+\s[^>]*hx-get=[^>]*>", page, re.S)
    assert len(full) >= 7
    for name, tag in zip(tags, full, strict=True):
        if 'id="queue-poll"' in tag:
            continue  # the live poll: no address a person would visit
        if name == "form":
            continue  # the filters: a GET form with the same action
        assert name == "a", tag
        href = re.search(r'href="([^"]*)"', tag).group(1)
        assert href == re.search(r'hx-get="([^"]*)"', tag).group(1), tag
        assert 'hx-push-url="true"' in tag, tag


def test_bad_filter_values_are_each_named_and_nothing_is_listed(client, reviewer):
    escalation = queued()
    client.force_login(reviewer)
    response = client.get(
        "/escalations/?kind=nope&condition=zzz&run=abc&holder=theirs&sort=sideways&after=@@"
    )
    page = response.content.decode()
    assert response.status_code == 400
    for field in ("kind:", "condition:", "run:", "holder:", "sort:", "after:"):
        assert f'<li class="error">{field}' in page, field
    assert rows_of(page) == [], "nothing shows under filters it was not asked for"
    # A stale cursor alone is named, and the first page shows, rightly filtered.
    stale = client.get("/escalations/?after=@@")
    assert stale.status_code == 200
    assert '<li class="error">after:' in stale.content.decode()
    assert rows_of(stale.content.decode()) == [escalation.pk]
    # The typed value is kept in its field, so the reviewer sees what was wrong.
    assert 'name="run" id="filter-run" value="abc"' in page
    htmx = client.get("/escalations/?run=-1", **HX)
    assert htmx.status_code == 200
    assert '<li class="error">run:' in htmx.content.decode()
    assert "HX-Push-Url" not in htmx


def test_the_poll_answers_204_until_the_queue_changes(client, reviewer, other_reviewer):
    first = queued()
    client.force_login(reviewer)
    away_from_a_minute_boundary()
    page = client.get("/escalations/").content.decode()
    poll = attribute(page, "queue-poll", "hx-get")
    assert "stamp=" in poll
    assert attribute(page, "queue-poll", "hx-trigger") == "every 2s, queue-changed from:body"

    unchanged = client.get(poll, **HX)
    assert unchanged.status_code == 204
    assert unchanged.content == b""

    arrived = queued()
    rows = client.get(poll, **HX)
    assert rows.status_code == 200
    body = rows.content.decode()
    assert body.lstrip().startswith('<div id="queue-rows"')
    assert set(rows_of(body)) == {first.pk, arrived.pk}

    # Claimed by someone else: the poll answers again, and the row says who holds it.
    new_poll = attribute(body, "queue-poll", "hx-get")
    assert client.get(new_poll, **HX).status_code == 204
    escalation_claim(escalation_id=first.pk, reviewer=other_reviewer)
    claimed = client.get(new_poll, **HX)
    assert claimed.status_code == 200
    assert "Held by <bdi>other_reviewer</bdi>" in claimed.content.decode()


def test_a_decided_item_leaves_the_rows_at_the_next_poll(client, reviewer):
    stays = queued()
    leaves = queued()
    client.force_login(reviewer)
    away_from_a_minute_boundary()
    poll = attribute(client.get("/escalations/").content.decode(), "queue-poll", "hx-get")
    Escalation.objects.filter(pk=leaves.pk).update(
        status=EscalationStatus.CANCELLED, resolved_at=timezone.now()
    )
    response = client.get(poll, **HX)
    assert response.status_code == 200
    assert rows_of(response.content.decode()) == [stays.pk]


def test_keyset_pages_of_fifty_follow_the_next_page_link(client, reviewer):
    now = timezone.now()
    made = [queued(deadline=now + timedelta(minutes=10 + i)) for i in range(53)]
    client.force_login(reviewer)
    first = client.get("/escalations/?sort=deadline").content.decode()
    assert rows_of(first) == [e.pk for e in made[:50]]
    link = re.search(r'<a rel="next" href="([^"]*)"', first)
    assert link, "a full page links to the next one"
    next_url = html.unescape(link.group(1))
    assert "after=" in next_url
    assert "sort=deadline" in next_url
    second = client.get(next_url).content.decode()
    assert rows_of(second) == [e.pk for e in made[50:]]
    assert 'rel="next"' not in second
    assert ">First page</a>" in second
    # The live poll of the second page stays on the second page.
    assert "after=" in attribute(second, "queue-poll", "hx-get")


def test_the_page_and_its_poll_cost_the_same_queries_for_2_or_40_items(
    client, reviewer, other_reviewer
):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def cost() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as page:
            html_page = client.get("/escalations/").content.decode()
        poll = attribute(html_page, "queue-poll", "hx-get").replace("stamp=", "stamp=old")
        with CaptureQueriesContext(connection) as rows:
            assert client.get(poll, **HX).status_code == 200
        return len(page), len(rows)

    client.force_login(reviewer)
    for index in range(40):
        escalation = queued()
        if index % 3 == 0:
            escalation_claim(escalation_id=escalation.pk, reviewer=other_reviewer)
        if index == 1:
            few = cost()
    assert cost() == few
    # The poll reads the session, the user, the stamp, the state the cached counts per kind
    # are keyed on, and one page of rows.
    assert few[1] <= 7


def test_the_poll_brings_the_counts_per_kind_along_out_of_band(client, reviewer):
    queued()
    client.force_login(reviewer)
    away_from_a_minute_boundary()
    poll = attribute(
        client.get("/escalations/?sort=oldest").content.decode(), "queue-poll", "hx-get"
    )
    queued(kind=EscalationKind.INTEGRITY, source="integrity", tool="")
    body = client.get(poll, **HX).content.decode()
    counts = body[body.index('<nav id="queue-counts"') :]
    assert 'hx-swap-oob="true"' in counts[: counts.index(">")]
    assert re.search(r'id="count-all"[^>]*>All <span class="count">2</span>', counts)
    assert re.search(
        r'id="count-integrity"[^>]*>Injected instructions <span class="count">1<', counts
    )
    # The links keep the queue's filters, as on the page.
    assert 'href="/escalations/?sort=oldest&amp;kind=integrity"' in counts


def test_next_claims_the_most_urgent_item_and_opens_it(client, reviewer):
    queued(kind=EscalationKind.UNCERTAIN, source="drift", urgency=1)
    urgent = queued()
    client.force_login(reviewer)
    response = client.post("/escalations/next")
    assert response.status_code == 302
    assert response["Location"] == f"/escalations/{urgent.pk}/"
    urgent.refresh_from_db()
    assert urgent.claimed_by == reviewer


def test_next_keeps_to_the_queues_filters(client, reviewer):
    queued()
    drift = queued(kind=EscalationKind.UNCERTAIN, source="drift", t_star=0.5, delta=0.1)
    client.force_login(reviewer)
    page = client.get("/escalations/?condition=drift").content.decode()
    next_form = page[page.index('<form id="queue-next"') :]
    next_form = next_form[: next_form.index("</form>")]
    assert '<input type="hidden" name="condition" value="drift">' in next_form
    response = client.post("/escalations/next", {"condition": "drift"})
    assert response["Location"] == f"/escalations/{drift.pk}/"


def test_next_with_nothing_left_says_so_on_the_queue(client, reviewer, other_reviewer):
    taken = queued()
    escalation_claim(escalation_id=taken.pk, reviewer=other_reviewer)
    client.force_login(reviewer)
    response = client.post("/escalations/next", {"sort": "oldest"}, follow=True)
    assert response.redirect_chain == [("/escalations/?sort=oldest", 302)]
    # In the page's notices (base.html), styled like every other notice, above the heading.
    page = response.content.decode()
    assert (
        '<ul class="messages notices" role="status"><li class="info">Nothing left to claim:'
        " every open item is held by another reviewer or was skipped by you a moment ago.</li>"
    ) in page
    assert page.index('class="messages notices"') < page.index("<h1>Open escalations</h1>")


def test_next_on_an_empty_queue_says_nothing_waits_and_the_queue_shows_it(client, reviewer):
    client.force_login(reviewer)
    page = client.post("/escalations/next", follow=True).content.decode()
    assert '<li class="info">Nothing left to claim: nothing waits for a reviewer.</li>' in page
    empty = page[page.index('<div class="queue-empty all-clear">') :]
    assert '<p class="queue-empty-title">Nothing waits for a reviewer.</p>' in empty
    filtered = client.post("/escalations/next", {"kind": "integrity"}, follow=True)
    page = filtered.content.decode()
    assert '<li class="info">Nothing left to claim under these filters.</li>' in page
    assert '<p class="queue-empty-title">Nothing open matches these filters.</p>' in page
    # The way out of an empty filter is a link (and the same address for htmx).
    assert (
        '<a href="/escalations/" hx-get="/escalations/" hx-target="#queue-listing"'
        ' hx-swap="outerHTML" hx-push-url="true">Show every open escalation</a>'
    ) in page


def test_bulk_approve_gives_each_item_its_own_verdict_and_reports_each(client, reviewer):
    first = drive(start("refund_waits_for_approval")).escalations.get()
    second = drive(start("refund_waits_for_approval")).escalations.get()
    client.force_login(reviewer)
    response = client.post(
        "/escalations/bulk",
        {"escalation": [first.pk, second.pk], "decision": "approve"},
        **HX,
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert '<h2 id="bulk-report-title">Approve selected: 2 approved</h2>' in body
    for escalation in (first, second):
        # A line per item: its number links to it, then what came of it.
        assert (
            f'<li class="bulk-decided" data-escalation-id="{escalation.pk}">'
            f'<a href="/escalations/{escalation.pk}/">#{escalation.pk}</a> '
            '<strong class="bulk-outcome">approved</strong>'
        ) in body
    assert json.loads(response["HX-Trigger"]) == {"queue-changed": {}}
    for escalation in (first, second):
        escalation.refresh_from_db()
        assert escalation.status == EscalationStatus.APPROVED
        assert escalation.verdict.reviewer == reviewer


def test_bulk_refreshes_the_counts_and_the_reviewers_stats_out_of_band(client, reviewer):
    first = drive(start("refund_waits_for_approval")).escalations.get()
    second = drive(start("refund_waits_for_approval")).escalations.get()
    queued(kind=EscalationKind.INTEGRITY, source="integrity", tool="")
    client.force_login(reviewer)
    page = client.get("/escalations/?sort=oldest").content.decode()
    assert "<dt>Decided today</dt><dd>0</dd>" in page
    body = client.post(
        "/escalations/bulk",
        {"escalation": [first.pk, second.pk], "decision": "approve", "sort": "oldest"},
        **HX,
    ).content.decode()
    counts = body[body.index('<nav id="queue-counts"') :]
    assert 'hx-swap-oob="true"' in counts[: counts.index(">")]
    assert re.search(r'id="count-all"[^>]*>All <span class="count">1</span>', counts)
    assert re.search(r'id="count-gated_step"[^>]*>[^<]*<span class="count">0</span>', counts)
    assert 'href="/escalations/?sort=oldest&amp;kind=integrity"' in counts
    stats = body[body.index('<section id="queue-stats"') :]
    assert 'hx-swap-oob="true"' in stats[: stats.index(">")]
    assert "<dt>Decided today</dt><dd>2</dd>" in stats


def test_bulk_that_decides_nothing_leaves_the_counts_and_stats_alone(client, reviewer):
    client.force_login(reviewer)
    body = client.post("/escalations/bulk", {"decision": "approve"}, **HX).content.decode()
    assert "hx-swap-oob" not in body


def test_bulk_decides_only_items_like_the_first_and_names_the_others(client, reviewer):
    gated = drive(start("refund_waits_for_approval")).escalations.get()
    injected = drive(start("injected_instruction")).escalations.get()
    client.force_login(reviewer)
    response = client.post(
        "/escalations/bulk",
        {"escalation": [gated.pk, injected.pk], "decision": "reject", "reason": "not now"},
        **HX,
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "Reject selected: 1 rejected · 1 not decided" in body
    assert '<strong class="bulk-outcome">rejected</strong>' in body
    refused = body[body.index(f'<li class="bulk-refused" data-escalation-id="{injected.pk}">') :]
    refused = refused[: refused.index("</li>")]
    assert f'<a href="/escalations/{injected.pk}/">#{injected.pk}</a>' in refused
    assert '<strong class="bulk-outcome">not decided</strong>' in refused
    # Why, in the queue's words: both kinds, the tools, and which item set the kind.
    assert (
        "Injected instructions with no tool is not like the first selected, "
        f"#{gated.pk} (Irreversible or regulated step holding issue_refund)"
    ) in refused
    assert f"escalation {injected.pk}:" not in refused, "the number is said once"
    injected.refresh_from_db()
    assert injected.status == EscalationStatus.OPEN


def test_bulk_reject_without_a_reason_is_refused_once_and_decides_nothing(client, reviewer):
    first = drive(start("refund_waits_for_approval")).escalations.get()
    second = drive(start("refund_waits_for_approval")).escalations.get()
    client.force_login(reviewer)
    body = client.post(
        "/escalations/bulk",
        {"escalation": [first.pk, second.pk], "decision": "reject", "reason": "  "},
        **HX,
    ).content.decode()
    assert body.count("reason: a rejection needs a reason") == 1
    assert "bulk-report" not in body
    for escalation in (first, second):
        escalation.refresh_from_db()
        assert escalation.status == EscalationStatus.OPEN


def test_the_bulk_form_asks_before_posting_and_rows_say_what_they_hold(client, reviewer):
    escalation = queued()
    client.force_login(reviewer)
    page = client.get("/escalations/").content.decode()
    assert attribute(page, "queue-bulk", "hx-confirm").startswith("Decide every ticked item?")
    # The dialog queue.js fills in sits outside the parts the poll and the filters swap.
    assert '<dialog id="bulk-confirm"' in page
    assert "bulk-confirm" not in client.get("/escalations/?kind=gated_step", **HX).content.decode()
    row = re.search(rf'<li id="queue-row-{escalation.pk}"[^>]*>', page).group(0)
    assert 'data-kind="gated_step"' in row
    assert 'data-kind-label="Irreversible or regulated step"' in row
    assert 'data-tools="issue_refund"' in row
    # Enter in the reason field presses the first button: Reject, never Approve.
    bulk = page[page.index('<form id="queue-bulk"') :]
    assert bulk.index('value="reject"') < bulk.index('value="approve"')


def test_bulk_without_a_selection_or_decision_names_both_fields(client, reviewer):
    client.force_login(reviewer)
    body = client.post("/escalations/bulk", {"decision": "maybe"}, **HX).content.decode()
    assert "escalation: select at least one item" in body
    assert "decision: choose" in body


def test_bulk_without_javascript_redirects_to_the_queue_with_each_outcome(client, reviewer):
    escalation = drive(start("refund_waits_for_approval")).escalations.get()
    client.force_login(reviewer)
    response = client.post(
        "/escalations/bulk",
        {"escalation": [escalation.pk], "decision": "reject", "reason": "not this one"},
        follow=True,
    )
    assert response.redirect_chain == [("/escalations/", 302)]
    assert f'<li class="success">#{escalation.pk} rejected — ' in response.content.decode()


@pytest.mark.parametrize("persona", ["auditor", "outsider"])
def test_only_reviewers_may_see_or_act_on_the_queue(client, request, persona):
    escalation = queued()
    client.force_login(request.getfixturevalue(persona))
    assert client.get("/escalations/").status_code == 403
    assert client.get("/escalations/?stamp=x", **HX).status_code == 403
    assert client.post("/escalations/next").status_code == 403
    response = client.post(
        "/escalations/bulk", {"escalation": [escalation.pk], "decision": "approve"}
    )
    assert response.status_code == 403
    escalation.refresh_from_db()
    assert escalation.status == EscalationStatus.OPEN
    assert escalation.claimed_by is None


def test_the_reviewers_own_stats_and_the_examples_link_are_at_the_top(client, reviewer):
    client.force_login(reviewer)
    page = client.get("/escalations/").content.decode()
    stats = page[page.index('<section id="queue-stats"') : page.index('id="queue-listing"')]
    assert "Decided today" in stats
    assert 'href="/escalations/examples/"' in stats


def test_agreement_with_the_guardian_says_how_many_examples_it_rests_on(client, reviewer):
    for _ in range(2):
        escalation = drive(start("injected_instruction")).escalations.get()
        # The guardian said 0.96 that the output holds instructions; the reviewer agrees.
        escalation_resolve(
            escalation_id=escalation.pk,
            reviewer=reviewer,
            decision="answer",
            answer={"integrity": True},
        )
    client.force_login(reviewer)
    page = client.get("/escalations/").content.decode()
    assert re.search(
        r"<dt>Agreement with the guardian</dt><dd>100 % <span [^>]*>of 2</span></dd>", page
    )


def test_every_page_names_its_icon_and_favicon_ico_leads_to_it(client, reviewer):
    client.force_login(reviewer)
    page = client.get("/escalations/").content.decode()
    icon = re.search(r'<link rel="icon" href="([^"]+)" type="image/svg\+xml">', page)
    assert icon, "base.html names the icon"
    assert finders.find("favicon.svg"), "vendored in static/, no CDN"
    client.logout()
    # Asked for by a browser on any page (the admin's too), signed in or not.
    answer = client.get("/favicon.ico")
    assert answer.status_code == 302
    assert answer["Location"] == icon.group(1)


@pytest.mark.parametrize(
    ("seconds", "said"),
    [
        (20, "in under a minute"),
        (23 * 60 + 50, "in 23 min"),
        (125 * 60, "in 2 h 5 min"),
        (26 * 3600, "in 1 d 2 h"),
        (-5 * 60, "overdue by 5 min"),
    ],
)
def test_a_countdown_reads_as_a_person_would_say_it(seconds, said):
    from escalations.presentation import countdown

    now = timezone.now()
    assert countdown(now + timedelta(seconds=seconds), now) == said


def test_a_bar_keeps_its_marker_and_band_inside_the_track():
    from escalations.presentation import probability_bar

    edge = probability_bar({"source": "risk", "value": 1.0, "t_star": 0.02, "delta": 0.05})
    assert (edge.value_x, edge.band_x, edge.band_width, edge.t_star_x) == ("98", "0", "7", "2")
    assert edge.text == "p 1.00 · t* 0.02±0.05"
    silent = probability_bar({"source": "gate", "value": None, "band": "malformed"})
    assert (silent.value, silent.value_x, silent.t_star) == (None, None, None)
    assert silent.text == "no answer"
    odd = probability_bar({"source": "risk", "value": "0.5<svg>", "t_star": True})
    assert (odd.value, odd.t_star) == (None, None), "only numbers become geometry"
