"""Reviewers' notifications: a Slack-compatible webhook POST, received by a real HTTP server on
127.0.0.1, and email through Django's locmem backend. Tasks run with .apply() (eager, retries
followed without waiting) or as a real worker; the broker is never mocked."""

import json
import logging
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from celery.signals import task_postrun, task_prerun
from django.core import mail
from django.utils import timezone

from escalations.models import (
    EscalationEvent,
    EscalationEventKind,
    EscalationStatus,
    NotificationDelivery,
)
from escalations.notifications import (
    MAX_ATTEMPTS,
    escalation_notify,
    escalation_notify_after_commit,
    escalation_notify_due,
    notification_targets,
)
from escalations.tasks import notify_escalation
from guardian_core.celery import app as celery_app
from guardian_core.celery import close_broken_or_old_connections
from runs.models import RunStatus
from tests.factories import make_escalation, make_run, make_turn
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _eager_tasks_keep_the_test_transaction():
    """The worker closes "old" connections around each task, as Django does around a request;
    an eager task runs inside the test's transaction, which that would end. Django's test
    client unhooks its request signals the same way."""
    task_prerun.disconnect(close_broken_or_old_connections)
    task_postrun.disconnect(close_broken_or_old_connections)
    yield
    task_prerun.connect(close_broken_or_old_connections)
    task_postrun.connect(close_broken_or_old_connections)


HOSTILE_SUMMARY = "gate: <!channel> refund & <https://evil.example|click> \u202eexe.pdf"


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append(
            {"path": self.path, "type": self.headers["Content-Type"], "body": json.loads(body)}
        )
        status = self.server.answers.pop(0) if self.server.answers else 200
        self.send_response(status)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:  # quiet test output
        pass


