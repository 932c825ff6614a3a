"""The auditors' runs list: newest first by keyset pages of fifty, every filter and the search,
bad filters named, stop reasons in words, htmx results with a short address, who may see it."""

import html
import re
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runs.models import DecisionOutcome, Run, RunStatus
from runs.stop_reasons import STOP_REASONS, stop_reason_text
from tests.factories import (
    make_decision,
    make_escalation,
    make_policy_version,
    make_run,
    make_tool_call,
    make_turn,
)

pytestmark = pytest.mark.django_db

HX = {"HTTP_HX_REQUEST": "true"}


def rows_of(page: str) -> list[int]:
    """The run ids of the list's rows, in the order shown."""
    return [int(pk) for pk in re.findall(r'<tr id="run-row-(\d+)"', page)]


def created(run: Run, moment: datetime) -> Run:
    """Set when the run was created (auto_now_add fills it on insert)."""
    Run.objects.filter(pk=run.pk).update(created_at=moment)
    run.refresh_from_db()
    return run


def local(*args: int) -> datetime:
    """A moment in the site's time zone, where the date filters' days begin and end."""
    return datetime(*args, tzinfo=timezone.get_current_timezone())


def test_the_newest_runs_come_first_in_keyset_pages_of_fifty(client, auditor):
    version = make_policy_version()
    start = timezone.now() - timedelta(days=3)
    # Made oldest first, so an unordered read (the old bug) would list the oldest first.
    made = [
        created(make_run(policy_version=version), start + timedelta(minutes=i)) for i in range(53)
    ]
    # Two runs created in the same instant: the id breaks the tie, on both sides of a page.
    created(made[2], made[3].created_at)
    newest_first = sorted(made, key=lambda r: (r.created_at, r.pk), reverse=True)
    client.force_login(auditor)
    first = client.get("/runs/").content.decode()
    assert rows_of(first) == [r.pk for r in newest_first[:50]]
    link = re.search(r'<a rel="next" href="([^"]*)"', first)
    assert link, "a full page links to the next one"
    second = client.get(html.unescape(link.group(1))).content.decode()
    assert rows_of(second) == [r.pk for r in newest_first[50:]]
    assert 'rel="next"' not in second
    assert ">First page</a>" in second


def test_a_run_started_between_two_pages_shows_on_neither_twice(client, auditor):
    version = make_policy_version()
    start = timezone.now() - timedelta(days=1)
    made = [
        created(make_run(policy_version=version), start + timedelta(minutes=i)) for i in range(55)
    ]
    client.force_login(auditor)
    first = client.get("/runs/").content.decode()
    make_run(policy_version=version, goal="started meanwhile")
    link = html.unescape(re.search(r'<a rel="next" href="([^"]*)"', first).group(1))
    second = client.get(link).content.decode()
    assert rows_of(first) + rows_of(second) == [r.pk for r in reversed(made)]


@pytest.fixture
def world():
    """Four runs, each different in every filter the list has."""
    old_policy = make_policy_version(number=7, label="strict")
    new_policy = make_policy_version(number=8)

    done = make_run(goal="Refund order ORD_1001", policy_version=old_policy)
    done = created(done, local(2026, 1, 10, 9, 0))
    Run.objects.filter(pk=done.pk).update(
        status=RunStatus.SUCCEEDED, stop_reason="goal_reached", final_answer="Refunded."
    )
    turn = make_turn(run=done, index=0)
    make_tool_call(turn=turn, tool="read_order")
    make_decision(turn=turn, guardian_model_version="local-1")
    # The last decision is what the outcome filter reads, not the first.
    last = make_turn(run=done, index=1)
    make_decision(turn=last, outcome=DecisionOutcome.STOP_SUCCESS, guardian_model_version="local-1")

    waiting = make_run(
        goal="Email the customer about 100% of it", policy_version=new_policy, actor="external"
    )
    waiting = created(waiting, local(2026, 2, 10, 23, 30))
    Run.objects.filter(pk=waiting.pk).update(status=RunStatus.WAITING)
    turn = make_turn(run=waiting, index=0)
    make_tool_call(turn=turn, tool="send_email")
    make_decision(turn=turn, outcome=DecisionOutcome.ESCALATE, guardian_model_version="local-2")
    make_escalation(turn=turn)

    expired = make_run(goal="Wire the money", policy_version=new_policy)
    expired = created(expired, local(2026, 2, 11, 0, 30))
    Run.objects.filter(pk=expired.pk).update(
        status=RunStatus.FAILED, stop_reason="escalation_expired"
    )
    turn = make_turn(run=expired, index=0)
    make_tool_call(turn=turn, tool="wire_transfer")
    make_tool_call(turn=turn, tool="read_order", position=1, idempotency_key=None)
    make_decision(turn=turn, outcome=DecisionOutcome.ESCALATE, guardian_model_version="local-2")
    make_escalation(turn=turn, status="expired", resolved_at=timezone.now())

    fresh = make_run(goal="Look up order ord_2002", policy_version=new_policy)
    fresh = created(fresh, local(2026, 3, 1, 12, 0))
    return {"done": done, "waiting": waiting, "expired": expired, "fresh": fresh}


