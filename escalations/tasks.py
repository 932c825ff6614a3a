"""Celery tasks of the escalations app: the reviewers' notifications. They take ids, call one
service, and own only retries."""

from celery import shared_task

from escalations.notifications import (
    MAX_ATTEMPTS,
    NOTIFY_TASK,
    NotificationNotSent,
    escalation_notify,
    escalation_notify_due,
)


# Exponential backoff with jitter: about 30 s, 1, 2, 4, 8, 16 min between the attempts; the
# delivery rows bound the attempts too, so a duplicated task cannot add more.
@shared_task(
    name=NOTIFY_TASK,  # "escalations.notify": notifications.py sends it by this name
    acks_late=True,
    ignore_result=True,
    autoretry_for=(NotificationNotSent,),
    retry_backoff=30,
    retry_backoff_max=30 * 60,
    retry_jitter=True,
    max_retries=MAX_ATTEMPTS - 1,
)
def notify_escalation(escalation_id: int, event: str) -> dict:
    """Send an escalation's `event` notice to every target that has not had it. Raises
    NotificationNotSent (and so retries) while a delivery failed in a way that may pass."""
    outcome = escalation_notify(escalation_id=escalation_id, event=event)
    if outcome.retry:
        raise NotificationNotSent(
            f"escalation {escalation_id} {event}: not sent to {', '.join(outcome.failed)}"
        )
    return {"sent": outcome.sent, "failed": outcome.failed, "skipped": outcome.skipped}


@shared_task(name="escalations.notify_due", ignore_result=True)
def notify_due() -> dict[str, list[int]]:
    """Deadline warnings now due, and arrivals whose notice never left (beat, every 60 s)."""
    return escalation_notify_due()
