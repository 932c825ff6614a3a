"""Correlated errors on the monitoring page: ended runs are folded once, by the day they ended,
into per-run tables of actor wrong or right × guardian flagged or missed, and the page reads
the figures from the day rows — computed here from runs, decisions and verdicts made by hand."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from escalations.models import Verdict
from guardian_core.engine.correlated_errors import Reading, Table
from policies import monitoring, tasks
from policies.models import MonitoringCursor, MonitoringDay
from runs.models import Run, RunStatus
from tests.factories import make_decision, make_escalation, make_policy_version, make_run, make_turn

pytestmark = pytest.mark.django_db

# make_policy_version's integrity threshold: t* 0.1, δ 0.05, so 0.01 is missed and 0.5 flagged.
MISS, FLAG = 0.01, 0.5
RESOLVED = {"reject": "rejected", "approve": "approved"}
GOAL = '<script>alert("goal")</script> Refund <b>order</b>'


@pytest.fixture(autouse=True)
def fold_at_once(settings):
    settings.GUARDIAN_MONITORING_SETTLE_SECONDS = 0


@pytest.fixture
def version():
    return make_policy_version()


def _run(version, ps, *, status, stop_reason="", rejected=(), approved=(), reviewer=None):
    """A run whose turn i had integrity probability ps[i], ended as `status`; a person
    rejected the escalations of the turns in `rejected` and approved those in `approved`."""
    ended = status in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)
    run = make_run(
        policy_version=version,
        goal=GOAL,
        status=status,
        stop_reason=stop_reason,
        finished_at=timezone.now() - timedelta(minutes=1) if ended else None,
    )
    for index, p in enumerate(ps):
        turn = make_turn(run=run, index=index)
        make_decision(turn=turn, answers={"integrity": p})
        for indices, decision in ((rejected, "reject"), (approved, "approve")):
            if index in indices:
                Verdict.objects.create(
                    escalation=make_escalation(
                        turn=turn, status=RESOLVED[decision], resolved_at=timezone.now()
                    ),
                    decision=decision,
                    reason="not this" if decision == "reject" else "",
                    reviewer=reviewer,
                )
    return run


def _misses_where_rejected(version, reviewer, runs=10):
    """The guardian misses turns 0–2, whose last a person rejected, and flags turns 3–5,
    after which the run succeeds: it misses exactly where the actor was wrong."""
    for _ in range(runs):
        _run(
            version,
            [MISS, MISS, MISS, FLAG, FLAG, FLAG],
            status=RunStatus.SUCCEEDED,
            stop_reason="goal_reached",
            rejected=[2],
            reviewer=reviewer,
        )


def _independent(version, reviewer):
    """Half the wrong turns and half the right ones missed in five runs, three quarters of each
    in five more: the guardian's misses do not depend on the actor."""
    for ps in ([MISS, FLAG, MISS, FLAG], [MISS, MISS, MISS, FLAG]):
        for _ in range(5):
            _run(
                version,
                ps + ps,
                status=RunStatus.SUCCEEDED,
                stop_reason="goal_reached",
                rejected=[3],
                reviewer=reviewer,
            )


def _integrity(client, admin) -> tuple[str, object]:
    client.force_login(admin)
    response = client.get(reverse("policies:monitoring"))
    assert response.status_code == 200
    figures = dict(response.context["correlated"])
    return response.content.decode(), figures["integrity"]


def test_an_ended_run_is_folded_once_by_its_turns_and_verdicts(version, reviewer):
    run = _run(
        version,
        [MISS, FLAG, MISS, FLAG, MISS],
        status=RunStatus.SUCCEEDED,
        stop_reason="goal_reached",
        rejected=[1],
        approved=[3],
        reviewer=reviewer,
    )
    going = _run(version, [MISS], status=RunStatus.RUNNING, rejected=[0], reviewer=reviewer)

    assert monitoring.correlated_catch_up() == 1
    assert monitoring.correlated_catch_up() == 0  # caught up: nothing counted twice
    # Turns 0–1 wrong (a rejection at 1): missed, flagged. Turns 2–4 right: missed, flagged,
    # missed.
    [day] = MonitoringDay.objects.all()
    assert day.runs == 1
    assert day.correlated == {"integrity": {Table(1, 1, 1, 2).key(): 1}}
    assert MonitoringCursor.objects.get().last_run_id == run.pk

    # The running run counts once it has ended, whatever its id.
    Run.objects.filter(pk=going.pk).update(
        status=RunStatus.FAILED, stop_reason="rejected_by_reviewer", finished_at=timezone.now()
    )
    assert monitoring.correlated_catch_up() == 1
    day.refresh_from_db()
    assert day.correlated["integrity"] == {Table(1, 1, 1, 2).key(): 1, Table(0, 1, 0, 0).key(): 1}


