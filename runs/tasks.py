"""Celery tasks that drive runs. They take ids, call one service, and own only retries."""

from celery import shared_task

from runs import demo_traffic
from runs.external import external_webhook_deliver
from runs.retention import retention_apply
from runs.services import run_advance_slice
from runs.sweeps import run_sweep_stalled


# Nothing reads these tasks' results (the run's rows are the record), so none is stored: a
# result write per turn would cost the broker a round trip for nobody. A caller that wants
# one (the task round-trip benchmark) asks with apply_async(ignore_result=False).
@shared_task(name="runs.advance_run", acks_late=True, max_retries=None, ignore_result=True)
def advance_run(run_id: int) -> str:
    """Advance the run for one time slice (one turn or more). A duplicate or stale message
    finds nothing to claim and is dropped; a failed turn is recorded on the run and picked up
    again by the sweeper."""
    return run_advance_slice(run_id=run_id)


@shared_task(name="runs.sweep_stalled_runs", ignore_result=True)
def sweep_stalled_runs() -> list[int]:
    """Re-enqueue runs marked running that no worker is advancing (beat, every 30 s)."""
    return run_sweep_stalled()


@shared_task(name="runs.apply_retention", ignore_result=True)
def apply_retention() -> dict:
    """One retention pass (beat, hourly; runs/retention.py): finished runs past their days
    archived and purged, old labelled examples and notification deliveries deleted. Takes
    nothing and may run twice: each pass does what is due now."""
    return retention_apply().as_dict()


@shared_task(name="runs.demo_traffic_tick", ignore_result=True)
def demo_traffic_tick() -> int | None:
    """Start one demo traffic run (beat, every GUARDIAN_DEMO_TRAFFIC_SECONDS when set); its id,
    or None once the cap is reached."""
    run = demo_traffic.demo_traffic_start()
    return run.pk if run else None


@shared_task(
    name="runs.deliver_verdict",
    bind=True,
    acks_late=True,
    max_retries=8,
    ignore_result=True,
)
def deliver_verdict(self, escalation_id: int) -> str:
    """POST an external run's verdict to its webhook, signed; retried with backoff (1 s, 2 s,
    4 s … ) while the receiver does not answer 2xx. Delivered once: a duplicate message finds
    it delivered and sends nothing."""
    outcome = external_webhook_deliver(escalation_id=escalation_id)
    if outcome == "retry":
        raise self.retry(countdown=min(2**self.request.retries, 300))
    return outcome
