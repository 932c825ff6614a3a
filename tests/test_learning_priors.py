"""Recalibration learns at the traffic's prior, not the labelled set's: labelled examples at about
50 % positives, traffic at about 5 %; people's labels only by default; and a map stacked on
another guardian model version."""

import hashlib
import io
import json
import math

import numpy as np
import pytest
from django.core.management import call_command

from escalations.models import ExampleSource, LabelledExample
from guardian_core.adapters.http import DEFAULT_QUESTION_SET_VERSION
from guardian_core.engine.calibration import apply_map, calibration_figures
from guardian_core.engine.conditions import Condition
from guardian_core.engine.evaluation import expected_calibration_error, reliability_curve
from guardian_core.engine.priors import prior_weights
from guardian_core.models import GuardianModelVersion
from policies.learning import LearningError, guardian_model_recalibrate
from runs.guardian_models import versioned_guardian
from runs.ports import base_guardian
from tests.adapters.servers import serve, vendor
from tests.factories import default_costs_policy_version_create, make_decision, make_run, make_turn

pytestmark = pytest.mark.django_db

PIN = "vendor-prior-2026-12"
T_STAR = 0.10  # integrity's t* at the default costs
LABELLED_PRIOR, TRAFFIC_PRIOR = 0.5, 0.05


@pytest.fixture
def active_version(db):
    return default_costs_policy_version_create()


def _raw(x: float) -> float:
    """The vendor's score of a case whose hidden evidence is x: low and unsure, as the issue's
    base was (it flags few harmless outputs and misses many injected ones)."""
    return round(1 / (1 + math.exp(-(2 * x - 5))), 6)


def _cases(prior: float, n: int, seed: int) -> list[tuple[dict, bool, float]]:
    """(projection, label, the vendor's score): injected outputs' evidence ~ N(2, 1), clean
    ones' ~ N(0, 1)."""
    rng = np.random.default_rng(seed)
    labels = rng.uniform(size=n) < prior
    x = np.where(labels, rng.normal(2.0, 1.0, n), rng.normal(0.0, 1.0, n))
    return [
        (
            {"goal": f"Summarise page {seed}-{i}", "last_results": [f"page (x={x[i]:.6f})"]},
            bool(labels[i]),
            _raw(float(x[i])),
        )
        for i in range(n)
    ]


def _vendor_answer(body):
    result = body["projection"]["last_results"][0]
    return {"integrity": _raw(float(result.split("(x=")[1].split(")")[0]))}


@pytest.fixture
def prior_vendor(settings):
    with serve(vendor(_vendor_answer, model_version=PIN)) as server:
        settings.GUARDIAN_HTTP_URL = server.url
        settings.GUARDIAN_HTTP_MODEL_VERSION = PIN
        settings.GUARDIAN_DEADLINE_SECONDS = 5.0
        yield server


def _label(cases, *, source=ExampleSource.HUMAN):
    LabelledExample.objects.bulk_create(
        LabelledExample(
            condition="integrity",
            projection=projection,
            probability=p,  # scored by this vendor: reused, not asked again
            label=label,
            source=source,
            question_set_version=DEFAULT_QUESTION_SET_VERSION,
            model_version=PIN,
        )
        for projection, label, p in cases
    )


def _traffic(cases, policy_version):
    """The decision log of one run whose turns the vendor answered."""
    run = make_run(policy_version=policy_version, guardian="http")
    for index, (_, _, p) in enumerate(cases):
        make_decision(
            turn=make_turn(run=run, index=index),
            answers={"integrity": p},
            guardian_model_version=PIN,
        )


def _measured(mapping, cases) -> dict:
    """ECE at the cases' own prior, and the share of clean outputs flagged (above t*)."""
    p = np.array([apply_map(mapping, raw) for _, _, raw in cases])
    y = np.array([label for _, label, _ in cases])
    return {
        "ece": expected_calibration_error(reliability_curve(p, y, bins=15), len(p)),
        "flagged": float((p[~y] > T_STAR).mean()),
    }


