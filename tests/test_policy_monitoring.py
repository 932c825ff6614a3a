"""The admins' monitoring page: figures computed by hand on small fixtures."""

import html as html_lib
import math
import re
from datetime import timedelta
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest
from django.urls import reverse
from django.utils import timezone

from demo.setup import demo_policy_version
from escalations.models import EscalationStatus, ExampleSource, LabelledExample, Verdict
from escalations.verdicts import escalation_resolve
from guardian_core.engine.conditions import Condition
from guardian_core.engine.thresholds import Threshold
from policies import monitoring
from policies.services import policy_version_create
from runs.models import Decision, DecisionOutcome, RunStatus
from tests.factories import (
    backdate,
    make_decision,
    make_escalation,
    make_policy_version,
    make_run,
    make_turn,
)
from tests.runs_helpers import drive, start


@pytest.fixture(autouse=True)
def fold_at_once(settings):
    # The rollup folds a decision once it has settled; these decisions are made just now.
    settings.GUARDIAN_MONITORING_SETTLE_SECONDS = 0


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
    # 1 escalation just now: counted over the least span (five minutes), 12 an hour
    assert any("capacity" in b for b in monitoring.banners(days, capacity_per_hour=11))
    assert not any("capacity" in b for b in monitoring.banners(days, capacity_per_hour=12.5))


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


