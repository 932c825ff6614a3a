"""Claiming escalations and reading the reviewers' queue: "next" and opening an item claim it,
a claim lapses, skip, release and logout let go of it, the holder extends a deadline once;
filters and keyset pages never show an item twice or lose one; and twenty reviewers claiming
at once on PostgreSQL never share an item."""

import threading
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from escalations.claims import (
    escalation_claim,
    escalation_claim_next,
    escalation_extend_deadline,
    escalation_release,
    escalation_release_all,
)
from escalations.errors import EscalationError
from escalations.models import (
    Escalation,
    EscalationEvent,
    EscalationEventKind,
    EscalationKind,
    EscalationStatus,
)
from escalations.queue import (
    QueueFilters,
    escalation_counts_by_kind,
    escalation_queue,
    escalation_queue_stamp,
    queue_filters_from,
)
from tests.factories import make_escalation

pytestmark = pytest.mark.django_db


def _open(minutes: float = 60, **fields) -> Escalation:
    """An open escalation (each on a run of its own: a run has one open escalation at most)."""
    fields.setdefault("deadline", timezone.now() + timedelta(minutes=minutes))
    return make_escalation(**fields)


def _close(escalation: Escalation) -> None:
    """Stand-in for a verdict: the item leaves the queue."""
    Escalation.objects.filter(pk=escalation.pk).update(
        status=EscalationStatus.APPROVED, resolved_at=timezone.now()
    )


def _events(escalation: Escalation) -> list[tuple[str, str | None]]:
    return [
        (kind, actor)
        for kind, actor in EscalationEvent.objects.filter(escalation=escalation)
        .order_by("id")
        .values_list("kind", "actor__username")
    ]


def _lapse(escalation: Escalation) -> None:
    Escalation.objects.filter(pk=escalation.pk).update(
        claim_expires_at=timezone.now() - timedelta(seconds=1)
    )


def _all_pages(reviewer, filters: QueueFilters, limit: int) -> list[list[int]]:
    pages, after = [], None
    while True:
        page = escalation_queue(reviewer=reviewer, filters=filters, after=after, limit=limit)
        pages.append([e.pk for e in page.items])
        if page.next_cursor is None:
            return pages
        after = page.next_cursor


# ---- next, open, release, skip ------------------------------------------------------------


def test_next_claims_irreversible_steps_first_then_the_nearest_deadline_then_the_oldest(
    reviewer,
):
    late_gate = _open(minutes=90, urgency=0)
    soon_other = _open(minutes=5, urgency=1)
    same_deadline = timezone.now() + timedelta(minutes=30)
    first_of_two = _open(urgency=0, deadline=same_deadline)
    second_of_two = _open(urgency=0, deadline=same_deadline)
    order = []
    for _ in range(4):
        claim = escalation_claim_next(reviewer=reviewer)
        assert claim.status == "claimed"
        order.append(claim.escalation.pk)
        _close(claim.escalation)
    assert order == [first_of_two.pk, second_of_two.pk, late_gate.pk, soon_other.pk]
    assert escalation_claim_next(reviewer=reviewer).status == "empty"


def test_next_records_the_claim_with_its_holder_time_and_expiry(reviewer, settings):
    settings.GUARDIAN_CLAIM_MINUTES = 15
    escalation = _open()
    before = timezone.now()
    claim = escalation_claim_next(reviewer=reviewer)
    escalation.refresh_from_db()
    assert (claim.status, claim.holder, claim.escalation.pk) == ("claimed", reviewer, escalation.pk)
    assert escalation.claimed_by == reviewer
    assert before <= escalation.claimed_at == claim.since
    assert escalation.claim_expires_at == escalation.claimed_at + timedelta(minutes=15)
    assert _events(escalation) == [("claimed", "reviewer")]


def test_next_passes_over_items_someone_else_holds_but_takes_a_lapsed_claim(
    reviewer, other_reviewer
):
    held = _open(minutes=5)
    lapsed = _open(minutes=10)
    an_hour_ago = timezone.now() - timedelta(hours=1)
    # A reviewer who went to lunch: their claim ran out and nobody released it.
    Escalation.objects.filter(pk=lapsed.pk).update(
        claimed_by=other_reviewer, claimed_at=an_hour_ago, claim_expires_at=an_hour_ago
    )
    assert escalation_claim(escalation_id=held.pk, reviewer=other_reviewer).status == "claimed"
    claim = escalation_claim_next(reviewer=reviewer)
    assert claim.escalation.pk == lapsed.pk
    held.refresh_from_db()
    assert held.claimed_by == other_reviewer


