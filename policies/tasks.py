"""Celery tasks of the admins' room: the monitoring rollup, shadow trials, guardian model jobs
and their sweeper.

Each takes ids (or nothing), calls one service and owns only its schedule. The task names are
older than this app (they are the broker's, and the beat schedule's, not module paths):
messages queued before the move still find their task.
"""

from celery import shared_task

from policies import learning, monitoring, shadow

# A pass stops after this many batches (the next minute's pass goes on), so one task never
# holds a worker for long whatever backlog there is.
MONITORING_BATCHES_PER_PASS = 20


@shared_task(name="guardian_core.monitoring_catch_up", ignore_result=True)
def monitoring_catch_up() -> int:
    """Fold the decisions logged since the last pass into the monitoring page's days (beat,
    every minute), batch after batch until caught up, and the runs that ended since into their
    correlated errors the same way; how many decisions were folded."""
    total = 0
    for _ in range(MONITORING_BATCHES_PER_PASS):
        done = monitoring.monitoring_catch_up(limit=monitoring.FOLD_BATCH)
        total += done
        if not done:
            break
    for _ in range(MONITORING_BATCHES_PER_PASS):
        if not monitoring.correlated_catch_up(limit=monitoring.RUN_FOLD_BATCH):
            break
    return total


@shared_task(name=learning.GUARDIAN_MODEL_JOB_TASK, ignore_result=True)
def run_guardian_model_job(job_id: int) -> str:
    """Make the guardian model version an admin asked for (learning.guardian_model_job_run);
    a duplicate message finds the job claimed and does nothing."""
    return learning.guardian_model_job_run(job_id=job_id)


@shared_task(name="policies.sweep_guardian_model_jobs", ignore_result=True)
def sweep_guardian_model_jobs() -> list[int]:
    """Fail the guardian model jobs no worker will finish (beat, every minute;
    learning.guardian_model_jobs_sweep); the ids failed."""
    return learning.guardian_model_jobs_sweep()


@shared_task(name="runs.shadow_trials_catch_up", ignore_result=True)
def shadow_trials_catch_up() -> int:
    """Decide under every running shadow trial's candidate the turns logged since its last
    pass (beat, every 10 s); never enforced."""
    return shadow.shadow_trials_catch_up()
