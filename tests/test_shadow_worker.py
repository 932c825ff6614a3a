"""Shadow mode on a real Celery worker: the runs' turns and the trial's pass (beat's task) both
run in the worker process, and the run ends as its real decisions say."""

import pytest

from escalations.models import Escalation
from policies.models import ShadowDecision
from policies.shadow import shadow_trial_start
from policies.tasks import shadow_trials_catch_up
from runs.models import RunStatus
from tests.processes import start_worker, stop_worker
from tests.runs_helpers import start
from tests.test_shadow import _candidate
from tests.test_worker_runs import clean_queue, status_of, wait_for, worker_env

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

__all__ = ["clean_queue"]  # a fixture, used by name


def test_the_worker_decides_in_shadow_what_the_run_never_enforces(clean_queue):
    candidate = _candidate(goal_reached={"c_stop": 1.0, "c_cont": 1.0, "delta": 0.49})
    trial = shadow_trial_start(policy_version_id=candidate.pk, comment="on the worker")
    worker = start_worker(**worker_env(GUARDIAN_SHADOW_SETTLE_SECONDS="0"))
    try:
        run = start("goal_reached")
        wait_for(lambda: status_of(run) != RunStatus.RUNNING, timeout=60, what="the run")
        shadow_trials_catch_up.apply_async(ignore_result=False).get(timeout=60)
    finally:
        log = stop_worker(worker)
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == (RunStatus.SUCCEEDED, "goal_reached"), log
    assert not Escalation.objects.filter(run=run).exists()
    rows = ShadowDecision.objects.filter(trial=trial, run=run).order_by("turn_index")
    assert [(r.real_outcome, r.outcome) for r in rows] == [
        ("continue", "escalate"),
        ("stop_success", "escalate"),
    ]