@pytest.fixture
def webhook(settings):
    """A real HTTP server on 127.0.0.1 as the configured webhook; `answers` are the statuses
    it gives in turn (200 once they run out)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    server.received, server.answers = [], []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/services/T000/B000/s3cret"
    settings.GUARDIAN_NOTIFY_WEBHOOK_URL = url
    settings.GUARDIAN_NOTIFY_EMAILS = []
    yield SimpleNamespace(url=url, received=server.received, answers=server.answers)
    server.shutdown()
    server.server_close()


def _escalation(**overrides):
    run = make_run(goal="Refund <b>order</b> ord_1 & close it")
    fields = {"summary": HOSTILE_SUMMARY, **overrides}
    return make_escalation(turn=make_turn(run=run), **fields)


def _delivery(escalation, event="arrived") -> NotificationDelivery:
    return NotificationDelivery.objects.get(escalation=escalation, event=event)


def test_an_arrival_posts_the_slack_json_once_however_often_the_task_runs(webhook):
    escalation = _escalation()
    notify_escalation.apply(args=(escalation.pk, "arrived"))
    notify_escalation.apply(args=(escalation.pk, "arrived"))  # a duplicated message

    assert len(webhook.received) == 1
    post = webhook.received[0]
    assert post["path"] == "/services/T000/B000/s3cret"
    assert post["type"] == "application/json"
    body = post["body"]
    assert set(body) == {"text", "blocks"}
    link = f"http://127.0.0.1:8000/escalations/{escalation.pk}/"
    # The untrusted summary cannot form a mention or a link: &, < and > are escaped.
    escaped = "&lt;!channel&gt; refund &amp; &lt;https://evil.example|click&gt;"
    assert escaped in body["text"]
    assert "<!channel>" not in json.dumps(body)
    assert f"<{link}|open>" in body["text"]
    assert "\u202e" not in json.dumps(body, ensure_ascii=False)
    assert "[U+202E]exe.pdf" in body["text"]
    everything = json.dumps(body["blocks"])
    assert "Irreversible or regulated step" in everything  # the kind
    assert escaped in everything  # the summary
    assert f"Run {escalation.run_id}" in everything
    assert "Refund &lt;b&gt;order&lt;/b&gt; ord_1 &amp; close it" in everything  # the goal
    deadline = timezone.localtime(escalation.deadline).strftime("%Y-%m-%d %H:%M")
    assert deadline in everything
    assert link in everything

    delivery = _delivery(escalation)
    assert (delivery.channel, delivery.status, delivery.attempts) == ("webhook", "sent", 1)
    assert delivery.response_status == 200
    # The webhook URL is a credential: the log names its host and a digest, not its path.
    assert "s3cret" not in delivery.target
    assert "127.0.0.1" in delivery.target
    assert EscalationEvent.objects.filter(
        escalation=escalation, kind=EscalationEventKind.NOTIFIED
    ).exists()


def test_a_server_answering_500_then_200_is_retried_and_the_log_shows_both_attempts(webhook):
    webhook.answers.append(500)
    escalation = _escalation()

    result = notify_escalation.apply(args=(escalation.pk, "arrived"))

    assert result.successful()
    assert len(webhook.received) == 2
    assert webhook.received[0]["body"] == webhook.received[1]["body"]
    delivery = _delivery(escalation)
    assert (delivery.status, delivery.attempts, delivery.response_status) == ("sent", 2, 200)
    first, second = delivery.error.splitlines()
    assert first.startswith("attempt 1 ")
    assert "HTTP 500" in first
    assert second.startswith("attempt 2 ")
    assert "sent, HTTP 200" in second


def test_a_server_that_keeps_failing_gets_a_bounded_number_of_attempts(webhook):
    webhook.answers.extend([503] * 50)
    escalation = _escalation()

    result = notify_escalation.apply(args=(escalation.pk, "arrived"))
    notify_escalation.apply(args=(escalation.pk, "arrived"))  # a late duplicate adds none

    assert result.failed()
    assert len(webhook.received) == MAX_ATTEMPTS
    delivery = _delivery(escalation)
    assert (delivery.status, delivery.attempts) == ("failed", MAX_ATTEMPTS)
    assert len(delivery.error.splitlines()) == MAX_ATTEMPTS


def test_a_delivery_another_task_is_sending_waits_until_that_claim_goes_stale(webhook):
    escalation = _escalation()
    (target,) = notification_targets()
    NotificationDelivery.objects.create(
        escalation=escalation,
        event="arrived",
        channel=target.channel,
        target=target.name,
        status="sending",  # a duplicate message's task is on it right now
        attempts=1,
    )

    busy = escalation_notify(escalation_id=escalation.pk, event="arrived")
    assert busy.retry  # the task looks again later
    assert webhook.received == []

    # That task died mid-send: once its claim is stale, this one takes the delivery over.
    NotificationDelivery.objects.update(updated_at=timezone.now() - timedelta(minutes=6))
    taken_over = escalation_notify(escalation_id=escalation.pk, event="arrived")

    assert taken_over.sent == [target.name]
    assert len(webhook.received) == 1
    assert (_delivery(escalation).status, _delivery(escalation).attempts) == ("sent", 2)


def test_the_task_retries_with_exponential_backoff():
    assert notify_escalation.autoretry_for
    assert notify_escalation.retry_backoff == 30
    assert notify_escalation.max_retries == MAX_ATTEMPTS - 1


def test_a_client_error_is_not_retried(webhook):
    webhook.answers.append(404)
    escalation = _escalation()

    notify_escalation.apply(args=(escalation.pk, "arrived"))

    assert len(webhook.received) == 1
    delivery = _delivery(escalation)
    assert (delivery.status, delivery.attempts, delivery.response_status) == ("failed", 1, 404)


def test_an_unreachable_webhook_is_logged_as_a_failed_attempt(settings):
    settings.GUARDIAN_NOTIFY_WEBHOOK_URL = "http://127.0.0.1:9/hook"  # nothing listens there
    settings.GUARDIAN_NOTIFY_EMAILS = []
    escalation = _escalation()

    outcome = escalation_notify(escalation_id=escalation.pk, event="arrived")

    assert outcome.retry
    assert outcome.sent == []
    delivery = _delivery(escalation)
    assert (delivery.status, delivery.attempts) == ("failed", 1)
    assert "ConnectError" in delivery.error


def test_email_goes_to_each_address_once_as_plain_text(settings):
    settings.GUARDIAN_NOTIFY_EMAILS = ["a@example.org", "b@example.org"]
    settings.GUARDIAN_NOTIFY_WEBHOOK_URL = ""
    settings.DEFAULT_FROM_EMAIL = "guardian@example.org"
    escalation = _escalation(summary="gate: line one\nline two <script>alert(1)</script>")

    notify_escalation.apply(args=(escalation.pk, "arrived"))
    notify_escalation.apply(args=(escalation.pk, "arrived"))

    assert sorted(m.to[0] for m in mail.outbox) == ["a@example.org", "b@example.org"]
    message = mail.outbox[0]
    assert message.from_email == "guardian@example.org"
    assert "\n" not in message.subject
    assert message.subject.startswith(f"[Guardian] New escalation: #{escalation.pk}")
    assert message.content_subtype == "plain"
    assert not getattr(message, "alternatives", None)
    # Plain text: the summary and the goal as written, nothing to render.
    assert "<script>alert(1)</script>" in message.body
    assert "Refund <b>order</b> ord_1 & close it" in message.body
    assert f"http://127.0.0.1:8000/escalations/{escalation.pk}/" in message.body
    assert NotificationDelivery.objects.filter(escalation=escalation, status="sent").count() == 2


def test_a_reviewer_gets_the_email_in_their_language_and_time_zone(settings, django_user_model):
    from guardian_core.preferences import preferences_save

    settings.GUARDIAN_NOTIFY_EMAILS = ["Camille@Example.org", "list@example.org"]
    settings.GUARDIAN_NOTIFY_WEBHOOK_URL = ""
    camille = django_user_model.objects.create_user("camille", email="camille@example.org")
    preferences_save(camille, language="fr", time_zone="Asia/Tokyo", keyboard_shortcuts=True)
    deadline = timezone.now().replace(hour=12, minute=30, second=0, microsecond=0)
    escalation = _escalation(deadline=deadline)

    notify_escalation.apply(args=(escalation.pk, "arrived"))

    sent = {m.to[0]: m for m in mail.outbox}
    french, server = sent["Camille@Example.org"], sent["list@example.org"]
    assert french.subject.startswith(f"[Guardian] Nouvelle escalade\xa0: #{escalation.pk}")
    assert "Échéance\xa0: " in french.body
    # 12:30 UTC is 21:30 in Tokyo; the shared list reads the server's time zone (UTC here).
    assert "21:30 JST" in french.body
    assert server.subject.startswith(f"[Guardian] New escalation: #{escalation.pk}")
    assert "12:30 UTC" in server.body


def test_a_deadline_near_and_unclaimed_is_warned_once(
    webhook, reviewer, django_capture_on_commit_callbacks
):
    now = timezone.now()
    soon = now + timedelta(minutes=30)
    near = _escalation(deadline=soon)
    _escalation(  # held by a reviewer: no warning
        deadline=soon,
        claimed_by=reviewer,
        claimed_at=now,
        claim_expires_at=now + timedelta(minutes=10),
    )
    lapsed = _escalation(
        deadline=soon,
        claimed_by=reviewer,
        claimed_at=now - timedelta(minutes=30),
        claim_expires_at=now - timedelta(minutes=15),
    )
    _escalation(deadline=now + timedelta(hours=5))  # not near yet

    with django_capture_on_commit_callbacks() as enqueued:
        first = escalation_notify_due(now=now)
    again = escalation_notify_due(now=now + timedelta(minutes=1))

    assert sorted(first["deadline_near"]) == sorted([near.pk, lapsed.pk])
    assert len(enqueued) == 2  # the tasks go out once the marks commit
    assert again["deadline_near"] == []
    near.refresh_from_db()
    assert near.deadline_warned_at == now

    notify_escalation.apply(args=(near.pk, "deadline_near"))
    notify_escalation.apply(args=(near.pk, "deadline_near"))
    assert len(webhook.received) == 1
    assert "Deadline near, unclaimed" in webhook.received[0]["body"]["text"]
    assert _delivery(near, "deadline_near").status == "sent"


def test_a_warning_is_dropped_when_the_item_was_claimed_or_decided_meanwhile(webhook, reviewer):
    now = timezone.now()
    claimed = _escalation(
        deadline=now + timedelta(minutes=20),
        claimed_by=reviewer,
        claimed_at=now,
        claim_expires_at=now + timedelta(minutes=15),
    )
    decided = _escalation(
        deadline=now + timedelta(minutes=20), status=EscalationStatus.EXPIRED, resolved_at=now
    )

    assert escalation_notify(escalation_id=claimed.pk, event="deadline_near").skipped
    assert escalation_notify(escalation_id=decided.pk, event="arrived").skipped
    assert webhook.received == []


def test_nothing_configured_sends_nothing_and_raises_nothing(
    settings, django_capture_on_commit_callbacks
):
    settings.GUARDIAN_NOTIFY_EMAILS = []
    settings.GUARDIAN_NOTIFY_WEBHOOK_URL = ""
    escalation = _escalation(deadline=timezone.now() + timedelta(minutes=5))

    with django_capture_on_commit_callbacks() as enqueued:
        escalation_notify_after_commit(escalation.pk)
        due = escalation_notify_due()
    outcome = escalation_notify(escalation_id=escalation.pk, event="arrived")
    run = drive(start("refund_waits_for_approval"))

    assert enqueued == []
    assert due == {}
    assert (outcome.sent, outcome.failed, outcome.retry) == ([], [], False)
    assert run.status == RunStatus.WAITING
    assert NotificationDelivery.objects.count() == 0
    assert mail.outbox == []


@pytest.fixture
def broker_down(monkeypatch):
    """The Celery app pointed at a port where no broker listens: a real refused connection.
    Set in the configuration's own changes, which the undo puts back exactly: through the
    attribute, the write URL's old value would be read after broker_url changed (it falls
    back to it) and the next tests would send to the dead port."""
    monkeypatch.setitem(celery_app.conf.changes, "broker_url", "redis://127.0.0.1:9/0")
    monkeypatch.setitem(celery_app.conf.changes, "broker_write_url", "redis://127.0.0.1:9/0")
    # On the embedded default the transport is named apart from the URL (settings.py): the
    # URL's own (redis) must be the one used.
    monkeypatch.setitem(celery_app.conf.changes, "broker_transport", None)
    monkeypatch.setattr(celery_app, "_pool", None)
    monkeypatch.setattr(celery_app.amqp, "_producer_pool", None)


def test_a_broker_that_is_down_does_not_fail_the_turn_that_escalates(
    webhook, broker_down, caplog, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks() as after_commit:
        run = drive(start("refund_waits_for_approval"))
    assert run.status == RunStatus.WAITING
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    # What the turn's commit runs for the notice (the runs' own enqueues are not under test).
    notices = [c for c in after_commit if "escalation_notify_after_commit" in c.__qualname__]
    assert len(notices) == 1

    started = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="escalations.notifications"):
        notices[0]()  # raises nothing into the turn that committed it
    elapsed = time.monotonic() - started

    assert f"could not enqueue the arrived notice of escalation {escalation.pk}" in caplog.text
    assert elapsed < 5  # no publish retries: a down broker does not hold the worker up
    assert webhook.received == []
    run.refresh_from_db()
    assert run.status == RunStatus.WAITING


def test_an_arrival_whose_notice_never_left_is_picked_up_by_the_beat(
    webhook, django_capture_on_commit_callbacks
):
    now = timezone.now()
    lost = _escalation()
    # created_at is auto_now_add: move it back as if the broker had been down three minutes.
    type(lost).objects.filter(pk=lost.pk).update(created_at=now - timedelta(minutes=3))
    fresh = _escalation()

    with django_capture_on_commit_callbacks() as enqueued:
        due = escalation_notify_due(now=now)

    assert due["arrived"] == [lost.pk]  # the fresh one's own task may still be on its way
    assert len(enqueued) == 1
    assert fresh.pk not in due["arrived"]


def test_the_beat_checks_every_minute(settings):
    entry = settings.CELERY_BEAT_SCHEDULE["notify-reviewers"]
    assert (entry["task"], entry["schedule"]) == ("escalations.notify_due", 60.0)
    assert "escalations.notify_due" in celery_app.tasks


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_real_worker_posts_the_arrival_after_the_turn_that_escalates(webhook):
    from tests.processes import start_worker, stop_worker
    from tests.test_worker_runs import wait_for, worker_env

    with celery_app.connection_for_write() as broker:
        celery_app.control.purge(connection=broker)
    worker = start_worker(**worker_env(GUARDIAN_NOTIFY_WEBHOOK_URL=webhook.url))
    try:
        run = start("refund_waits_for_approval")
        wait_for(lambda: webhook.received, timeout=60, what="the arrival notice")
        time.sleep(1)  # a second notice would come now, if any did
    finally:
        log = stop_worker(worker)
    run.refresh_from_db()
    escalation = run.escalations.get()
    assert run.status == RunStatus.WAITING, log[-3000:]
    assert len(webhook.received) == 1
    assert f"#{escalation.pk}" in webhook.received[0]["body"]["text"]
    assert _delivery(escalation).status == "sent"


def test_a_base_url_that_is_not_http_stops_the_start_naming_the_variable():
    from tests.processes import run_manage

    result = run_manage("check", GUARDIAN_BASE_URL="guardian.example.org")

    assert result.returncode != 0
    assert "GUARDIAN_BASE_URL='guardian.example.org' is not an http(s) address" in result.stderr
