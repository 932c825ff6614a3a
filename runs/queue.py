"""Enqueueing a run's next turn, only once the transaction that made it due has committed.

The tasks are sent by name (runs/tasks.py registers them): the tasks call the services, and
the services enqueue, so naming the task here keeps the arrow one way (tasks -> services ->
queue). ignore_result as the tasks declare it: nothing reads their results, and a result
subscription per message would cost the broker a round trip for nobody."""

from celery import current_app
from django.db import transaction

from runs.models import RunWebhook

ADVANCE_RUN = "runs.advance_run"
DELIVER_VERDICT = "runs.deliver_verdict"


def enqueue_after_commit(run_id: int) -> None:
    transaction.on_commit(lambda: enqueue(run_id))


def enqueue(run_id: int) -> None:
    current_app.send_task(ADVANCE_RUN, args=(run_id,), ignore_result=True)


def verdict_webhook_after_commit(escalation_id: int) -> None:
    """Send an external run's verdict to its webhook, if it has one, once it is committed."""

    def send() -> None:
        if RunWebhook.objects.filter(run__escalations__pk=escalation_id).exists():
            verdict_webhook_send(escalation_id)

    transaction.on_commit(send)


def verdict_webhook_send(escalation_id: int) -> None:
    current_app.send_task(DELIVER_VERDICT, args=(escalation_id,), ignore_result=True)