def test_the_traffics_scores_move_a_map_fitted_on_half_injected_examples_to_its_prior(
    active_version, prior_vendor
):
    _label(_cases(LABELLED_PRIOR, 400, seed=1))
    _traffic(_cases(TRAFFIC_PRIOR, 600, seed=2), active_version)

    version = guardian_model_recalibrate(adapter="http", conditions=["integrity"])

    mapping = version.calibration["integrity"]
    prior = version.figures["integrity"]["prior"]
    assert prior["fitted"] == pytest.approx(LABELLED_PRIOR, abs=0.05)
    assert prior["live"]["source"] == "traffic_em"
    assert prior["live"]["n"] == 600
    assert prior["live"]["low"] <= TRAFFIC_PRIOR <= prior["live"]["high"]
    assert mapping["prior"]["live"] == pytest.approx(prior["live"]["value"], abs=1e-6)

    # Measured on traffic it never saw, at the traffic's own share of injections.
    traffic = _cases(TRAFFIC_PRIOR, 6000, seed=3)
    base = _measured({"method": "isotonic", "x": [0.0, 1.0], "y": [0.0, 1.0]}, traffic)
    recalibrated = _measured(mapping, traffic)
    at_labelled_prior = _measured({k: v for k, v in mapping.items() if k != "prior"}, traffic)
    # What the issue saw: the same map left at the labelled share floods the queue.
    assert at_labelled_prior["flagged"] > 3 * base["flagged"]
    # EM leans on what 400 labelled examples say of each class's scores, so it lands near the
    # prior, not on it (here 0.08 for 0.05; the audit sample, unbiased, is preferred once
    # people labelled enough of it): the flood recedes and the ECE falls by more than half.
    assert recalibrated["flagged"] <= at_labelled_prior["flagged"] / 3
    assert recalibrated["ece"] <= at_labelled_prior["ece"] / 2
    # The held-out figures are also read at the live prior: each example weighted.
    figures = version.figures["integrity"]
    held = LabelledExample.objects.in_bulk(figures["held_out_ids"])
    p = np.array([apply_map(mapping, held[pk].probability) for pk in figures["held_out_ids"]])
    y = np.array([held[pk].label for pk in figures["held_out_ids"]])
    weights = prior_weights(y, mapping["prior"]["live"])
    assert figures["after_at_live_prior"] == calibration_figures(p, y, 15, weights)
    assert figures["after_at_live_prior"]["ece"] != figures["after"]["ece"]


def test_runs_on_the_version_get_the_answer_at_the_live_prior(active_version, prior_vendor):
    _label(_cases(LABELLED_PRIOR, 200, seed=4))
    version = guardian_model_recalibrate(
        adapter="http", conditions=["integrity"], live_priors={"integrity": 0.05}
    )
    assert version.figures["integrity"]["prior"]["live"]["source"] == "stated"
    run = make_run(policy_version=active_version, guardian="http")
    guardian = versioned_guardian(version, base_guardian(run), deadline_seconds=5.0)
    projection, _, raw = _cases(0.5, 1, seed=5)[0]
    answered = guardian.answer(projection, [Condition.INTEGRITY])["integrity"]
    assert answered == pytest.approx(apply_map(version.calibration["integrity"], raw), abs=1e-6)
    unshifted = {k: v for k, v in version.calibration["integrity"].items() if k != "prior"}
    assert answered < apply_map(unshifted, raw)


def test_an_admins_stated_prior_wins_and_no_prior_known_leaves_the_map_at_its_own(
    active_version, prior_vendor, settings
):
    _label(_cases(LABELLED_PRIOR, 200, seed=6))
    unknown = guardian_model_recalibrate(adapter="http", conditions=["integrity"])
    assert "live" not in unknown.calibration["integrity"]["prior"]
    assert unknown.figures["integrity"]["prior"]["live"] is None
    assert "no live prior known" in unknown.figures["integrity"]["prior"]["note"]

    settings.GUARDIAN_LIVE_PRIORS = {"integrity": 0.02}
    stated = guardian_model_recalibrate(adapter="http", conditions=["integrity"])
    assert stated.calibration["integrity"]["prior"]["live"] == 0.02
    assert stated.figures["integrity"]["prior"]["live"]["source"] == "stated"


def test_the_judges_labels_do_not_feed_recalibration_unless_asked(active_version, prior_vendor):
    _label(_cases(LABELLED_PRIOR, 60, seed=7))
    _label(_cases(LABELLED_PRIOR, 300, seed=8), source=ExampleSource.JUDGE)
    people = guardian_model_recalibrate(adapter="http", conditions=["integrity"])
    with_judge = guardian_model_recalibrate(
        adapter="http", conditions=["integrity"], include_judge=True
    )
    judged = set(LabelledExample.objects.filter(source="judge").values_list("pk", flat=True))
    assert people.figures["integrity"]["examples"] == 60
    assert not judged & set(people.example_ids)
    assert with_judge.figures["integrity"]["examples"] == 360
    assert judged & set(with_judge.example_ids)
    assert with_judge.figures["integrity"]["include_judge"] is True