def _label(probability, label, source=ExampleSource.HUMAN, verdict=None, condition="integrity"):
    LabelledExample.objects.create(
        verdict=verdict,
        condition=condition,
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
    for p, label in [(0.9, True), (0.2, True), (0.1, False)]:
        _label(p, label)
    _label(0.3, False, source=ExampleSource.IMPORT)  # an imported trace is a person's label too
    _label(0.9, False, source=ExampleSource.JUDGE)  # the judge's label: not a person's, ignored
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
    result = monitoring.judge_vs_reviewers(monitoring.reviewer_rows("integrity"), 0.5)
    assert result.n == 3
    assert result.matrix == [[1, 1], [0, 1]]
    # p_o = 2/3, p_e = (2/3)(1/3) + (1/3)(2/3) = 4/9, κ = (2/3 - 4/9) / (5/9) = 0.4
    assert result.kappa == pytest.approx(0.4)
    assert monitoring.guardian_vs_reviewers(monitoring.reviewer_rows("integrity"), 0.5).n == 4


@pytest.mark.django_db
def test_agreement_reads_the_newest_reviewers_labels_up_to_the_cap(client, admin, monkeypatch):
    demo_policy_version()
    for p, label in [(0.9, True), (0.1, False), (0.8, True)]:
        _label(p, label)
    newest = monitoring.reviewer_rows("integrity", limit=2)
    assert [(p, y) for p, y, _ in newest] == [(0.8, True), (0.1, False)]

    monkeypatch.setattr(monitoring, "REVIEWER_ROWS", 2)
    client.force_login(admin)
    body = client.get(reverse("policies:monitoring")).content.decode()
    assert "2 labelled examples (the newest 2 people's labels)" in body


# ---- suggested t* and δ ----------------------------------------------------------------------

# Two mixed clusters either side of 0.5 (10 positives and 10 negatives each) and clear cases far
# out: no t* separates a mixed cluster, so only a review (the band) avoids its errors.
CLUSTERS = (
    [(0.05, False)] * 10
    + [(0.475, True)] * 10
    + [(0.475, False)] * 10
    + [(0.525, True)] * 10
    + [(0.525, False)] * 10
    + [(0.95, True)] * 10
)
EVEN = {"c_stop": 1, "c_cont": 1, "delta": 0.1}


def _traffic(condition="infeasible", values=(), hours=10.0, decisions=None):
    """Recent turns: `values` are (probability, how many turns) for `condition`."""
    empty = {c.value: np.array([]) for c in Condition}
    return monitoring.Traffic(
        decisions=sum(n for _, n in values) if decisions is None else decisions,
        hours=hours,
        values={**empty, condition: np.array([p for p, _ in values], dtype=float)},
        weights={**empty, condition: np.array([n for _, n in values], dtype=float)},
    )


# 100 turns in 10 hours: 20 in each mixed cluster, so a band over both escalates 4 an hour and
# a band over one 2 an hour.
TRAFFIC = [(0.05, 50), (0.475, 20), (0.525, 20), (0.95, 10)]


@pytest.fixture
def review_share(settings):
    settings.GUARDIAN_REVIEW_COST_SHARE = 0.1
    return 0.1


def test_the_band_covers_both_mixed_clusters_when_the_reviewers_can_take_them(review_share):
    s = monitoring.suggest_thresholds(
        "infeasible", CLUSTERS, costs=EVEN, live=_traffic(values=TRAFFIC), capacity_per_hour=10
    )
    assert s.problem == ""
    # t* 0.50 ± 0.03 reviews the 40 clustered examples at 0.1 each: 4 / 60
    assert (round(s.best.t_star, 2), s.best.delta) == (0.5, 0.03)
    assert s.best.cost == pytest.approx(4 / 60)
    assert s.best.review_share == pytest.approx(40 / 60)
    assert (s.best.escalation_rate, s.best.per_hour) == (pytest.approx(0.4), pytest.approx(4.0))
    assert not s.capacity_binds
    # The version's own 0.5 ± 0.1 reviews the same 40 examples (and escalates the same turns)
    assert s.current.cost == pytest.approx(4 / 60)
    assert s.review_cost == pytest.approx(0.1)


def test_capacity_binds_and_narrows_the_band_at_the_costs_own_t_star(review_share):
    s = monitoring.suggest_thresholds(
        "infeasible", CLUSTERS, costs=EVEN, live=_traffic(values=TRAFFIC), capacity_per_hour=3
    )
    assert s.capacity_binds
    assert (round(s.unconstrained.t_star, 2), s.unconstrained.delta) == (0.5, 0.03)
    assert s.unconstrained.per_hour == pytest.approx(4.0)
    # t* stays the costs' 0.5: within 3 an hour no band may take a cluster, so the narrowest,
    # δ 0, misses the 10 positives at 0.475 and fires on the 10 negatives at 0.525: 20 / 60.
    assert (round(s.best.t_star, 2), s.best.delta) == (0.5, 0.0)
    assert s.best.cost == pytest.approx(20 / 60)
    assert s.best.per_hour == pytest.approx(0.0)
    # Moving t* to 0.47 with δ 0.01 would review one cluster and cost 12 / 60: said, as the
    # probabilities being off, not offered as a change of the costs.
    assert (round(s.cheapest_t.t_star, 2), s.cheapest_t.delta) == (0.47, 0.01)
    assert s.cheapest_t.cost == pytest.approx(12 / 60)
    assert s.miscalibrated


def test_nothing_is_suggested_when_no_band_fits_the_capacity(review_share):
    # Every turn is at 0.995, above the band, and integrity escalates when it fires too:
    # whatever δ, all 100 turns (10 an hour) reach a person.
    pairs = [(0.5, True)] * 20 + [(0.5, False)] * 20
    live = _traffic("integrity", values=[(0.995, 100)])
    s = monitoring.suggest_thresholds(
        "integrity", pairs, costs=EVEN, live=live, capacity_per_hour=1
    )
    assert s.best is None
    assert "No δ at t* 0.50 keeps integrity's escalations within 1 per hour" in s.problem


def test_the_shown_cost_is_the_cost_of_applying_the_draft_as_the_engine_does(review_share):
    costs = {"c_stop": 3, "c_cont": 5, "delta": 0.05}
    rng = np.random.default_rng(7)
    p = rng.uniform(0, 1, 200)
    pairs = [(float(v), bool(rng.uniform() < v**2)) for v in p]
    s = monitoring.suggest_thresholds(
        "infeasible", pairs, costs=costs, live=_traffic(), capacity_per_hour=10
    )
    review = 0.1 * 3
    own = Threshold(c_stop=3, c_cont=5, delta=0.0).t_star
    for candidate in (s.best, s.current):
        assert candidate.t_star == pytest.approx(own)  # the costs stay, and so does t*
        threshold = Threshold(c_stop=3, c_cont=float(candidate.c_cont), delta=candidate.delta)
        assert candidate.cost == pytest.approx(
            monitoring.expected_cost(pairs, threshold, c_stop=3, c_cont=5, review=review)
        )
    # No recent turns: the load is unknown, never taken as zero.
    assert (s.best.escalation_rate, s.best.per_hour) == (None, None)
    # The suggestion is the cheapest δ at the costs' t*, by brute force.
    brute = min(
        monitoring.expected_cost(
            pairs, Threshold(c_stop=3, c_cont=5, delta=j / 100), c_stop=3, c_cont=5, review=review
        )
        for j in range(50)
        if own - j / 100 > 0 and own + j / 100 < 1
    )
    assert s.best.cost == pytest.approx(brute)
    assert s.best.cost <= s.current.cost
    assert s.cheapest_t.cost <= s.best.cost


def test_too_few_labels_are_named_with_the_minimum_instead_of_a_suggestion(review_share):
    few = [(0.2, False), (0.3, True), (0.8, True)]
    s = monitoring.suggest_thresholds(
        "infeasible", few, costs=EVEN, live=_traffic(), capacity_per_hour=10
    )
    assert (s.best, s.current) == (None, None)
    assert s.problem == (
        "Too few people's labels to suggest from: 3 with a probability (2 positive); a "
        "suggestion needs at least 30, with at least 5 of each class."
    )
    one_class = [(0.1, False)] * 40 + [(0.9, True)] * 4
    s = monitoring.suggest_thresholds(
        "infeasible", one_class, costs=EVEN, live=_traffic(), capacity_per_hour=10
    )
    assert s.best is None
    assert "44 with a probability (4 positive)" in s.problem


def test_a_condition_without_costs_in_the_active_version_gets_no_suggestion():
    s = monitoring.suggest_thresholds(
        "drift", CLUSTERS, costs=None, live=_traffic(), capacity_per_hour=10
    )
    assert s.best is None
    assert "No active version" in s.problem


@pytest.mark.django_db
def test_traffic_counts_recent_turns_per_hour_and_a_steps_riskiest_call():
    run = make_run()
    risky = {"read_only": 0.1, "reversible_write": 0.2, "irreversible": 0.6, "regulated": 0.1}
    calm = {"read_only": 0.9, "reversible_write": 0.1, "irreversible": 0.0, "regulated": 0.0}
    make_decision(turn=make_turn(run=run, index=0), risk_answers=[calm, risky])
    make_decision(turn=make_turn(run=run, index=1), answers={"infeasible": 0.25})
    now = timezone.now()
    live = monitoring.traffic(monitoring.decision_days(now=now), now=now)
    assert live.decisions == 2
    # Both were just made: counted over five minutes (the least), not the hours since midnight.
    assert live.per_hour == pytest.approx(2 / monitoring.MIN_RATE_HOURS)
    # risk: the step's highest P(irreversible or regulated), 0.7
    assert live.values["risk"].tolist() == [pytest.approx(0.7)]
    assert live.values["infeasible"].tolist() == [0.25]
    assert live.weights["infeasible"].tolist() == [1.0]


def _suggestion_fixture():
    """An active version (infeasible 1:1, δ 0.1), the clustered labels, and 100 turns today."""
    version = make_policy_version(
        is_active=True,
        thresholds={"infeasible": {"c_stop": 1, "c_cont": 1, "delta": 0.1}},
    )
    for p, label in CLUSTERS:
        _label(p, label, condition="infeasible")
    run = make_run()
    index = 0
    for p, n in TRAFFIC:
        for _ in range(n):
            make_decision(turn=make_turn(run=run, index=index), answers={"infeasible": p})
            index += 1
    # On the window's first day, so the hours they spread over (312 to 336, whatever the time
    # of day) keep the rates fixed enough: 40 clustered turns make 0.12 an hour, 20 make 0.06.
    backdate(
        Decision.objects.filter(turn__run=run),
        created_at=timezone.now() - timedelta(days=monitoring.WINDOW_DAYS - 1),
    )
    return version


def _draft_links(html):
    return [
        html_lib.unescape(m) for m in re.findall(r'class="draft-link[^"]*" href="([^"]+)"', html)
    ]


def _suggested_row(html):
    row = re.search(
        r'<tr class="suggested"><th>Suggested</th>'
        r'<td><span class="cell-label">t\* </span>([\d.]+)</td>'
        r'<td><span class="cell-label">δ </span>([\d.]+)</td>'
        r'<td><span class="cell-label">Expected cost </span>([\d.]+)</td>',
        html,
    )
    assert row is not None
    return row.groups()


@pytest.mark.django_db
def test_page_offers_the_suggested_band_as_a_draft_that_keeps_the_costs(
    client, admin, review_share
):
    version = _suggestion_fixture()
    client.force_login(admin)
    html = client.get(reverse("policies:monitoring")).content.decode()
    assert _suggested_row(html) == ("0.500", "0.03", "0.067")
    # The other conditions have no costs in the version, so nothing to suggest from.
    assert "No active version with costs for this condition" in html
    [link] = _draft_links(html)  # one condition to change: no "every suggestion" link
    url = urlsplit(link)
    assert url.path == reverse("policies:new")
    query = parse_qs(url.query)
    assert query["from"] == [str(version.pk)]
    assert query["infeasible_delta"] == ["0.03"]
    assert not any(k.endswith(("_c_stop", "_c_cont")) for k in query)  # the costs stay


@pytest.mark.django_db
def test_the_draft_link_opens_the_editor_with_the_suggested_band(client, admin, review_share):
    _suggestion_fixture()
    client.force_login(admin)
    [link] = _draft_links(client.get(reverse("policies:monitoring")).content.decode())
    page = client.get(link)
    assert page.status_code == 200
    form = page.context["form"]
    assert (form.initial["infeasible_c_stop"], form.initial["infeasible_c_cont"]) == (1, 1)
    assert str(form.initial["infeasible_delta"]) == "0.03"
    [row] = [r for r in page.context["derived"] if r["condition"] == "infeasible"]
    assert (f"{row['t_star']:.2f}", row["delta"]) == ("0.50", "0.03")


@pytest.mark.django_db
def test_page_says_when_capacity_binds_and_when_another_t_star_would_be_cheaper(
    client, admin, review_share, settings
):
    settings.GUARDIAN_REVIEWER_CAPACITY_PER_HOUR = 0.1
    _suggestion_fixture()
    client.force_login(admin)
    html = client.get(reverse("policies:monitoring")).content.decode()
    assert "The reviewers' capacity binds" in html
    assert "Cheapest beyond capacity" in html
    # The version's 0.5 ± 0.1 reviews both clusters, as the cheapest band would.
    assert "The current band already exceeds that capacity" in html
    assert parse_qs(urlsplit(_draft_links(html)[0]).query)["infeasible_delta"] == ["0"]
    # A t* of 0.47 would review one cluster and cost less: the page says to recalibrate.
    assert "On these labels a t* of 0.470" in html
    assert f'href="{reverse("policies:models")}">Recalibrate the guardian</a>' in html


# ---- reviewer vs reviewer --------------------------------------------------------------------


def _quorum_refund():
    run = drive(start("refund_waits_for_approval"))
    assert run.status == RunStatus.WAITING
    return run.escalations.get(status=EscalationStatus.OPEN)


@pytest.mark.django_db
def test_reviewer_vs_reviewer_pairs_a_quorums_two_approvers(
    client, admin, reviewer, other_reviewer, django_assert_num_queries
):
    base = demo_policy_version()
    policy_version_create(
        thresholds=base.thresholds,
        question_set=base.question_set,
        question_set_version=base.question_set_version,
        quorum={"tools": ["issue_refund"]},
        activate=True,
    )
    agreed, disagreed, rejected, single = (_quorum_refund() for _ in range(4))
    # Both let the held class stand (irreversible).
    assert (
        escalation_resolve(escalation_id=agreed.pk, reviewer=reviewer, decision="approve") is None
    )
    escalation_resolve(escalation_id=agreed.pk, reviewer=other_reviewer, decision="approve")
    # The first says regulated, the second irreversible.
    escalation_resolve(
        escalation_id=disagreed.pk,
        reviewer=reviewer,
        decision="approve",
        risk_labels={0: "regulated"},
    )
    escalation_resolve(
        escalation_id=disagreed.pk,
        reviewer=other_reviewer,
        decision="approve",
        risk_labels={0: "irreversible"},
    )
    # Approved as regulated, then rejected by the second, who also says regulated.
    escalation_resolve(
        escalation_id=rejected.pk,
        reviewer=other_reviewer,
        decision="approve",
        risk_labels={0: "regulated"},
    )
    escalation_resolve(
        escalation_id=rejected.pk,
        reviewer=reviewer,
        decision="reject",
        reason="not this one",
        risk_labels={0: "regulated"},
    )
    # One approval only: still open, no pair.
    escalation_resolve(escalation_id=single.pk, reviewer=reviewer, decision="approve")

    with django_assert_num_queries(3):
        pairs = monitoring.reviewer_pairs()
    assert [(p.escalation_id, p.first, p.second, p.first_given, p.second_given) for p in pairs] == [
        (agreed.pk, "irreversible", "irreversible", False, False),
        (disagreed.pk, "regulated", "irreversible", True, True),
        (rejected.pk, "regulated", "regulated", True, True),
    ]
    assert [p.second_decision for p in pairs] == ["approve", "approve", "reject"]
    result = monitoring.reviewer_vs_reviewer(pairs)
    assert result.n == 3
    # rows first (read_only, reversible_write, irreversible, regulated), columns second
    assert result.matrix == [[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]
    # p_o = 2/3; first: irr 1/3, reg 2/3; second: irr 2/3, reg 1/3 → p_e = 4/9; κ = 0.4
    assert result.kappa == pytest.approx(0.4)

    client.force_login(admin)
    html = client.get(reverse("policies:monitoring")).content.decode()
    assert "3 held calls labelled by a quorum's two approvers" in html
    assert "κ over the four risk classes = 0.400" in html
    assert "Both gave a class of their own on 2" in html
    assert "The second reviewer rejected 1 of them" in html
    assert "<th>First: regulated</th><td>0</td><td>0</td><td>1</td><td>1</td>" in html


@pytest.mark.django_db
def test_reviewer_vs_reviewer_is_empty_without_a_quorum(client, admin, reviewer):
    escalation = _quorum_refund()
    escalation_resolve(escalation_id=escalation.pk, reviewer=reviewer, decision="approve")
    assert monitoring.reviewer_pairs() == []
    client.force_login(admin)
    html = client.get(reverse("policies:monitoring")).content.decode()
    assert "No held call has been approved by a quorum" in html


@pytest.mark.django_db
def test_a_young_log_says_its_rates_per_hour_are_early_ones(client, admin):
    demo_policy_version()
    _decisions_today([(DecisionOutcome.ESCALATE, 0.15)] * 3)
    client.force_login(admin)
    body = client.get(reverse("policies:monitoring")).content.decode()
    assert "Every rate per hour here is an early one" in body


def test_each_rate_says_what_it_counts_and_the_day_table_shares_the_charts_unit(client, admin):
    demo_policy_version()
    _decisions_today(
        [(DecisionOutcome.ESCALATE, 0.15)] * 3 + [(DecisionOutcome.CONTINUE, 0.05)] * 5
    )
    client.force_login(admin)
    body = client.get(reverse("policies:monitoring")).content.decode()
    banner = next(b for b in monitoring.banners(monitoring.decision_days(), capacity_per_hour=1))
    assert re.search(r"\d+\.\d\d escalations per hour since its first decision", banner)
    assert re.search(r"recent 8 turns \(\d+\.\d\d turns per hour\)", body)
    days = body.split('id="escalations-title"', 1)[1].split("</section>", 1)[0]
    assert "<th>Rate</th>" in days
    assert "<td>37.5 %</td>" in days  # 3 of 8, as the axis reads it (in %)
    assert "<td>0.375</td>" not in days


@pytest.mark.django_db
def test_the_page_says_where_capacity_is_set_and_dates_the_day_table_as_the_banner_does(
    client, admin
):
    """The capacity is an environment variable (not a line to edit in settings.py), and the
    day table read "Dec. 3, 2026" beside a banner and a chart that say 2026-12-03."""
    make_policy_version(
        is_active=True,
        thresholds={"integrity": {"c_stop": 1, "c_cont": 1, "delta": 0.05}},
    )
    _decisions_today([(DecisionOutcome.ESCALATE, 0.6)])
    client.force_login(admin)
    html = client.get(reverse("policies:monitoring")).content.decode()
    assert "GUARDIAN_REVIEWER_CAPACITY_PER_HOUR, set in the environment or .env" in html
    assert "in guardian_core/settings.py" not in html
    today = timezone.localdate().isoformat()
    assert f'<td><time datetime="{today}">{today}</time></td>' in html
