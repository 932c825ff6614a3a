"""Shadow mode: a candidate decides every new turn beside the real decision, recorded and never
enforced (policies/shadow.py)."""

import pytest
from django.core.exceptions import ValidationError

from demo.setup import demo_policy_version
from escalations.models import Escalation
from guardian_core.adapters.local import LocalGuardian
from guardian_core.models import GuardianModelVersion
from policies import shadow
from policies.models import ShadowDecision, ShadowTrial
from policies.services import policy_version_create
from runs.models import Decision
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db

SCENARIOS = ["goal_reached", "drifting_agent", "stagnating_agent", "injected_instruction"]


@pytest.fixture(autouse=True)
def _settled_at_once(settings):
    settings.GUARDIAN_SHADOW_SETTLE_SECONDS = 0


def _candidate(**changes):
    """A copy of the demo's version with `changes` to its thresholds, not active."""
    active = demo_policy_version()
    thresholds = {c: dict(v) for c, v in active.thresholds.items()}
    for condition, values in changes.items():
        thresholds[condition].update(values)
    for values in thresholds.values():
        values.pop("t_star", None)
    return policy_version_create(
        thresholds=thresholds,
        question_set=active.question_set,
        question_set_version=active.question_set_version,
        limits=active.limits,
        label="candidate",
    )


def _trace(run):
    return [
        (d.turn.index, d.outcome, d.stop_reason, d.content_hash)
        for d in Decision.objects.filter(turn__run=run).select_related("turn")
    ]


def _catch_up():
    return shadow.shadow_trials_catch_up()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_a_copy_of_the_pinned_version_decides_every_turn_as_the_real_decision(scenario):
    """The candidate is given exactly the real decision's inputs (answers, usage, calls, the
    windows' history, the replans so far): the same thresholds decide the same way."""
    trial = shadow.shadow_trial_start(policy_version_id=_candidate().pk, comment="a copy")
    run = drive(start(scenario))
    assert _catch_up() == run.turns.count()
    rows = ShadowDecision.objects.filter(trial=trial, run=run).order_by("turn_index")
    assert [(r.turn_index, r.outcome, r.stop_reason) for r in rows] == [
        (d.turn.index, d.outcome, d.stop_reason)
        for d in Decision.objects.filter(turn__run=run).select_related("turn")
    ]
    assert not rows.filter(differs=True).exists()


def test_a_candidate_that_would_escalate_is_recorded_and_never_enforced():
    control = drive(start("goal_reached"))
    # goal_reached's band is now 0.01–0.99: the real 0.97 that stopped the run is uncertain.
    candidate = _candidate(goal_reached={"c_stop": 1.0, "c_cont": 1.0, "delta": 0.49})
    trial = shadow.shadow_trial_start(policy_version_id=candidate.pk, comment="wide band")
    run = drive(start("goal_reached"))
    _catch_up()

    assert (run.status, run.stop_reason, run.final_answer) == (
        control.status,
        control.stop_reason,
        control.final_answer,
    )
    assert [(i, o, s) for i, o, s, _ in _trace(run)] == [
        (i, o, s) for i, o, s, _ in _trace(control)
    ]
    assert not Escalation.objects.filter(run=run).exists()
    last = ShadowDecision.objects.get(trial=trial, run=run, turn_index=1)
    assert (last.real_outcome, last.outcome, last.differs) == ("stop_success", "escalate", True)
    summary = shadow.shadow_trial_summary(trial)
    # Turn 0's goal_reached answer (the script's default) is in the wide band as well.
    first = ShadowDecision.objects.get(trial=trial, run=run, turn_index=0)
    assert (first.real_outcome, first.outcome) == ("continue", "escalate")
    assert (summary.decided, summary.differs) == (2, 2)
    assert (summary.real_escalations, summary.candidate_escalations) == (0, 2)
    assert summary.real_escalation_rate == 0
    assert summary.candidate_escalation_rate == 1
    assert set(summary.transitions) == {
        ("continue", "escalate", 1),
        ("stop_success", "escalate", 1),
    }
    assert list(shadow.shadow_differences(trial)) == [last, first]


