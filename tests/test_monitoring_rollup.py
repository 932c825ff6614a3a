"""The monitoring page's days are folded from the decision log once, in id order, by a pass that
never steps past a decision still settling — so the page reads a window of day rows, not every
decision, and what it shows is what the log holds."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from policies import monitoring, tasks
from policies.models import MonitoringCursor, MonitoringDay
from runs.models import Decision, DecisionOutcome
from tests.factories import backdate, make_decision, make_run, make_turn

pytestmark = pytest.mark.django_db


def _decisions(ps: list[float], *, outcome=DecisionOutcome.CONTINUE, ago=timedelta(minutes=5)):
    run = make_run()
    made = [
        make_decision(turn=make_turn(run=run, index=i), outcome=outcome, answers={"integrity": p})
        for i, p in enumerate(ps)
    ]
    backdate(Decision.objects.filter(pk__in=[d.pk for d in made]), created_at=timezone.now() - ago)
    return made


def _day_of(decision: Decision) -> MonitoringDay:
    # The decision's own day, not today's: a run of the suite just after midnight backdates
    # decisions into yesterday.
    decision.refresh_from_db()
    return MonitoringDay.objects.get(day=timezone.localdate(decision.created_at))


def _folded() -> int:
    return sum(MonitoringDay.objects.values_list("decisions", flat=True))


def test_a_pass_folds_each_decision_into_its_day_once():
    [first, *_] = _decisions([0.05, 0.05, 0.95])
    _decisions([0.15], outcome=DecisionOutcome.ESCALATE)

    assert monitoring.monitoring_catch_up() == 4
    assert monitoring.monitoring_catch_up() == 0  # caught up: nothing counted twice

    today = _day_of(first)
    assert (today.decisions, today.escalations) == (4, 1)
    assert today.counts["integrity"] == [2, 1, 0, 0, 0, 0, 0, 0, 0, 1]
    assert today.fine["integrity"] == {"500": 2, "1500": 1, "9500": 1}


def test_folding_in_small_batches_gives_the_days_one_pass_gives():
    ps = [0.01, 0.2, 0.33, 0.5, 0.77, 0.9, 0.99]
    _decisions(ps, ago=timedelta(days=1, minutes=5))
    _decisions(ps[:3])
    while monitoring.monitoring_catch_up(limit=2):
        pass
    batched = {
        row.day: (row.decisions, row.counts, row.fine) for row in MonitoringDay.objects.all()
    }

    MonitoringDay.objects.all().delete()
    MonitoringCursor.objects.all().delete()
    monitoring.monitoring_catch_up(limit=100)
    once = {row.day: (row.decisions, row.counts, row.fine) for row in MonitoringDay.objects.all()}

    assert batched == once
    assert sorted(decisions for decisions, _, _ in once.values()) == [3, 7]


def test_a_pass_stops_at_a_decision_still_settling_and_never_steps_past_it(settings):
    settings.GUARDIAN_MONITORING_SETTLE_SECONDS = 60
    [settled] = _decisions([0.05])
    [young] = _decisions([0.5], ago=timedelta(seconds=5))
    [older_but_later] = _decisions([0.95], ago=timedelta(minutes=5))

    assert monitoring.monitoring_catch_up() == 1
    assert MonitoringCursor.objects.get().last_decision_id == settled.pk
    assert young.pk < older_but_later.pk

    later = timezone.now() + timedelta(minutes=2)
    assert monitoring.monitoring_catch_up(now=later) == 2
    assert _folded() == 3


def test_the_page_reads_day_rows_whatever_the_number_of_decisions(client, admin, settings):
    settings.GUARDIAN_MONITORING_SETTLE_SECONDS = 0
    client.force_login(admin)
    _decisions([0.05] * 3)
    client.get(reverse("policies:monitoring"))  # folds them
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("policies:monitoring"))
    _decisions([0.05, 0.95] * 40)
    monitoring.monitoring_catch_up()
    with CaptureQueriesContext(connection) as many:
        body = client.get(reverse("policies:monitoring")).content.decode()

    assert len(many) == len(few)
    assert "the recent 83 turns" in body  # every folded decision is on the page


def test_the_beat_task_folds_a_backlog_batch_after_batch(monkeypatch):
    monkeypatch.setattr(monitoring, "FOLD_BATCH", 2)
    _decisions([0.05] * 5)

    assert tasks.monitoring_catch_up() == 5  # three batches in one pass
    assert _folded() == 5
    assert MonitoringCursor.objects.get().last_decision_id == Decision.objects.latest("pk").pk


def test_rates_per_hour_count_from_the_days_first_decision_not_from_midnight():
    now = timezone.now()
    if timezone.localtime(now).hour < 3:
        now += timedelta(hours=3)  # two hours back must still be today
    run = make_run()
    escalated = [
        make_decision(
            turn=make_turn(run=run, index=i),
            outcome=DecisionOutcome.ESCALATE,
            answers={"integrity": 0.15},
        )
        for i in range(3)
    ]
    backdate(Decision.objects.filter(pk=escalated[0].pk), created_at=now - timedelta(hours=2))
    backdate(
        Decision.objects.filter(pk__in=[d.pk for d in escalated[1:]]),
        created_at=now - timedelta(minutes=30),
    )
    days = monitoring.decision_days(now=now)

    assert days[-1].first_at == now - timedelta(hours=2)
    assert monitoring.escalations_per_hour(days[-1], now=now) == pytest.approx(1.5)
    assert monitoring.traffic(days, now=now).hours == pytest.approx(2.0)
    banners = monitoring.banners(days, capacity_per_hour=1, now=now)
    assert any("1.50 escalations per hour" in b for b in banners)
    assert not monitoring.banners(days, capacity_per_hour=2, now=now)
