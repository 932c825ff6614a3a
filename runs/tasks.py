"""Celery tasks that drive runs. They take ids, call one service, and own only retries."""

from celery import shared_task

from runs.services import run_advance, run_sweep_stalled


@shared_task(name="runs.advance_run", acks_late=True, max_retries=None)
def advance_run(run_id: int) -> str:
    """Advance one turn. A duplicate or stale message finds nothing to claim and is dropped;
    a failed turn is recorded on the run and picked up again by the sweeper."""
    return run_advance(run_id=run_id)


@shared_task(name="runs.sweep_stalled_runs")
def sweep_stalled_runs() -> list[int]:
    """Re-enqueue runs marked running that no worker is advancing (beat, every 30 s)."""
    return run_sweep_stalled()