def test_only_turns_decided_after_the_start_are_shadowed_and_each_once():
    before = drive(start("goal_reached"))
    trial = shadow.shadow_trial_start(policy_version_id=_candidate().pk, comment="after")
    after = drive(start("goal_reached"))
    _catch_up()
    _catch_up()  # a second pass (beat, or two workers) finds the batch done
    assert not ShadowDecision.objects.filter(run=before).exists()
    assert ShadowDecision.objects.filter(trial=trial, run=after).count() == 2
    trial.refresh_from_db()
    assert trial.cursor == Decision.objects.filter(turn__run=after).latest("pk").pk
    assert trial.caught_up_at is not None


def test_a_decision_younger_than_the_settling_time_waits_for_the_next_pass(settings):
    settings.GUARDIAN_SHADOW_SETTLE_SECONDS = 3600
    trial = shadow.shadow_trial_start(policy_version_id=_candidate().pk, comment="later")
    drive(start("goal_reached"))
    assert _catch_up() == 0
    trial.refresh_from_db()
    assert trial.cursor == trial.after_decision_id
    settings.GUARDIAN_SHADOW_SETTLE_SECONDS = 0
    assert _catch_up() == 2


def test_a_stopped_trial_decides_nothing_more_and_keeps_what_it_recorded():
    trial = shadow.shadow_trial_start(policy_version_id=_candidate().pk, comment="stop me")
    drive(start("goal_reached"))
    _catch_up()
    assert shadow.shadow_trial_stop(trial_id=trial.pk) is True
    assert shadow.shadow_trial_stop(trial_id=trial.pk) is False
    drive(start("goal_reached"))
    assert _catch_up() == 0
    assert ShadowDecision.objects.filter(trial=trial).count() == 2


def test_starting_a_trial_names_every_problem_at_once():
    active = demo_policy_version()
    with pytest.raises(ValidationError) as raised:
        shadow.shadow_trial_start(policy_version_id=active.pk, comment="  ")
    problems = raised.value.message_dict
    assert problems["comment"] == ["Say what this trial is for."]
    assert "is active" in problems["candidate"][0]
    with pytest.raises(ValidationError) as raised:
        shadow.shadow_trial_start(comment="none")
    assert "Choose one candidate" in raised.value.message_dict["candidate"][0]


def test_a_second_running_trial_of_the_same_candidate_is_refused():
    candidate = _candidate()
    shadow.shadow_trial_start(policy_version_id=candidate.pk, comment="first")
    with pytest.raises(ValidationError) as raised:
        shadow.shadow_trial_start(policy_version_id=candidate.pk, comment="second")
    assert "already running" in raised.value.message_dict["candidate"][0]
    assert ShadowTrial.objects.count() == 1


# Every integrity probability halved: the shadow answer shows the candidate was asked.
HALF = {"method": "isotonic", "x": [0.0, 1.0], "y": [0.0, 0.5]}


def test_a_candidate_guardian_model_answers_the_logged_projection_beside_the_real_one():
    version = GuardianModelVersion.objects.create(
        number=1,
        adapter="local",
        base_model_version=LocalGuardian().model_version,
        kind="recalibrated",
        calibration={"integrity": HALF},
        example_ids=[],
        examples_digest="0" * 64,
    )
    trial = shadow.shadow_trial_start(guardian_model_version_id=version.pk, comment="half")
    scripted = drive(start("goal_reached"))  # a scripted guardian: not the candidate's adapter
    local = drive(start("injected_instruction", guardian="local"))
    _catch_up()

    real = Decision.objects.get(turn__run=local)
    row = ShadowDecision.objects.get(trial=trial, run=local)
    assert row.answers["integrity"] == pytest.approx(real.answers["integrity"] / 2, abs=1e-6)
    assert real.guardian_model_version == LocalGuardian().model_version  # never used for real
    assert not ShadowDecision.objects.filter(run=scripted).exists()
    trial.refresh_from_db()
    assert trial.skipped == scripted.turns.count()