def test_next_with_nothing_else_left_gives_the_reviewer_their_own_item_back(reviewer):
    mine = _open()
    escalation_claim(escalation_id=mine.pk, reviewer=reviewer)
    claim = escalation_claim_next(reviewer=reviewer)
    assert (claim.status, claim.escalation.pk) == ("claimed", mine.pk)
    mine.refresh_from_db()
    assert mine.claimed_by == reviewer


def test_next_while_holding_an_item_reopens_it_instead_of_releasing_it(reviewer):
    """A reviewer back on the queue who presses n again returns to the item they hold: they
    move past it by deciding or skipping it, not by a second key press."""
    first, second = _open(minutes=5), _open(minutes=10)
    escalation_claim_next(reviewer=reviewer)
    claim = escalation_claim_next(reviewer=reviewer)
    assert (claim.status, claim.escalation.pk) == ("claimed", first.pk)
    second.refresh_from_db()
    assert second.claimed_by is None
    assert _events(first) == [("claimed", "reviewer")]

    escalation_release(escalation_id=first.pk, reviewer=reviewer, skipped=True)
    assert escalation_claim_next(reviewer=reviewer).escalation.pk == second.pk


def test_opening_another_item_releases_the_one_the_reviewer_held(reviewer):
    first, second = _open(minutes=5), _open(minutes=10)
    escalation_claim_next(reviewer=reviewer)
    claim = escalation_claim(escalation_id=second.pk, reviewer=reviewer)
    assert claim.status == "claimed"
    first.refresh_from_db()
    assert first.claimed_by is None
    assert _events(first) == [("claimed", "reviewer"), ("released", "reviewer")]


def test_next_honours_the_filters_and_sort_the_reviewer_sees(reviewer):
    _open(minutes=5, kind=EscalationKind.UNCERTAIN, urgency=1)
    refund = _open(minutes=50, tools=",issue_refund,", urgency=0)
    _open(minutes=40, tools=",send_email,", urgency=0)
    claim = escalation_claim_next(reviewer=reviewer, filters=QueueFilters(tool="issue_refund"))
    assert claim.escalation.pk == refund.pk
    _close(claim.escalation)
    claim = escalation_claim_next(reviewer=reviewer, filters=QueueFilters(sort="deadline"))
    assert claim.escalation.kind == EscalationKind.UNCERTAIN


def test_opening_an_item_claims_it_and_releases_the_one_held_before(reviewer):
    first, second = _open(), _open()
    assert escalation_claim(escalation_id=first.pk, reviewer=reviewer).status == "claimed"
    claim = escalation_claim(escalation_id=second.pk, reviewer=reviewer)
    assert (claim.status, claim.holder) == ("claimed", reviewer)
    first.refresh_from_db()
    assert first.claimed_by is None


def test_opening_an_item_someone_else_holds_says_who_and_since_when_and_changes_nothing(
    reviewer, other_reviewer
):
    escalation = _open()
    taken = escalation_claim(escalation_id=escalation.pk, reviewer=other_reviewer)
    claim = escalation_claim(escalation_id=escalation.pk, reviewer=reviewer)
    assert (claim.status, claim.holder, claim.since) == ("held", other_reviewer, taken.since)
    escalation.refresh_from_db()
    assert escalation.claimed_by == other_reviewer
    assert _events(escalation) == [("claimed", "other_reviewer")]


def test_opening_the_item_one_holds_renews_the_claim_without_a_new_event(reviewer):
    escalation = _open()
    first = escalation_claim(escalation_id=escalation.pk, reviewer=reviewer)
    Escalation.objects.filter(pk=escalation.pk).update(
        claim_expires_at=timezone.now() + timedelta(seconds=5)
    )
    again = escalation_claim(escalation_id=escalation.pk, reviewer=reviewer)
    escalation.refresh_from_db()
    assert again.since == first.since
    assert escalation.claim_expires_at > timezone.now() + timedelta(minutes=1)
    assert _events(escalation) == [("claimed", "reviewer")]


def test_opening_a_decided_item_says_closed(reviewer):
    escalation = _open()
    _close(escalation)
    claim = escalation_claim(escalation_id=escalation.pk, reviewer=reviewer)
    assert claim.status == "closed"
    assert claim.escalation.status == EscalationStatus.APPROVED
    assert _events(escalation) == []