# Each filter and the search, with the runs of `world` it keeps: the page and the API (which
# read the same parameters through the same selector) are both held to it.
FILTER_CASES = [
    ("", {"fresh", "expired", "waiting", "done"}),
    ("status=waiting", {"waiting"}),
    ("status=pending", {"fresh"}),
    ("actor=external", {"waiting"}),
    ("actor=scripted", {"fresh", "expired", "done"}),
    ("actor=openai", set()),
    ("outcome=stop_success", {"done"}),
    ("outcome=continue", set()),
    ("outcome=escalate", {"waiting", "expired"}),
    ("stop_reason=escalation_expired", {"expired"}),
    ("stop_reason=goal_reached", {"done"}),
    ("since=2026-02-11", {"expired", "fresh"}),
    ("until=2026-02-10", {"waiting", "done"}),
    ("since=2026-02-10&until=2026-02-10", {"waiting"}),
    ("policy=7", {"done"}),
    ("policy=8", {"fresh", "expired", "waiting"}),
    ("model=local-2", {"expired", "waiting"}),
    ("model=local", set()),
    ("escalated=yes", {"expired", "waiting"}),
    ("escalated=no", {"fresh", "done"}),
    ("tool=read_order", {"expired", "done"}),
    ("tool=send_email", {"waiting"}),
    ("tool=read", set()),
    ("q=order", {"fresh", "done"}),
    ("q=ord_1001", {"done"}),
    ("q=100%25", {"waiting"}),
    ("q=%25", {"waiting"}),
    ("q=_", {"fresh", "done"}),
    ("status=failed&tool=read_order&escalated=yes", {"expired"}),
    ("policy=8&q=order&model=local-2", set()),
]
NEWEST_FIRST = ("fresh", "expired", "waiting", "done")


@pytest.mark.parametrize(("query", "expected"), FILTER_CASES)
def test_each_filter_and_the_search_narrow_the_list(client, auditor, world, query, expected):
    client.force_login(auditor)
    page = client.get(f"/runs/?{query}").content.decode()
    assert rows_of(page) == [world[name].pk for name in NEWEST_FIRST if name in expected]
    if not expected:
        assert "No run matches these filters." in page


@pytest.mark.parametrize(("query", "expected"), FILTER_CASES)
def test_the_api_lists_the_same_runs_as_the_page_for_each_filter(
    client, auditor, world, query, expected
):
    client.force_login(auditor)
    page = client.get(f"/runs/?{query}").content.decode()
    response = client.get(f"/api/runs/?{query}")
    assert response.status_code == 200, response.content
    listed = [item["id"] for item in response.json()["results"]]
    assert listed == rows_of(page) == [world[n].pk for n in NEWEST_FIRST if n in expected]


# One bad value per parameter, each named alone by the page (which still lists) and by the
# API (a 400 in its one error shape, naming that parameter).
BAD_VALUES = [
    ("status", "done"),
    ("actor", "robot"),
    ("outcome", "maybe"),
    ("stop_reason", "bored"),
    ("since", "2026-13-01"),
    ("until", "yesterday"),
    ("policy", "v7"),
    ("policy", "0"),
    ("policy", "99999999999999999999"),
    ("escalated", "sometimes"),
    ("after", "@@"),
    ("model", "m" * 121),
    ("model", "a%00b"),
    ("tool", "t" * 121),
    ("tool", "a%00b"),
    ("q", "x" * 201),
    ("q", "a%00b"),
]