def test_endings_that_judge_nobody_or_are_the_guardians_own_stop_label_no_turn(version):
    _run(version, [MISS, FLAG], status=RunStatus.FAILED, stop_reason="infeasible")
    _run(version, [MISS], status=RunStatus.FAILED, stop_reason="escalation_expired")
    _run(version, [MISS, FLAG], status=RunStatus.FAILED, stop_reason="turn_cap")
    _run(version, [FLAG], status=RunStatus.CANCELLED, stop_reason="cancelled")

    assert monitoring.correlated_catch_up() == 4
    [day] = MonitoringDay.objects.all()
    assert day.runs == 4
    # Only the capped run (wrong: missed, flagged) and the cancelled one (wrong: flagged).
    assert day.correlated == {"integrity": {"1,1,0,0": 1, "1,0,0,0": 1}}


def test_the_page_says_independence_does_not_hold_where_the_guardian_misses_what_people_rejected(
    client, admin, reviewer, version
):
    _misses_where_rejected(version, reviewer)
    body, e = _integrity(client, admin)

    assert (e.wrong, e.misses_on_wrong, e.right, e.fired_on_right, e.runs) == (30, 30, 30, 30, 10)
    assert e.miss_rate_on_wrong == 1.0
    assert e.fire_rate_on_right == 1.0
    assert e.phi == pytest.approx(1.0)
    assert e.reading == Reading.DEPENDENT
    assert e.caution == ""
    assert '<section aria-labelledby="correlated-title"' in body
    assert "over the 10 runs that ended in the last 14 days" in body
    assert "The Runs column counts, per condition, those of them" in body  # why they differ
    assert "<th>Runs measured</th>" in body
    section = body.split('id="correlated-integrity"')[1].split("</li>")[0]
    assert "The guardian misses more where the actor is wrong" in section
    assert "independence does not hold" in section
    row = body.split('class="correlated-integrity"')[1].split("</tr>")[0]
    assert '<td><span class="cell-label">Actor wrong </span>30</td>' in row
    assert "1.000 [0.886, 1.000]" in row  # Wilson's interval for 30 of 30


def test_the_page_says_no_difference_where_the_guardians_misses_do_not_depend_on_the_actor(
    client, admin, reviewer, version
):
    _independent(version, reviewer)
    body, e = _integrity(client, admin)

    assert (e.wrong, e.misses_on_wrong, e.right, e.fired_on_right) == (40, 25, 40, 15)
    assert e.difference == pytest.approx(0.0)
    assert e.phi == pytest.approx(0.0)
    lo, hi = e.difference_interval
    assert lo <= 0 <= hi
    assert e.reading == Reading.NO_DIFFERENCE
    section = body.split('id="correlated-integrity"')[1].split("</li>")[0]
    assert "No difference beyond noise on 80 turns" in section


def test_few_turns_carry_a_caution_and_run_text_is_never_shown_raw(
    client, admin, reviewer, version
):
    _misses_where_rejected(version, reviewer, runs=2)
    body, e = _integrity(client, admin)

    assert e.reading == Reading.TOO_FEW
    section = body.split('id="correlated-integrity"')[1].split("</li>")[0]
    assert "Caution: Too few turns to tell: 6 actor-wrong turns from 2 runs" in section
    assert section.count("Too few turns") == 1  # said once, with the counts
    assert "<script>alert" not in body
    # Conditions whose probability no decision logged are shown, empty.
    assert "<strong>drift</strong>: No turn to measure yet.</li>" in body


def test_the_page_reads_day_rows_whatever_the_number_of_ended_runs(
    client, admin, reviewer, version
):
    client.force_login(admin)
    _misses_where_rejected(version, reviewer, runs=1)
    client.get(reverse("policies:monitoring"))  # folds it
    with CaptureQueriesContext(connection) as few:
        client.get(reverse("policies:monitoring"))
    _misses_where_rejected(version, reviewer, runs=6)
    tasks.monitoring_catch_up()  # beat folds the decisions and the ended runs
    with CaptureQueriesContext(connection) as many:
        body = client.get(reverse("policies:monitoring")).content.decode()

    assert len(many) == len(few)
    assert "over the 7 runs that ended" in body
