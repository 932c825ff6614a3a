"""Nothing hangs, for the verdict webhook of an external run: a delivery whose task was lost is
sent again by the sweeper, one that spent every attempt is given up, and the run page says
which (issue 26, item 5)."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from escalations.verdicts import escalation_resolve
from runs.external import WEBHOOK_MAX_ATTEMPTS, webhook_deliveries_sweep
from runs.models import WebhookDelivery
from runs.queue import DELIVER_VERDICT
from runs.sweeps import run_sweep_stalled
from tests.factories import backdate
from tests.test_external_runs import _Receiver, api, refund, start, step  # noqa: F401

pytestmark = pytest.mark.django_db


def _drain(queue: str = "notifications") -> list[tuple[str, tuple]]:
    """The task messages waiting on `queue` of the configured broker, taken off it: (task
    name, arguments) each."""
    from celery import current_app

    taken = []
    with current_app.connection_for_write() as broker:
        waiting = broker.SimpleQueue(queue)
        try:
            while True:
                try:
                    message = waiting.get(block=False)
                except waiting.Empty:
                    break
                args = message.decode()[0] if isinstance(message.decode(), list) else ()
                taken.append((message.headers.get("task"), tuple(args)))
                message.ack()
        finally:
            waiting.close()
    return taken


@pytest.fixture
def sent_tasks():
    """What the test sends to the notifications queue (through the real broker: Redis in CI,
    the filesystem broker on the embedded default), read off it by `sent_tasks.take()`."""
    _drain()

    class Sent:
        @staticmethod
        def take() -> list[tuple[str, tuple]]:
            return _drain()

    yield Sent()
    _drain()


def _decided_escalation(api, reviewer, url, django_capture_on_commit_callbacks) -> int:  # noqa: F811
    run = start(api, webhook_url=url)
    gate = step(api, run["id"], 0, refund())
    with django_capture_on_commit_callbacks(execute=False):  # the first send is "lost"
        escalation_resolve(
            escalation_id=gate["escalation"]["id"], reviewer=reviewer, decision="approve"
        )
    return gate["escalation"]["id"]


def test_a_verdict_whose_message_was_lost_before_any_attempt_is_sent_by_the_sweep(
    api,  # noqa: F811
    reviewer,
    sent_tasks,
    django_capture_on_commit_callbacks,
):
    escalation_id = _decided_escalation(
        api, reviewer, "http://127.0.0.1:9/none", django_capture_on_commit_callbacks
    )
    assert webhook_deliveries_sweep() == {"resent": [], "given_up": []}  # not idle yet
    later = timezone.now() + timedelta(minutes=11)
    assert webhook_deliveries_sweep(now=later) == {"resent": [escalation_id], "given_up": []}
    assert sent_tasks.take() == [(DELIVER_VERDICT, (escalation_id,))]


def test_an_idle_undelivered_verdict_is_sent_again_then_given_up_and_the_page_says_so(
    api,  # noqa: F811
    reviewer,
    auditor,
    client,
    sent_tasks,
    django_capture_on_commit_callbacks,
):
    from runs.external import external_webhook_deliver

    receiver = _Receiver([500] * 20)
    try:
        escalation_id = _decided_escalation(
            api, reviewer, receiver.url, django_capture_on_commit_callbacks
        )
        assert external_webhook_deliver(escalation_id=escalation_id) == "retry"
    finally:
        receiver.close()
    delivery = WebhookDelivery.objects.get()
    run_id = delivery.webhook.run_id
    client.force_login(auditor)
    page = client.get(reverse("runs:detail", args=[run_id])).content.decode()
    assert "not delivered yet after 1 attempt: <bdi>HTTP 500" in page

    # Its task's retries were lost (a broker restarted empty): the sweep sends it again.
    backdate(WebhookDelivery.objects.all(), last_attempt_at=timezone.now() - timedelta(hours=1))
    run_sweep_stalled()
    assert (DELIVER_VERDICT, (escalation_id,)) in sent_tasks.take()

    # Every attempt spent: given up, with the reason, and never sent again.
    WebhookDelivery.objects.update(attempts=WEBHOOK_MAX_ATTEMPTS)
    sent_tasks.take()
    assert webhook_deliveries_sweep() == {"resent": [], "given_up": [escalation_id]}
    assert webhook_deliveries_sweep() == {"resent": [], "given_up": []}
    assert sent_tasks.take() == []
    delivery.refresh_from_db()
    assert delivery.given_up_at is not None
    assert delivery.error.startswith(
        f"given up after {WEBHOOK_MAX_ATTEMPTS} attempts; last: HTTP 500"
    )
    assert external_webhook_deliver(escalation_id=escalation_id) == "given up"
    page = client.get(reverse("runs:detail", args=[run_id])).content.decode()
    assert "given up" in page
    assert "the caller can still read the verdict through the API" in page


def test_a_delivered_verdict_is_left_alone(
    api,  # noqa: F811
    reviewer,
    sent_tasks,
    django_capture_on_commit_callbacks,
):
    from runs.external import external_webhook_deliver

    receiver = _Receiver([200])
    try:
        escalation_id = _decided_escalation(
            api, reviewer, receiver.url, django_capture_on_commit_callbacks
        )
        assert external_webhook_deliver(escalation_id=escalation_id) == "delivered"
    finally:
        receiver.close()
    later = timezone.now() + timedelta(hours=1)
    assert webhook_deliveries_sweep(now=later) == {"resent": [], "given_up": []}
    assert sent_tasks.take() == []
