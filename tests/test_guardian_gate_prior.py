"""Issue 25's gate, on the issue's two versions over 60 labelled examples at about 50 %
prevalence with traffic at 5 %: a recalibrated version whose map, fitted at the labelled share,
fires on 83 % of benign outputs, and a retrained one that ranks better but looks worse
calibrated on those rows. The gate keeps the one with the lower expected cost at the live
prior, says which figures the examples are too few to tell, refuses to decide when the
examples cannot tell the deciding figure, and never lets a flood of false alarms or of
escalations through.

The two versions' answers are fixed per example (the scorer the gate asks is replaced by one
that reads a table): what the gate does with the answers is the code under test."""

import io
import json
from types import SimpleNamespace

import numpy as np
import pytest
from django.core.management import call_command
from django.urls import reverse

import policies.guardian_gate
from escalations.models import ExampleSource, LabelledExample
from guardian_core.adapters.http import DEFAULT_QUESTION_SET_VERSION
from guardian_core.models import GuardianModelVersion
from guardian_core.said import english, texts
from policies.guardian_gate import guardian_model_gate_report
from policies.learning import GuardianGateRefused, guardian_model_activate
from policies.models import GuardianModelActivation
from runs.guardian_models import guardian_model_version_active
from tests.factories import default_costs_policy_version_create, make_decision

pytestmark = pytest.mark.django_db

NO_LIVE_PRIOR = "read at the labelled share: no live prior"

N = 60  # the rows the gate judged on
TRAFFIC_PRIOR = 0.05


def _spread(low, high, k):
    return list(np.round(np.linspace(low, high, k), 4))


# Integrity's default policy: t* = 0.1, the band 0.05 to 0.15; a miss costs 9, a false stop 1.
# Positives first, then negatives; 30 of each.
RECALIBRATED = {
    # A map fitted at the labelled share: every injection fires, and 25 of 30 benign outputs
    # (83 %) score above the band.
    "positive": _spread(0.45, 0.97, 30),
    "negative": _spread(0.01, 0.04, 5) + _spread(0.2, 0.75, 25),
}
RETRAINED = {
    # Ranks better, but under-confident on the injections it catches, and misses 4 (13 %);
    # 3 benign outputs (10 %) fire.
    "positive": _spread(0.01, 0.04, 4) + _spread(0.3, 0.6, 26),
    "negative": _spread(0.005, 0.045, 27) + _spread(0.2, 0.3, 3),
}
# Two versions no example can tell apart on 60 rows: each misses 2 injections and fires on 4
# benign outputs, different ones.
NOISY_A = {
    "positive": [0.02] * 2 + [0.6] * 28,
    "negative": [0.6] * 4 + [0.02] * 26,
}
NOISY_B = {
    "positive": [0.6] * 2 + [0.02] * 2 + [0.6] * 26,
    "negative": [0.02] * 4 + [0.6] * 4 + [0.02] * 22,
}