@pytest.mark.parametrize(("field", "value"), BAD_VALUES)
def test_a_bad_filter_value_is_named_by_the_page_and_is_a_400_naming_it_in_the_api(
    client, auditor, world, field, value
):
    client.force_login(auditor)
    page = client.get(f"/runs/?{field}={value}").content.decode()
    assert f'<li class="error">{field}:' in page
    response = client.get(f"/api/runs/?{field}={value}")
    assert response.status_code == 400
    body = response.json()
    assert set(body) == {field}
    assert all(isinstance(m, str) and m.startswith(f"{field}:") for m in body[field])


def test_the_api_follows_the_pages_keyset_and_windows_page_for_page(client, auditor, monkeypatch):
    from runs import selectors

    monkeypatch.setattr(selectors, "RUN_PROBE_WINDOW", 4)
    version = make_policy_version()
    start = timezone.now() - timedelta(days=1)
    for i in range(10):
        run = created(make_run(policy_version=version), start + timedelta(minutes=i))
        make_tool_call(turn=make_turn(run=run), tool="wire_transfer" if i % 3 else "read_order")
    client.force_login(auditor)
    page_url, api_url, pages = "/runs/?tool=wire_transfer", "/api/runs/?tool=wire_transfer", 0
    while page_url:
        page = client.get(page_url).content.decode()
        api = client.get(api_url).json()
        pages += 1
        assert [item["id"] for item in api["results"]] == rows_of(page)
        assert (api["looked_back_to"] is not None) == ("Looked through" in page)
        link = re.search(r'<a rel="next" href="([^"]*)"', page)
        page_url = html.unescape(link.group(1)) if link else ""
        api_url = api["next"]
        assert bool(api_url) == bool(page_url)
    assert pages == 3


def test_a_row_says_status_last_outcome_stop_reason_in_words_counts_and_links_to_the_run(
    client, auditor, world
):
    client.force_login(auditor)
    page = client.get("/runs/").content.decode()
    expired = world["expired"]
    row = page[page.index(f'<tr id="run-row-{expired.pk}"') :]
    row = row[: row.index("</tr>")]
    assert f'<a href="/runs/{expired.pk}/"><bdi>Wire the money</bdi></a>' in row
    assert ">Failed<" in row
    assert ">Escalate<" in row
    assert "Escalation expired unanswered; nothing ran<" in row
    assert 'title="escalation_expired">' in row
    # turns, escalations (each cell names itself when the rows stack on a phone)
    assert re.findall(r'<td class="num">.*?</span>(\d+)</td>', row) == ["1", "1"]
    assert "</span>v8<" in row
    done = page[page.index(f'<tr id="run-row-{world["done"].pk}"') :]
    assert re.findall(r'<td class="num">.*?</span>(\d+)</td>', done[: done.index("</tr>")]) == [
        "2",
        "0",
    ]
    assert ">Goal reached<" in done
    fresh = page[page.index(f'<tr id="run-row-{world["fresh"].pk}"') :]
    assert "no decision yet" in fresh[: fresh.index("</tr>")]


def test_every_stop_reason_reads_as_words_and_an_unknown_one_still_does():
    for code, words in STOP_REASONS.items():
        assert words, code
        assert "_" not in words, code
        assert stop_reason_text(code) == words
    assert STOP_REASONS["goal_reached"] == "Goal reached"
    assert stop_reason_text("escalation_expired") == "Escalation expired unanswered; nothing ran"
    assert stop_reason_text("some_new_guard") == "Some new guard"
    assert stop_reason_text("") == ""


def test_the_stop_reason_filter_offers_every_reason_in_words(client, auditor):
    client.force_login(auditor)
    page = client.get("/runs/?stop_reason=turn_cap").content.decode()
    select = re.search(r'<select name="stop_reason".*?</select>', page, re.S).group(0)
    for code, words in STOP_REASONS.items():
        assert f'value="{code}"' in select
        assert html.escape(words) in select
    assert '<option value="turn_cap" selected>Turn cap reached; no answer</option>' in select


