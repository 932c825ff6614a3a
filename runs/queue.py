"""Enqueueing a run's next turn, only once the transaction that made it due has committed.
runs/tasks.py imports the services; this module imports the task only when it sends one."""

from django.db import transaction


def enqueue_after_commit(run_id: int) -> None:
    transaction.on_commit(lambda: enqueue(run_id))


def enqueue(run_id: int) -> None:
    from runs.tasks import advance_run

    advance_run.delay(run_id)


def verdict_webhook_after_commit(escalation_id: int) -> None:
    """Send an external run's verdict to its webhook, if it has one, once it is committed."""

    def send() -> None:
        from runs.models import RunWebhook
        from runs.tasks import deliver_verdict

        if RunWebhook.objects.filter(run__escalations__pk=escalation_id).exists():
            deliver_verdict.delay(escalation_id)

    transaction.on_commit(send)