def test_opening_an_unknown_item_raises_does_not_exist(reviewer):
    with pytest.raises(Escalation.DoesNotExist):
        escalation_claim(escalation_id=987654, reviewer=reviewer)


def test_only_reviewers_can_claim(outsider):
    escalation = _open()
    with pytest.raises(EscalationError, match="may not review"):
        escalation_claim_next(reviewer=outsider)
    with pytest.raises(EscalationError, match="may not review"):
        escalation_claim(escalation_id=escalation.pk, reviewer=outsider)
    escalation.refresh_from_db()
    assert escalation.claimed_by is None


def test_release_lets_go_of_ones_own_claim_only(reviewer, other_reviewer):
    escalation = _open()
    escalation_claim(escalation_id=escalation.pk, reviewer=other_reviewer)
    escalation_release(escalation_id=escalation.pk, reviewer=reviewer)
    escalation.refresh_from_db()
    assert escalation.claimed_by == other_reviewer
    escalation_release(escalation_id=escalation.pk, reviewer=other_reviewer, note="later")
    escalation.refresh_from_db()
    assert (escalation.claimed_by, escalation.claimed_at, escalation.claim_expires_at) == (
        None,
        None,
        None,
    )
    assert _events(escalation) == [("claimed", "other_reviewer"), ("released", "other_reviewer")]


def test_skip_puts_the_item_back_records_why_and_next_does_not_hand_it_back(
    reviewer, other_reviewer
):
    urgent, later = _open(minutes=5), _open(minutes=50)
    claim = escalation_claim_next(reviewer=reviewer)
    assert claim.escalation.pk == urgent.pk
    escalation_release(
        escalation_id=urgent.pk, reviewer=reviewer, note="needs the refunds team", skipped=True
    )
    skip = EscalationEvent.objects.get(escalation=urgent, kind=EscalationEventKind.SKIPPED)
    assert (skip.actor, skip.note) == (reviewer, "needs the refunds team")
    assert escalation_claim_next(reviewer=reviewer).escalation.pk == later.pk
    # Back in the queue for everyone else.
    assert escalation_claim_next(reviewer=other_reviewer).escalation.pk == urgent.pk


def test_a_lapsed_claim_counts_as_unclaimed_everywhere(reviewer, other_reviewer):
    escalation = _open()
    escalation_claim(escalation_id=escalation.pk, reviewer=other_reviewer)
    _lapse(escalation)
    unclaimed = escalation_queue(reviewer=reviewer, filters=QueueFilters(holder="unclaimed"))
    assert [e.pk for e in unclaimed.items] == [escalation.pk]
    mine = escalation_queue(reviewer=other_reviewer, filters=QueueFilters(holder="mine"))
    assert mine.items == []
    claim = escalation_claim(escalation_id=escalation.pk, reviewer=reviewer)
    assert claim.status == "claimed"


# ---- logout -------------------------------------------------------------------------------


def test_signing_out_releases_what_the_reviewer_held(client, reviewer, other_reviewer):
    mine, theirs = _open(), _open()
    escalation_claim(escalation_id=mine.pk, reviewer=reviewer)
    escalation_claim(escalation_id=theirs.pk, reviewer=other_reviewer)
    client.force_login(reviewer)
    response = client.post(reverse("logout"))
    assert response.status_code in (200, 302)
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.claimed_by is None
    assert theirs.claimed_by == other_reviewer
    assert _events(mine)[-1] == ("released", "reviewer")


def test_release_all_counts_what_it_released(reviewer):
    escalation = _open()
    escalation_claim(escalation_id=escalation.pk, reviewer=reviewer)
    assert escalation_release_all(reviewer=reviewer) == 1
    assert escalation_release_all(reviewer=reviewer) == 0


# ---- deadline extension -------------------------------------------------------------------


def test_the_holder_extends_the_deadline_once_by_the_configured_amount(reviewer, settings):
    settings.GUARDIAN_DEADLINE_EXTENSION_MINUTES = 60
    escalation = _open(minutes=10)
    escalation_claim(escalation_id=escalation.pk, reviewer=reviewer)
    extended = escalation_extend_deadline(escalation_id=escalation.pk, reviewer=reviewer)
    assert extended.deadline == escalation.deadline + timedelta(minutes=60)
    assert extended.deadline_extended
    assert _events(escalation)[-1] == ("extended", "reviewer")
    with pytest.raises(EscalationError, match="already extended once"):
        escalation_extend_deadline(escalation_id=escalation.pk, reviewer=reviewer)
    escalation.refresh_from_db()
    assert escalation.deadline == extended.deadline