@pytest.fixture
def labelled(db):
    default_costs_policy_version_create()
    for label, kind in ((True, "positive"), (False, "negative")):
        for i in range(N // 2):
            LabelledExample.objects.create(
                condition="integrity",
                projection={"goal": "Summarise my inbox", "last_results": [f"{kind} {i}"]},
                label=label,
                source=ExampleSource.HUMAN,
                question_set_version=DEFAULT_QUESTION_SET_VERSION,
                model_version="someone-else-1",
            )


class _TableScorer:
    """Answers each example with the probability its version's table gives it."""

    def __init__(self, version: GuardianModelVersion, table: dict) -> None:
        self.model_version = version.model_version
        self.table = table

    def __call__(self, condition, projections):
        answers = []
        for projection in projections:
            kind, i = projection["last_results"][0].split()
            answers.append(float(self.table[kind][int(i)]))
        return answers

    def close(self) -> None:
        pass


@pytest.fixture
def versions(labelled, monkeypatch):
    """Version number -> its table; the gate's scorer reads them."""
    tables: dict[int, dict] = {}

    def scorer(adapter, *, guardian_version, policy_version):
        if guardian_version is None:  # the adapter as it ships: tables[None]
            version = SimpleNamespace(model_version="local-test")
        else:
            version = GuardianModelVersion.objects.get(number=guardian_version)
        return _TableScorer(version, tables[guardian_version]), version.model_version

    monkeypatch.setattr(policies.guardian_gate, "guardian_scorer", scorer)

    def make(number, kind, table):
        tables[number] = table
        return GuardianModelVersion.objects.create(
            number=number,
            adapter="local",
            base_model_version="local-test",
            kind=kind,
            calibration={"integrity": {"method": "isotonic", "x": [0, 1], "y": [0, 1]}},
            example_ids=[],
            examples_digest="0" * 64,
        )

    make.tables = tables
    return make


def _live_prior(settings, value=TRAFFIC_PRIOR):
    # An admin's statement of the traffic's share (policies/priors.py reads it first).
    settings.GUARDIAN_LIVE_PRIORS = {"integrity": value}


def _no_live_prior(settings):
    settings.GUARDIAN_LIVE_PRIORS = {}


def _activate_first(version):
    GuardianModelVersion.objects.filter(pk=version.pk).update(is_active=True)


def test_at_the_labelled_share_the_retrained_version_ranks_better_and_looks_worse_calibrated(
    versions, settings
):
    # The issue's premise, read as the old gate read it: at the examples' own share.
    _no_live_prior(settings)
    _activate_first(versions(1, "recalibrated", RECALIBRATED))
    retrained = versions(2, "retrained", RETRAINED)
    report = guardian_model_gate_report(candidate=retrained)
    integrity = report["conditions"]["integrity"]
    assert integrity["prior"]["value"] == pytest.approx(0.5)
    assert integrity["prior"]["live"] is False
    assert f"integrity: {NO_LIVE_PRIOR}" in texts(report["cautions"])
    figures = integrity["figures"]
    assert figures["auroc"]["candidate"] > figures["auroc"]["current"]
    assert figures["ece"]["candidate"] > figures["ece"]["current"]
    assert figures["benign_flagged"]["current"] == pytest.approx(25 / 30)
    assert figures["missed"]["candidate"] == pytest.approx(4 / 30)
    # At half positives the misses weigh most: the recalibrated version costs less there, and
    # read there the gate refuses the retrained one, as the gate did.
    assert figures["expected_cost"]["candidate"] > figures["expected_cost"]["current"]
    assert report["refused"] is True
    assert any("integrity: calibration worsens beyond 5%" in r for r in texts(report["reasons"]))


def test_at_the_live_prior_the_gate_keeps_the_cheaper_retrained_version_and_says_what_60_rows_cannot_tell(  # noqa: E501
    versions, settings
):
    _live_prior(settings)
    recalibrated = versions(1, "recalibrated", RECALIBRATED)
    _activate_first(recalibrated)
    retrained = versions(2, "retrained", RETRAINED)
    report = guardian_model_gate_report(candidate=retrained)

    integrity = report["conditions"]["integrity"]
    assert integrity["paired_n"] == N
    assert integrity["prior"]["value"] == TRAFFIC_PRIOR
    assert english(integrity["prior"]["words"]) == "the live prior 5.0% (stated)"
    cost = integrity["figures"]["expected_cost"]
    # 95 % of the traffic is benign and the recalibrated map fires on 83 % of it.
    assert cost["current"] > 0.7
    assert cost["candidate"] < 0.2
    assert cost["significant"]
    assert cost["high"] < 0
    assert cost["verdict"] == "better"
    # Every figure says both values, the difference, its interval, whether it is significant,
    # and the prior it was read at.
    for f in integrity["figures"].values():
        assert {"current", "candidate", "difference", "low", "high", "significant"} <= set(f)
        assert f["prior"] == TRAFFIC_PRIOR
        assert f["n"] == N
    assert report["refused"] is False
    assert report["undecided"] is False
    # What 60 rows cannot tell is said, with how many examples would: here the size of the
    # gain, which is beyond the noise all the same.
    assert cost["needed"] > N
    assert (
        f"integrity: too few examples: n={N}, about {cost['needed']} needed to tell expected "
        f"cost per example within ±{cost['tolerance']:.4g}"
    ) in "\n".join(texts(report["cautions"]))

    version = guardian_model_activate(number=retrained.number, comment="retrained")
    assert version.is_active
    assert guardian_model_version_active(adapter="local") == retrained
    assert GuardianModelActivation.objects.get(version=retrained).override_reason == ""


def test_at_the_live_prior_the_recalibrated_version_is_refused_against_the_retrained_one(
    versions, settings
):
    _live_prior(settings)
    _activate_first(versions(1, "retrained", RETRAINED))
    recalibrated = versions(2, "recalibrated", RECALIBRATED)
    report = guardian_model_gate_report(candidate=recalibrated)
    assert report["refused"] is True
    reasons = "\n".join(texts(report["reasons"]))
    assert (
        "integrity: the candidate flags 83.3% of negatives at the live prior 5.0% (stated) "
        "(fired: a person sees each one), above the limit of 20% "
        "(GUARDIAN_GATE_MAX_FLAGGED_BENIGN); what runs use now flags 10.0%"
    ) in reasons
    assert "integrity: expected cost per example worsens beyond 5% at the live prior 5.0%" in (
        reasons
    )
    with pytest.raises(GuardianGateRefused, match="refuses it"):
        guardian_model_activate(number=recalibrated.number)


def test_the_false_alarm_limit_is_a_setting(versions, settings):
    _live_prior(settings)
    settings.GUARDIAN_GATE_MAX_FLAGGED_BENIGN = 0.05
    # What runs use now flags none: a candidate that takes runs over the limit is refused.
    _activate_first(versions(1, "recalibrated", {"positive": [0.6] * 30, "negative": [0.02] * 30}))
    report = guardian_model_gate_report(candidate=versions(2, "retrained", RETRAINED))
    assert report["refused"] is True
    assert any(
        "flags 10.0% of negatives" in r and "limit of 5%" in r for r in texts(report["reasons"])
    )


def test_a_difference_inside_the_noise_is_not_refused_but_too_few_to_decide(versions, settings):
    _live_prior(settings)
    _activate_first(versions(1, "recalibrated", NOISY_A))
    candidate = versions(2, "recalibrated", NOISY_B)
    report = guardian_model_gate_report(candidate=candidate)
    cost = report["conditions"]["integrity"]["figures"]["expected_cost"]
    assert cost["low"] < 0 < cost["high"]
    assert cost["significant"] is False
    assert cost["verdict"] == "too_few"
    assert report["refused"] is False
    assert report["reasons"] == []
    assert report["undecided"] is True
    assert report["needs_override"] is True
    (reason,) = [r for r in texts(report["undecided_reasons"]) if "expected cost" in r]
    needed = cost["needed_to_decide"]
    assert reason.startswith(f"integrity: too few examples: n={N}, about {needed} needed")
    assert needed > N

    with pytest.raises(GuardianGateRefused) as held:
        guardian_model_activate(number=candidate.number)
    assert "cannot decide on the examples it has" in str(held.value)
    assert f"too few examples: n={N}, about {needed} needed" in str(held.value)

    out = io.StringIO()
    with pytest.raises(SystemExit) as exited:
        call_command("gate", "--guardian-version", str(candidate.number), "--json", stdout=out)
    assert exited.value.code == 3
    printed = json.loads(out.getvalue())
    assert printed["undecided"] is True
    assert printed["conditions"]["integrity"]["figures"]["expected_cost"]["significant"] is False

    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("gate", "--guardian-version", str(candidate.number), stdout=out)
    assert "UNDECIDED (too few examples" in out.getvalue()
    assert "expected_cost: " in out.getvalue()
    assert "not significant" in out.getvalue()

    guardian_model_activate(
        number=candidate.number, override_reason="the audit sample agrees; more examples soon"
    )
    record = GuardianModelActivation.objects.get(version=candidate)
    assert record.override_reason == "the audit sample agrees; more examples soon"
    assert record.gate_report["undecided"] is True


def test_the_activation_history_says_once_that_the_gate_could_not_decide(
    versions, settings, client, admin
):

    _live_prior(settings)
    _activate_first(versions(1, "recalibrated", NOISY_A))
    candidate = versions(2, "recalibrated", NOISY_B)
    guardian_model_activate(number=candidate.number, override_reason="more examples soon")
    client.force_login(admin)
    page = client.get(reverse("policies:model_detail", args=[candidate.pk])).content.decode()
    assert "The gate could not decide: integrity: too few examples: n=" in page
    assert "Too few examples: integrity: too few examples" not in page


def _decisions(ages_minutes, answers=None, now=None):
    """Decisions made `ages_minutes` ago (auto_now_add reads django.utils.timezone.now, moved
    for each), each having asked `answers` (integrity once by default)."""
    from datetime import timedelta
    from unittest import mock

    from django.utils import timezone

    now = now or timezone.now()
    for age in ages_minutes:
        with mock.patch("django.utils.timezone.now", return_value=now - timedelta(minutes=age)):
            make_decision(answers={"integrity": 0.02} if answers is None else answers)


def test_a_candidate_escalating_less_is_not_refused_when_both_are_above_capacity(
    versions, settings
):
    # The demo: every version was refused for capacity, a better one too, because what runs
    # use now was over it already.
    _live_prior(settings)
    _activate_first(versions(1, "recalibrated", RECALIBRATED))
    retrained = versions(2, "retrained", RETRAINED)
    _decisions([0, 0, 0])  # three decisions in the last minutes: 36 per hour at least
    settings.GUARDIAN_REVIEWER_CAPACITY_PER_HOUR = 1.0
    report = guardian_model_gate_report(candidate=retrained)
    hourly = report["escalations_per_hour"]
    assert hourly["decisions"] == 3
    # Each decision asked integrity once: the share of decisions is integrity's rate.
    assert hourly["candidate"] == pytest.approx(
        report["conditions"]["integrity"]["figures"]["escalation_rate"]["candidate"]
        * hourly["decisions_per_hour"]
    )
    assert 1.0 < hourly["candidate"] < hourly["current"]
    assert report["refused"] is False
    assert not any("capacity" in r for r in texts(report["reasons"]))
    (warning,) = texts(report["limit_warnings"])
    assert "above the reviewers' capacity of 1 per hour" in warning
    assert "both are above the limit, and the candidate is not worse beyond the noise" in warning

    settings.GUARDIAN_REVIEWER_CAPACITY_PER_HOUR = None
    report = guardian_model_gate_report(candidate=retrained)
    assert report["refused"] is False
    assert report["limit_warnings"] == []
    assert any("reviewer capacity is not set" in c for c in texts(report["cautions"]))


def test_a_candidate_taking_runs_over_capacity_is_refused(versions, settings):
    _live_prior(settings)
    _activate_first(versions(1, "retrained", RETRAINED))
    recalibrated = versions(2, "recalibrated", RECALIBRATED)
    _decisions([0, 0, 0])
    settings.GUARDIAN_REVIEWER_CAPACITY_PER_HOUR = 10.0
    report = guardian_model_gate_report(candidate=recalibrated)
    hourly = report["escalations_per_hour"]
    assert hourly["current"] < 10.0 < hourly["candidate"]
    assert report["refused"] is True
    assert any(
        "above the reviewers' capacity of 10 per hour" in r for r in texts(report["reasons"])
    )


def test_the_rate_is_read_over_the_traffic_seen_and_says_how_long(versions, settings):
    from datetime import timedelta

    from django.utils import timezone

    _live_prior(settings)
    _activate_first(versions(1, "retrained", RETRAINED))
    recalibrated = versions(2, "recalibrated", RECALIBRATED)
    # A demo that ran for 8 minutes three days ago: 9 decisions over 8 minutes is 67.5 per
    # hour, not 9 over the 3 days since.
    _decisions(range(0, 9), now=timezone.now() - timedelta(days=3, minutes=-8))
    settings.GUARDIAN_REVIEWER_CAPACITY_PER_HOUR = 1.0
    report = guardian_model_gate_report(candidate=recalibrated)
    hourly = report["escalations_per_hour"]
    assert hourly["decisions_per_hour"] == pytest.approx(9 / (8 / 60))
    assert english(hourly["span_words"]) == "8 minutes"
    (reason,) = [r for r in texts(report["reasons"]) if "capacity" in r]
    assert "decisions per hour over the last 8 minutes of traffic" in reason
    assert "7 days" not in reason


def test_a_decision_escalates_once_however_many_of_its_conditions_do():
    from policies.guardian_gate import escalated_share

    rates = {"integrity": 0.9, "risk": 0.8, "infeasible": 0.7}
    # The demo's 177.8 %: the rates summed per decision.
    asked = {("infeasible", "integrity", "risk", "risk"): 10, (): 5}
    share = escalated_share(rates, asked)
    assert share <= 1.0
    assert share == pytest.approx(10 / 15 * (1 - 0.1 * 0.2 * 0.2 * 0.3))
    # A decision that asked nothing (a held step) sends nobody anything.
    assert escalated_share(rates, {(): 4}) == 0.0
    assert escalated_share({"integrity": 0.25}, {("integrity",): 3}) == pytest.approx(0.25)


def test_the_gate_counts_a_decision_asking_several_conditions_once(versions, settings):
    _live_prior(settings)
    _activate_first(versions(1, "retrained", RETRAINED))
    recalibrated = versions(2, "recalibrated", RECALIBRATED)
    # Integrity asked of each of the three tool outputs a decision read is still one
    # decision; the rest are not measured here and add nothing.
    _decisions([0, 0, 0], answers={"integrity": 0.02, "goal_reached": 0.1, "infeasible": 0.1})
    settings.GUARDIAN_REVIEWER_CAPACITY_PER_HOUR = 1000.0
    report = guardian_model_gate_report(candidate=recalibrated)
    hourly = report["escalations_per_hour"]
    assert 0 < hourly["share"]["candidate"] <= 1.0
    assert hourly["candidate"] <= hourly["decisions_per_hour"]


# 3 of 30 negatives (10 %) flagged by both, different ones: over a limit of 5 %, no worse.
FLAGGED_NOW = {"positive": [0.6] * 30, "negative": [0.6] * 3 + [0.02] * 27}
FLAGGED_TOO = {"positive": [0.6] * 30, "negative": [0.02] * 3 + [0.6] * 3 + [0.02] * 24}


def test_the_false_alarm_limit_warns_when_what_runs_use_now_is_over_it_as_much(versions, settings):
    _live_prior(settings)
    settings.GUARDIAN_GATE_MAX_FLAGGED_BENIGN = 0.05
    _activate_first(versions(1, "recalibrated", FLAGGED_NOW))
    report = guardian_model_gate_report(candidate=versions(2, "recalibrated", FLAGGED_TOO))
    flagged = report["conditions"]["integrity"]["figures"]["benign_flagged"]
    assert flagged["current"] == flagged["candidate"] == pytest.approx(0.1)
    assert not any("of negatives" in r for r in texts(report["reasons"]))
    (warning,) = texts(report["limit_warnings"])
    assert "the candidate flags 10.0% of negatives" in warning
    assert "what runs use now flags 10.0%" in warning
    assert "not worse beyond the noise" in warning


def test_the_false_alarm_limit_refuses_when_both_are_over_it_and_the_candidate_is_worse(
    versions, settings
):
    _live_prior(settings)
    settings.GUARDIAN_GATE_MAX_FLAGGED_BENIGN = 0.05
    _activate_first(versions(1, "retrained", RETRAINED))  # flags 10 %
    report = guardian_model_gate_report(candidate=versions(2, "recalibrated", RECALIBRATED))
    assert any(
        "flags 83.3% of negatives" in r and "the candidate is worse beyond the noise" in r
        for r in texts(report["reasons"])
    )


def _undecided_page(versions, settings, client, admin, language: str):
    """A candidate the examples cannot tell from what runs use now, and its activate page
    measured in `language`."""
    _live_prior(settings)
    _activate_first(versions(1, "recalibrated", NOISY_A))
    candidate = versions(2, "recalibrated", NOISY_B)
    client.force_login(admin)
    url = reverse("policies:model_activate", args=[candidate.pk]) + "?measure=1"
    return candidate, client.get(url, headers={"accept-language": language}).content.decode()


def test_the_page_shows_every_figure_with_its_interval_and_the_prior(
    versions, settings, client, admin
):
    candidate, page = _undecided_page(versions, settings, client, admin, "en")
    assert "The gate cannot decide on these examples" in page
    report = guardian_model_gate_report(candidate=candidate)
    needed = report["conditions"]["integrity"]["figures"]["expected_cost"]["needed_to_decide"]
    assert needed > N
    # The block and the table say the same number.
    assert f"integrity: too few examples: n={N}, about {needed} needed" in page
    assert f"too few examples</strong>: about {needed} needed to tell" in page
    # Which limits refuse whatever the noise, and what the noise never refuses.
    assert "Two limits refuse whatever the noise" in page
    assert "A difference whose interval holds 0 is within the noise and never refuses." not in page
    assert "read at the live prior 5.0% (stated)" in page
    assert "not significant" in page
    assert "Negatives flagged" in page
    assert "Positives missed" in page
    assert 'name="override_reason"' in page


def test_a_french_admin_reads_what_the_examples_cannot_tell_in_french(
    versions, settings, client, admin
):
    _, page = _undecided_page(versions, settings, client, admin, "fr")

    # The undecided reason, its interval and the prior it was read at, all worded in French.
    assert f"integrity\xa0: trop peu d’exemples\xa0: n={N}, il en faut environ" in page
    assert "intervalle à 95\xa0% [" in page
    assert "la prévalence en production 5,0\xa0% (stated)" in page
    assert "too few examples: n=" not in page
    assert "the live prior" not in page


def test_a_rollback_is_not_held_up_by_too_few_examples(versions, settings):
    _live_prior(settings)
    versions.tables[None] = NOISY_A  # the adapter as it ships answers as version 1
    earlier = versions(1, "recalibrated", NOISY_A)
    guardian_model_activate(number=earlier.number, comment="first")
    later = versions(2, "recalibrated", NOISY_B)
    guardian_model_activate(number=later.number, override_reason="more examples soon")
    # Going back to version 1, which the gate passed when it ran: the same noise no longer
    # holds it, and what would is kept as a warning.
    report = guardian_model_gate_report(candidate=earlier)
    assert report["rollback"]
    assert report["undecided"] is False
    assert report["needs_override"] is False
    assert any("too few examples" in w for w in texts(report["warnings"]))


def test_without_the_priors_module_the_figures_are_read_at_the_labelled_share(
    versions, settings, monkeypatch
):
    import sys

    _live_prior(settings)
    monkeypatch.setitem(sys.modules, "policies.priors", None)  # as if it were not installed
    _activate_first(versions(1, "recalibrated", RECALIBRATED))
    report = guardian_model_gate_report(candidate=versions(2, "retrained", RETRAINED))
    assert report["conditions"]["integrity"]["prior"]["value"] == pytest.approx(0.5)
    assert "no live prior can be read here (policies.priors is not installed)" in (
        texts(report["cautions"])
    )
    assert f"integrity: {NO_LIVE_PRIOR}" in texts(report["cautions"])


def test_a_figure_within_the_tolerance_reads_not_worse_by_more_than_it(
    versions, settings, client, admin
):

    _live_prior(settings)
    _activate_first(versions(1, "recalibrated", RECALIBRATED))
    candidate = versions(2, "retrained", RETRAINED)
    report = guardian_model_gate_report(candidate=candidate)
    figures = report["conditions"]["integrity"]["figures"]
    within = [k for k, f in figures.items() if f["verdict"] == "within"]
    assert within
    client.force_login(admin)
    page = client.get(
        reverse("policies:model_activate", args=[candidate.pk]) + "?measure=1"
    ).content.decode()
    # Not "within ±0.0500", which reads as "barely changed" beside a difference of −0.6.
    assert "not worse by more than the tolerance (±" in page
    assert "</span>within ±" not in page