def test_bad_filter_values_are_each_named_and_nothing_is_listed(client, auditor, world):
    client.force_login(auditor)
    query = (
        "status=done&outcome=maybe&stop_reason=bored&since=2026-13-01&until=yesterday"
        "&policy=v7&escalated=sometimes&after=@@&model="
        + "m" * 121
        + "&tool="
        + "t" * 121
        + "&q="
        + "x" * 201
    )
    response = client.get(f"/runs/?{query}")
    page = response.content.decode()
    assert response.status_code == 400
    fields = ("status", "outcome", "stop_reason", "since", "until", "policy", "escalated")
    for field in (*fields, "after", "model", "tool", "q"):
        assert f'<li class="error">{field}:' in page, field
    assert rows_of(page) == [], "nothing shows under filters it was not asked for"
    stale = client.get("/runs/?after=@@")
    assert stale.status_code == 200
    assert len(rows_of(stale.content.decode())) == 4, "a stale cursor alone: the first page"
    # A typed value stays in its field, so the auditor sees what was wrong.
    assert 'name="since" id="filter-since" value="2026-13-01"' in page
    reversed_range = client.get("/runs/?since=2026-02-11&until=2026-02-10").content.decode()
    assert '<li class="error">until: must not be before since</li>' in reversed_range
    assert rows_of(reversed_range) == []
    nul = client.get("/runs/?q=a%00b")
    assert nul.status_code == 400
    assert '<li class="error">q:' in nul.content.decode()


def test_an_htmx_filter_change_gets_the_results_and_a_short_address_to_push(client, auditor, world):
    client.force_login(auditor)
    response = client.get(
        "/runs/?q=&status=waiting&outcome=&stop_reason=&since=&until=&policy=&model="
        "&tool=&escalated=",
        **HX,
    )
    body = response.content.decode()
    assert response.status_code == 200
    assert "<html" not in body
    assert body.lstrip().startswith('<div id="run-results"')
    assert rows_of(body) == [world["waiting"].pk]
    assert response["HX-Push-Url"] == "/runs/?status=waiting"
    assert "HX-Request" in response["Vary"]
    bad = client.get("/runs/?status=nope", **HX)
    assert '<li class="error">status:' in bad.content.decode()
    assert "HX-Push-Url" not in bad


def test_every_hx_get_on_the_page_has_the_same_address_as_a_real_href(client, auditor):
    version = make_policy_version()
    for _ in range(51):
        make_run(policy_version=version)
    client.force_login(auditor)
    first = client.get("/runs/?status=pending").content.decode()
    next_url = html.unescape(re.search(r'<a rel="next" href="([^"]*)"', first).group(1))
    second = client.get(next_url).content.decode()
    for page in (first, second):
        form = re.search(r'<form id="run-filters"[^>]*>', page, re.S).group(0)
        assert 'method="get"' in form
        assert 'action="/runs/"' in form
        assert 'hx-push-url="true"' in form
        for tag in re.findall(r"<\w+\s[^>]*hx-get=[^>]*>", page, re.S):
            if tag.startswith(("<form", "<input")):
                continue  # the filters: a GET form with the same action, and its search box
            assert tag.startswith("<a "), tag
            href = re.search(r'href="([^"]*)"', tag).group(1)
            assert href == re.search(r'hx-get="([^"]*)"', tag).group(1), tag
            assert 'hx-push-url="true"' in tag, tag
            assert "status=pending" in href, "a page link keeps the filters"
    assert "style=" not in first
    assert "<script>" not in first


def test_a_goal_with_markup_and_a_bidi_override_stays_text_inside_bdi(client, auditor):
    make_run(goal="\u202eevil <img src=x onerror=alert(1)> hx-get=/admin/")
    client.force_login(auditor)
    page = client.get("/runs/?q=evil").content.decode()
    assert "<img" not in page
    assert "<bdi>[U+202E]evil &lt;img src=x onerror=alert(1)&gt; hx-get=/admin/</bdi>" in page