def test_only_the_holder_may_extend_and_the_refusal_names_who_holds_it(reviewer, other_reviewer):
    escalation = _open(minutes=10)
    with pytest.raises(EscalationError, match="open the item first"):
        escalation_extend_deadline(escalation_id=escalation.pk, reviewer=reviewer)
    escalation_claim(escalation_id=escalation.pk, reviewer=other_reviewer)
    with pytest.raises(EscalationError, match="other_reviewer holds it since"):
        escalation_extend_deadline(escalation_id=escalation.pk, reviewer=reviewer)
    escalation.refresh_from_db()
    assert not escalation.deadline_extended


def test_a_closed_or_overdue_item_is_never_extended(reviewer):
    overdue = _open(minutes=-1)
    escalation_claim(escalation_id=overdue.pk, reviewer=reviewer)
    with pytest.raises(EscalationError, match="it has passed"):
        escalation_extend_deadline(escalation_id=overdue.pk, reviewer=reviewer)
    decided = _open(minutes=10)
    escalation_claim(escalation_id=decided.pk, reviewer=reviewer)
    _close(decided)
    with pytest.raises(EscalationError, match="already approved"):
        escalation_extend_deadline(escalation_id=decided.pk, reviewer=reviewer)
    for escalation in (overdue, decided):
        before = escalation.deadline
        escalation.refresh_from_db()
        assert (escalation.deadline, escalation.deadline_extended) == (before, False)


# ---- the queue: filters, pages, counts, stamp ---------------------------------------------


def test_queue_filters_from_names_every_bad_field_and_keeps_the_good_ones():
    filters, problems = queue_filters_from(
        {
            "kind": "gated_step",
            "condition": "vibes",
            "tool": "a,b",
            "run": "12x",
            "holder": "everyone",
            "sort": "random",
            "after": "not-a-cursor",
        }
    )
    assert filters == QueueFilters(kind="gated_step")
    fields = [problem.split(":")[0] for problem in problems]
    assert fields == ["condition", "tool", "run", "holder", "sort", "after"]


def test_queue_filters_from_reads_a_valid_query():
    filters, problems = queue_filters_from(
        {
            "kind": "uncertain",
            "condition": "risk",
            "tool": "issue_refund",
            "run": "42",
            "holder": "mine",
            "sort": "oldest",
        }
    )
    assert problems == []
    assert filters == QueueFilters(
        kind="uncertain",
        condition="risk",
        tool="issue_refund",
        run=42,
        holder="mine",
        sort="oldest",
    )


def test_queue_filters_by_kind_condition_tool_run_and_holder(reviewer, other_reviewer):
    gate = _open(tools=",issue_refund,send_email,", conditions=",gate,", urgency=0)
    risk = _open(kind=EscalationKind.UNCERTAIN, conditions=",risk,drift,")
    # ",refund," must not match ",issue_refund,": names are matched whole.
    other_tool = _open(tools=",refund,")
    mine = _open()
    theirs = _open()
    escalation_claim(escalation_id=mine.pk, reviewer=reviewer)
    escalation_claim(escalation_id=theirs.pk, reviewer=other_reviewer)

    def ids(**filters) -> set[int]:
        page = escalation_queue(reviewer=reviewer, filters=QueueFilters(**filters))
        return {e.pk for e in page.items}

    everything = {gate.pk, risk.pk, other_tool.pk, mine.pk, theirs.pk}
    assert ids() == everything
    assert ids(kind="uncertain") == {risk.pk}
    assert ids(condition="drift") == {risk.pk}
    assert ids(condition="gate") == {gate.pk}
    assert ids(tool="send_email") == {gate.pk}
    assert ids(tool="refund") == {other_tool.pk}
    assert ids(run=risk.run_id) == {risk.pk}
    assert ids(holder="mine") == {mine.pk}
    assert ids(holder="unclaimed") == everything - {mine.pk, theirs.pk}
    assert ids(kind="uncertain", tool="send_email") == set()


@pytest.mark.parametrize("sort", ["urgent", "deadline", "oldest"])
def test_keyset_pages_show_every_item_once_even_with_equal_deadlines(reviewer, sort):
    shared = timezone.now() + timedelta(minutes=30)
    expected = [_open(deadline=shared, urgency=i % 2).pk for i in range(7)]
    expected += [_open(minutes=10 + i, urgency=i % 2).pk for i in range(6)]
    pages = _all_pages(reviewer, QueueFilters(sort=sort), limit=4)
    seen = [pk for page in pages for pk in page]
    assert sorted(seen) == sorted(expected)
    assert [len(page) for page in pages] == [4, 4, 4, 1]
    single = escalation_queue(reviewer=reviewer, filters=QueueFilters(sort=sort), limit=100)
    assert seen == [e.pk for e in single.items]  # the pages, joined, are the queue's order


