"""The admins' monitoring page: figures computed by hand on small fixtures."""

import math
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from escalations.models import ExampleSource, LabelledExample, Verdict
from guardian_core import monitoring
from runs.models import Decision, DecisionOutcome
from tests.factories import (
    backdate,
    make_decision,
    make_escalation,
    make_policy_version,
    make_run,
    make_turn,
)


def test_kappa_and_confusion_matrix_match_hand_computation():
    # truth T,T,F,F vs guardian T,F,F,F: p_o = 3/4, p_e = .5·.25 + .5·.75 = .5, κ = .5
    result = monitoring.agreement([True, True, False, False], [True, False, False, False])
    assert result.n == 4
    assert result.matrix == [[2, 0], [1, 1]]
    assert result.kappa == pytest.approx(0.5)


def test_kappa_is_undefined_when_both_raters_use_one_class():
    assert monitoring.agreement([True, True], [True, True]).kappa is None


def test_psi_matches_hand_computation():
    assert monitoring.psi([50, 50] + [0] * 8, [50, 50] + [0] * 8) == pytest.approx(0.0)
    # (.9-.5)·ln(.9/.5) + (.1-.5)·ln(.1/.5)
    expected = 0.4 * math.log(1.8) + 0.4 * math.log(5)
    assert monitoring.psi([5, 5] + [0] * 8, [9, 1] + [0] * 8) == pytest.approx(expected)
    assert monitoring.psi([0] * 10, [1] + [0] * 9) is None


def test_suggested_t_star_minimises_expected_cost():
    pairs = [(0.2, False), (0.3, True), (0.8, True)]
    assert monitoring.suggested_t_star(pairs, 1.0, 1.0) == (0.21, 0.0)
    # a threshold above 0.3 misses one positive (cost 1 of 3 examples)
    assert monitoring.expected_cost(pairs, 0.5, 1.0, 1.0) == pytest.approx(1 / 3)


def _decisions_today(outcomes_and_p):
    run = make_run()
    for index, (outcome, p) in enumerate(outcomes_and_p):
        make_decision(
            turn=make_turn(run=run, index=index), outcome=outcome, answers={"integrity": p}
        )
    return run


@pytest.mark.django_db
def test_escalation_rate_histogram_and_capacity_banner():
    _decisions_today(
        [
            (DecisionOutcome.CONTINUE, 0.05),
            (DecisionOutcome.CONTINUE, 0.05),
            (DecisionOutcome.ESCALATE, 0.15),
            (DecisionOutcome.CONTINUE, 0.95),
        ]
    )
    days = monitoring.decision_days()
    assert len(days) == monitoring.WINDOW_DAYS
    today = days[-1]
    assert (today.decisions, today.escalations) == (4, 1)
    assert today.escalation_rate == pytest.approx(0.25)
    assert today.counts["integrity"] == [2, 1, 0, 0, 0, 0, 0, 0, 0, 1]
    # 1 escalation in 24 h ≈ 0.042 per hour
    assert any("capacity" in b for b in monitoring.banners(days, capacity_per_hour=0.01))
    assert not any("capacity" in b for b in monitoring.banners(days, capacity_per_hour=1.0))


@pytest.mark.django_db
def test_shift_banner_compares_last_day_with_the_seven_before():
    _decisions_today([(DecisionOutcome.CONTINUE, 0.05)] * 2)
    run = _decisions_today([(DecisionOutcome.CONTINUE, 0.95)] * 2)
    backdate(Decision.objects.filter(turn__run=run), created_at=timezone.now() - timedelta(days=2))
    days = monitoring.decision_days()
    # previous 7 days: all in bin 9; last day: all in bin 0 → a very large PSI
    assert monitoring.shift(days, "integrity") > monitoring.PSI_THRESHOLD
    assert any("integrity: the probabilities shifted" in b for b in monitoring.banners(days))


@pytest.mark.django_db
def test_decisions_outside_the_window_are_not_counted():
    run = _decisions_today([(DecisionOutcome.ESCALATE, 0.5)])
    backdate(Decision.objects.filter(turn__run=run), created_at=timezone.now() - timedelta(days=30))
    assert sum(day.decisions for day in monitoring.decision_days()) == 0


def _label(probability, label, source=ExampleSource.HUMAN, verdict=None):
    LabelledExample.objects.create(
        verdict=verdict,
        condition="integrity",
        projection={},
        probability=probability,
        label=label,
        source=source,
        question_set_version="q",
        model_version="m",
    )


@pytest.mark.django_db
def test_page_shows_agreement_svg_and_escapes(client, admin):
    make_policy_version(
        is_active=True,
        thresholds={"integrity": {"c_stop": 1, "c_cont": 1, "delta": 0.05}},
    )
    # t* = 0.5: truth T,T,F,F vs guardian T,F,F,F → κ 0.5
    for p, label in [(0.9, True), (0.2, True), (0.1, False), (0.3, False)]:
        _label(p, label)
    _label(0.9, False, source=ExampleSource.JUDGE)  # not a reviewer's label: ignored
    _decisions_today([(DecisionOutcome.ESCALATE, 0.6)])
    client.force_login(admin)
    response = client.get(reverse("policies:monitoring"))
    assert response.status_code == 200
    html = response.content.decode()
    assert "<svg" in html
    assert "<rect" in html
    assert "Cohen&#x27;s κ = 0.500" in html or "Cohen's κ = 0.500" in html
    assert "<td>2</td><td>0</td>" in html
    assert "<td>1</td><td>1</td>" in html
    assert "GUARDIAN_REVIEWER_CAPACITY_PER_HOUR" in html


@pytest.mark.django_db
def test_page_is_for_admins_only(client, reviewer, auditor):
    for user in (reviewer, auditor):
        client.force_login(user)
        assert client.get(reverse("policies:monitoring")).status_code == 403


@pytest.mark.django_db
def test_judge_vs_reviewers_reads_the_judge_answer_of_the_escalated_turn(reviewer):
    # (judge's P(yes), reviewer's label): at t* 0.5 the judge says T,F,T; reviewers T,F,F
    for judge_p, label in [(0.9, True), (0.1, False), (0.7, False)]:
        turn = make_turn()  # a run of its own: one open escalation per run
        make_decision(
            turn=turn,
            outcome=DecisionOutcome.ESCALATE,
            answers={"integrity": 0.5, "judge": {"answers": {"integrity": judge_p}}},
        )
        verdict = Verdict.objects.create(
            escalation=make_escalation(turn=turn), decision="approve", reviewer=reviewer
        )
        _label(0.5, label, verdict=verdict)
    _label(0.5, True)  # no verdict, so no judge answer: left out of judge vs reviewers
    result = monitoring.judge_vs_reviewers("integrity", 0.5)
    assert result.n == 3
    assert result.matrix == [[1, 1], [0, 1]]
    # p_o = 2/3, p_e = (2/3)(1/3) + (1/3)(2/3) = 4/9, κ = (2/3 - 4/9) / (5/9) = 0.4
    assert result.kappa == pytest.approx(0.4)
    assert monitoring.guardian_vs_reviewers("integrity", 0.5).n == 4