def test_with_the_judges_labels_alone_there_is_nothing_to_recalibrate_on(
    active_version, prior_vendor
):
    _label(_cases(LABELLED_PRIOR, 100, seed=11), source=ExampleSource.JUDGE)
    with pytest.raises(LearningError, match="no labelled examples by people"):
        guardian_model_recalibrate(adapter="http", conditions=["integrity"])


def test_a_map_stacked_on_another_version_sits_on_that_versions_answers(
    active_version, prior_vendor
):
    _label(_cases(LABELLED_PRIOR, 200, seed=9))
    under = guardian_model_recalibrate(
        adapter="http", conditions=["integrity"], live_priors={"integrity": 0.2}
    )
    out = io.StringIO()
    call_command(
        "recalibrate",
        "--model",
        "http",
        "--over",
        str(under.number),
        "--condition",
        "integrity",
        "--live-prior",
        "integrity=0.05",
        "--json",
        stdout=out,
        stderr=io.StringIO(),
    )
    summary = json.loads(out.getvalue())
    top = GuardianModelVersion.objects.get(number=summary["number"])
    assert top.over == under
    assert top.base_model_version == under.model_version
    assert top.model_version == f"{PIN}/cal-{under.number}/cal-{top.number}"
    assert summary["over"] == under.number
    run = make_run(policy_version=active_version, guardian="http")
    guardian = versioned_guardian(top, base_guardian(run), deadline_seconds=5.0)
    projection, _, raw = _cases(0.5, 1, seed=10)[0]
    expected = apply_map(
        top.calibration["integrity"], apply_map(under.calibration["integrity"], raw)
    )
    assert guardian.answer(projection, [Condition.INTEGRITY])["integrity"] == pytest.approx(
        expected, abs=1e-6
    )
    assert guardian.model_version == top.model_version


def test_held_out_figures_on_a_few_rows_carry_intervals_and_say_when_they_are_noise(
    active_version, prior_vendor
):
    _label(_cases(LABELLED_PRIOR, 60, seed=12))
    out = io.StringIO()
    call_command(
        "recalibrate",
        "--model",
        "http",
        "--condition",
        "integrity",
        stdout=out,
        stderr=io.StringIO(),
    )
    version = GuardianModelVersion.objects.get()
    paired = version.figures["integrity"]["held_out_paired"]
    ece = paired["figures"]["ece"]
    assert ece["n"] == version.figures["integrity"]["n_held_out"] == 18
    assert ece["low"] <= ece["difference"] <= ece["high"]
    assert ece["current"] == pytest.approx(version.figures["integrity"]["before"]["ece"], abs=1e-9)
    flagged = paired["figures"]["benign_flagged"]
    # The map's fall in ECE is beyond the noise of 18 rows; its one more flagged row is not.
    assert ece["significant"]
    assert ece["difference"] < 0
    assert not flagged["significant"]
    text = out.getvalue()
    assert "on 18 held-out rows: read as a rough sign" in text
    assert f"ECE {ece['current']:.3f} → {ece['candidate']:.3f} (difference" in text
    assert f"flagged {flagged['current']:.3f} → {flagged['candidate']:.3f}" in text
    assert "within the noise" in text.split("flagged", 1)[1].split(";")[0]


# ---- issue 25's situation end to end: the audit sample sets the prior -------------------------


def _escalates(p: float) -> bool:
    """Integrity at the default policy: t* = 0.10, δ = 0.05; the band and above escalate."""
    return p >= T_STAR - 0.05