def test_items_closing_or_arriving_between_pages_neither_repeat_nor_hide_the_rest(reviewer):
    items = [_open(minutes=10 + i) for i in range(6)]
    filters = QueueFilters(sort="deadline")
    first = escalation_queue(reviewer=reviewer, filters=filters, limit=3)
    assert [e.pk for e in first.items] == [e.pk for e in items[:3]]
    _close(items[1])  # decided by someone while this reviewer reads page 1
    _close(items[3])  # the first item of page 2 goes too
    arrived_earlier = _open(minutes=1)  # sorts before the cursor: page 1 would show it
    second = escalation_queue(reviewer=reviewer, filters=filters, after=first.next_cursor)
    assert [e.pk for e in second.items] == [items[4].pk, items[5].pk]
    assert arrived_earlier.pk not in [e.pk for e in second.items]


def test_a_page_is_bounded_and_costs_one_query(reviewer, other_reviewer):
    for i in range(5):
        escalation = _open(minutes=10 + i)
        escalation_claim(escalation_id=escalation.pk, reviewer=other_reviewer)
        escalation_release(escalation_id=escalation.pk, reviewer=other_reviewer)
    held = _open(minutes=1)
    escalation_claim(escalation_id=held.pk, reviewer=other_reviewer)
    with CaptureQueriesContext(connection) as queries:
        page = escalation_queue(reviewer=reviewer, filters=QueueFilters(), limit=2)
        for item in page.items:
            _ = (item.run.goal, item.claimed_by)
    assert len(queries) == 1
    assert len(page.items) == 2
    assert page.items[0].claimed_by == other_reviewer
    assert len(escalation_queue(reviewer=reviewer, filters=QueueFilters(), limit=10**6).items) == 6


def test_a_cursor_of_another_sort_or_a_forged_one_is_refused(reviewer):
    for i in range(3):
        _open(minutes=10 + i)
    page = escalation_queue(reviewer=reviewer, filters=QueueFilters(), limit=1)
    _, problems = queue_filters_from({"sort": "oldest", "after": page.next_cursor})
    assert problems == ["after: not a page of this order of the queue; start from the first page"]
    with pytest.raises(ValueError, match="after"):
        escalation_queue(reviewer=reviewer, filters=QueueFilters(sort="oldest"), after="eyJ4Ijox")
    assert queue_filters_from({"after": page.next_cursor}) == (QueueFilters(), [])


def test_counts_by_kind_name_every_kind_and_count_open_items_only():
    for _ in range(2):
        _open()
    _open(kind=EscalationKind.INTEGRITY)
    _close(_open(kind=EscalationKind.INTEGRITY))
    counts = escalation_counts_by_kind()
    assert set(counts) == set(EscalationKind.values)
    assert counts["gated_step"] == 2
    assert counts["integrity"] == 1
    assert counts["uncertain"] == 0


def test_counts_follow_arrivals_and_closings_through_their_cache(
    reviewer, django_assert_num_queries
):
    first = _open()
    assert escalation_counts_by_kind()["gated_step"] == 1
    escalation_claim(escalation_id=first.pk, reviewer=reviewer)  # a claim moves no count
    with django_assert_num_queries(1):  # the queue's state, not a count
        assert escalation_counts_by_kind()["gated_step"] == 1
    _open()
    assert escalation_counts_by_kind()["gated_step"] == 2
    _close(first)
    assert escalation_counts_by_kind()["gated_step"] == 1


def test_an_escalation_committed_after_a_later_one_still_changes_the_stamp():
    """Two workers open escalations at once and the lower id commits last: the highest id
    does not move, the stamp must."""
    _open()
    latest = _open()
    earlier_id = latest.pk - 1
    Escalation.objects.filter(pk=earlier_id).delete()
    before = escalation_queue_stamp()
    make_escalation(pk=earlier_id)
    assert escalation_queue_stamp() != before