def test_the_list_costs_the_same_queries_for_2_or_40_runs(client, auditor):
    version = make_policy_version()

    def cost() -> tuple[int, int]:
        with CaptureQueriesContext(connection) as page:
            client.get("/runs/")
        with CaptureQueriesContext(connection) as filtered:
            client.get("/runs/?tool=read_order&escalated=yes&outcome=escalate&q=order", **HX)
        return len(page), len(filtered)

    client.force_login(auditor)
    for index in range(40):
        turn = make_turn(run=make_run(policy_version=version), index=0)
        make_tool_call(turn=turn)
        make_decision(turn=turn, outcome=DecisionOutcome.ESCALATE)
        make_escalation(turn=turn)
        if index == 1:
            few = cost()
    assert cost() == few
    # The session, the user and the role's permissions (two), then the rows in one statement;
    # a filter on another table adds one (where its window of runs ends); the whole page adds
    # the policy versions and the recent model versions of its form.
    assert few[1] <= 6
    assert few[0] <= 7


def test_the_api_and_the_page_agree_on_the_newest_first(client, auditor):
    version = make_policy_version()
    start = timezone.now() - timedelta(days=1)
    made = [
        created(make_run(policy_version=version), start + timedelta(minutes=i)) for i in range(3)
    ]
    client.force_login(auditor)
    page = client.get("/runs/").content.decode()
    api = client.get("/api/runs/").json()
    assert rows_of(page) == [r.pk for r in reversed(made)]
    assert [item["id"] for item in api["results"]] == rows_of(page)


@pytest.mark.parametrize(
    ("persona", "status"),
    [("auditor", 200), ("admin", 403), ("reviewer", 403), ("outsider", 403)],
)
def test_only_auditors_may_see_the_list_or_its_results(client, request, persona, status):
    client.force_login(request.getfixturevalue(persona))
    assert client.get("/runs/").status_code == status
    assert client.get("/runs/?status=running", **HX).status_code == status


def test_signed_out_the_list_sends_to_the_sign_in_page(client):
    response = client.get("/runs/?status=running")
    assert response.status_code == 302
    assert response["Location"].startswith("/accounts/login/")


def test_the_date_range_is_of_days_in_the_sites_time_zone(client, auditor, settings):
    settings.TIME_ZONE = "America/New_York"
    # 03:00 UTC on the 11th is still the evening of the 10th in New York.
    run = created(make_run(), datetime(2026, 2, 11, 3, 0, tzinfo=UTC))
    client.force_login(auditor)
    assert rows_of(client.get("/runs/?until=2026-02-10").content.decode()) == [run.pk]
    assert rows_of(client.get("/runs/?since=2026-02-11").content.decode()) == []
    assert rows_of(client.get("/runs/?since=2026-02-10&until=2026-02-10").content.decode()) == [
        run.pk
    ]


def test_a_filter_on_another_table_looks_back_a_window_at_a_time_and_says_so(
    client, auditor, monkeypatch
):
    from runs import selectors

    monkeypatch.setattr(selectors, "RUN_PROBE_WINDOW", 4)
    version = make_policy_version()
    start = timezone.now() - timedelta(days=1)
    made = []
    for i in range(10):
        run = created(make_run(policy_version=version), start + timedelta(minutes=i))
        turn = make_turn(run=run, index=0)
        make_tool_call(turn=turn, tool="wire_transfer" if i in (1, 7) else "read_order")
        made.append(run)
    client.force_login(auditor)
    seen, url, pages = [], "/runs/?tool=wire_transfer", 0
    while url:
        page = client.get(url).content.decode()
        pages += 1
        seen += rows_of(page)
        link = re.search(r'<a rel="next" href="([^"]*)"', page)
        url = html.unescape(link.group(1)) if link else ""
        if url:
            assert "Looked through the runs created since" in page
    # Newest first, each once, found across the windows of 4, 4 and 2 runs.
    assert seen == [made[7].pk, made[1].pk]
    assert pages == 3


def test_the_policy_filter_shows_a_labels_bidi_controls_as_inert_visible_text(client, auditor):
    make_policy_version(label="<b>bold</b>\u202ex")
    client.force_login(auditor)

    page = client.get("/runs/").content.decode()

    assert "\u202e" not in page
    assert "&lt;b&gt;bold&lt;/b&gt;[U+202E]x" in page