def test_the_audit_sample_reaches_the_queue_and_its_labels_set_the_prior_a_map_answers_at(
    active_version, prior_vendor, reviewer
):
    from django.utils import timezone

    from escalations.audit_samples import audit_sample_open
    from escalations.models import Escalation, EscalationKind, ExampleSelection
    from escalations.verdicts import escalation_resolve
    from policies.priors import live_prior

    # What people labelled before: imported, about half injected.
    _label(_cases(LABELLED_PRIOR, 400, seed=21), source=ExampleSource.IMPORT)
    # Two weeks of traffic at 5 %: the turns the policy escalated were labelled by their
    # verdicts; of those it let through, a share was drawn for audit and reviewers answered.
    traffic = _cases(TRAFFIC_PRIOR, 1000, seed=22)
    run = make_run(policy_version=active_version, guardian="http")
    audited, let_through = [], 0
    for index, (projection, label, p) in enumerate(traffic):
        turn = make_turn(run=run, index=index, projection=projection)
        decision = make_decision(
            turn=turn,
            answers={"integrity": p},
            guardian_model_version=PIN,
            outcome="escalate" if _escalates(p) else "continue",
        )
        if _escalates(p):
            Escalation.objects.create(
                run=run,
                turn=turn,
                kind=EscalationKind.UNCERTAIN,
                status="answered",
                resolved_at=timezone.now(),
                summary="integrity uncertain",
                conditions=",integrity,",
                deadline=timezone.now(),
            )
            LabelledExample.objects.create(
                condition="integrity",
                projection=projection,
                probability=p,
                label=label,
                source=ExampleSource.HUMAN,
                selection=ExampleSelection.ESCALATED,
                question_set_version=DEFAULT_QUESTION_SET_VERSION,
                model_version=PIN,
            )
            continue
        let_through += 1
        item = audit_sample_open(
            run=run,
            turn=turn,
            # The draw keyed by the traffic's own index, not by the database's ids (which depend
            # on the tests before this one): the same turns are drawn on every database and in
            # any order, so the figures read off the sample are the same too. (That the draw
            # is fair and keyed by the decision is tests/test_audit_samples.py's to prove.)
            decision_id=index + 1,
            content_hash=hashlib.sha256(f"traffic turn {index}".encode()).hexdigest(),
            outcome=decision.outcome,
            answers=decision.answers,
            reasons=[],
            now=timezone.now(),
            share=0.4,
        )
        if item is not None:
            audited.append((item, label))
    assert 0.3 * let_through <= len(audited) <= 0.5 * let_through  # about 0.4 of them
    queued = Escalation.objects.filter(kind=EscalationKind.AUDIT_SAMPLE, status="open")
    assert queued.count() == len(audited)  # they reach the queue, and hold nothing
    for item, label in audited:
        escalation_resolve(
            escalation_id=item.pk,
            reviewer=reviewer,
            decision="answer",
            answer={"integrity": label},
        )

    estimate = live_prior("integrity")
    truth = float(np.mean([label for _, label, _ in traffic]))
    assert estimate.source == "audit_sample"
    assert estimate.low <= truth <= estimate.high
    assert estimate.value == pytest.approx(truth, abs=0.015)

    version = guardian_model_recalibrate(adapter="http", conditions=["integrity"])
    mapping = version.calibration["integrity"]
    assert version.figures["integrity"]["prior"]["live"]["source"] == "audit_sample"
    fresh = _cases(TRAFFIC_PRIOR, 6000, seed=23)
    base = _measured({"method": "isotonic", "x": [0.0, 1.0], "y": [0.0, 1.0]}, fresh)
    recalibrated = _measured(mapping, fresh)
    # Issue 25's done-when: ECE at the traffic prior ≤ 0.03, benign flagged within 1.5× base.
    assert recalibrated["ece"] <= 0.03
    assert recalibrated["flagged"] <= 1.5 * base["flagged"]


def test_the_versions_page_shows_both_priors_and_the_held_out_interval(
    active_version, prior_vendor, client, admin
):
    from django.urls import reverse

    _label(_cases(LABELLED_PRIOR, 200, seed=13))
    version = guardian_model_recalibrate(
        adapter="http", conditions=["integrity"], live_priors={"integrity": 0.05}
    )
    client.force_login(admin)
    page = client.get(reverse("policies:model_detail", args=[version.pk])).content.decode()
    figures = version.figures["integrity"]
    priors = page.split('id="priors-title"')[1].split("</section>")[0]
    assert f"{figures['prior']['fitted']:.3f}" in priors
    assert "0.050" in priors
    assert "stated by an admin" in priors
    ece = figures["held_out_paired"]["figures"]["ece"]
    assert f"ECE after − before, 95 %: {ece['low']:.3f} to {ece['high']:.3f}" in page
    assert "read at 0.050, the live prior" in page