def test_the_stamp_changes_on_every_change_of_the_queue(reviewer, other_reviewer):
    escalation = _open()
    stamps = [escalation_queue_stamp()]

    def changed(what: str) -> None:
        stamp = escalation_queue_stamp()
        assert stamp not in stamps, what
        stamps.append(stamp)

    assert escalation_queue_stamp() == stamps[-1]  # nothing happened: the same stamp
    second = _open()
    changed("an escalation arrived")
    escalation_claim(escalation_id=escalation.pk, reviewer=reviewer)
    changed("claimed")
    escalation_extend_deadline(escalation_id=escalation.pk, reviewer=reviewer)
    changed("extended")
    escalation_release(escalation_id=escalation.pk, reviewer=reviewer, skipped=True)
    changed("skipped")
    escalation_claim(escalation_id=second.pk, reviewer=other_reviewer)
    changed("claimed by another")
    _lapse(second)
    changed("their claim lapsed")
    Escalation.objects.filter(pk=escalation.pk).update(
        status=EscalationStatus.CANCELLED, resolved_at=timezone.now()
    )
    changed("closed without an event (a cancelled run)")


# ---- twenty reviewers at once ---------------------------------------------------------------

CLAIMERS = 20
ITEMS = 30


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgresql(
    reason="SKIP LOCKED and concurrent writers: SQLite has no SKIP LOCKED and serialises "
    "every writer, so there is no race to test there"
)
def test_twenty_reviewers_claiming_at_once_never_share_an_item_and_lose_none(
    django_user_model,
):
    group = Group.objects.get(name="reviewer")
    reviewers = []
    for i in range(CLAIMERS):
        user = django_user_model.objects.create_user(username=f"claimer{i}", password="x")
        user.groups.add(group)
        reviewers.append(user)
    shared = timezone.now() + timedelta(minutes=30)  # many equal keys: the hardest order
    items = {_open(deadline=shared, urgency=i % 2).pk for i in range(ITEMS)}
    start = threading.Barrier(CLAIMERS)
    claimed: dict[int, list[int]] = {user.pk: [] for user in reviewers}
    errors: list[BaseException] = []

    def work(user) -> None:
        try:
            start.wait(timeout=30)
            while True:
                claim = escalation_claim_next(reviewer=user)
                if claim.status == "empty":
                    return
                assert claim.status == "claimed"
                claimed[user.pk].append(claim.escalation.pk)
                _close(claim.escalation)  # decided: on to the next
        except BaseException as exc:  # noqa: BLE001 - the test reports every error
            errors.append(exc)
        finally:
            connections.close_all()  # each thread had its own connection

    threads = [threading.Thread(target=work, args=(user,)) for user in reviewers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads), "a claimer hung"
    assert errors == []
    every_claim = [pk for pks in claimed.values() for pk in pks]
    assert len(every_claim) == len(set(every_claim)) == ITEMS, "an item was claimed twice"
    assert set(every_claim) == items, "an item was lost"
    assert sum(1 for pks in claimed.values() if pks) > 1, "the claimers did not overlap"
    events = EscalationEvent.objects.filter(escalation_id__in=items)
    assert events.filter(kind=EscalationEventKind.CLAIMED).count() == ITEMS
    assert not events.exclude(kind=EscalationEventKind.CLAIMED).exists()
    # The database agrees with what the threads saw: each item's holder is its one claimer.
    holders = dict(Escalation.objects.filter(pk__in=items).values_list("pk", "claimed_by_id"))
    assert holders == {pk: user for user, pks in claimed.items() for pk in pks}


@pytest.mark.django_db
def test_next_says_why_it_opened_an_item_below_the_first_one_shown(
    client, reviewer, other_reviewer
):
    from tests.test_escalation_queue_page import queued

    first = queued(goal="first")
    second = queued(goal="second")
    escalation_claim(escalation_id=first.pk, reviewer=other_reviewer)
    client.force_login(reviewer)

    response = client.post(reverse("escalations:next"), follow=True)

    assert response.redirect_chain[-1][0] == reverse("escalations:detail", args=[second.pk])
    page = response.content.decode()
    assert (
        f"Opened #{second.pk}, not #{first.pk} at the top of the queue: "
        f"#{first.pk} is being reviewed by other_reviewer."
    ) in page


@pytest.mark.django_db
def test_next_on_the_first_item_shown_says_nothing_more(client, reviewer):
    from tests.test_escalation_queue_page import queued

    first = queued(goal="first")
    queued(goal="second")
    client.force_login(reviewer)
    response = client.post(reverse("escalations:next"), follow=True)
    assert response.redirect_chain[-1][0] == reverse("escalations:detail", args=[first.pk])
    assert "at the top of the queue" not in response.content.decode()
