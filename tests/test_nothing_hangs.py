"""Nothing hangs (issue 26): what a dead worker or a lost message leaves half-done, the sweeper
(runs/sweeps.py, beat every 30 s) finishes or gives up on, and the page where a person looks
says what happened: a reviewers' notice left "sending" or "pending" (the escalation's
history), a run no worker holds (the run page), an external step whose caller vanished (the
run page's tool call). Guardian model jobs have their own sweep and page test
(test_guardian_model_jobs.py)."""

import json
import os
import signal
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from celery.signals import task_postrun, task_prerun
from django.urls import reverse
from django.utils import timezone

from escalations import notifications
from escalations.models import (
    EscalationEvent,
    EscalationEventKind,
    EscalationStatus,
    NotificationDelivery,
)
from escalations.notifications import MAX_ATTEMPTS, notification_targets
from escalations.tasks import notify_escalation
from guardian_core.celery import close_broken_or_old_connections
from runs.models import Run, RunStatus
from runs.sweeps import SWEPT_PREFIX, run_sweep_stalled
from tests.factories import make_escalation, make_run, make_turn
from tests.test_external_runs import api  # noqa: F401 - a fixture used below

pytestmark = pytest.mark.django_db

LONG_AGO = timedelta(minutes=6)  # past the notice's stale claim (5 min)


@pytest.fixture(autouse=True)
def _eager_tasks_keep_the_test_transaction():
    """As in test_notifications.py: an eager task must not close the test's connection."""
    task_prerun.disconnect(close_broken_or_old_connections)
    task_postrun.disconnect(close_broken_or_old_connections)
    yield
    task_prerun.connect(close_broken_or_old_connections)
    task_postrun.connect(close_broken_or_old_connections)


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.received.append(json.loads(body))
        # A hook that hangs keeps a worker mid-send until the test kills it.
        if self.server.hang.is_set():
            self.server.release.wait(120)
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def webhook(settings):
    """A real HTTP server on 127.0.0.1 as the configured webhook (200 to every POST)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    server.received, server.hang, server.release = [], threading.Event(), threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    settings.GUARDIAN_NOTIFY_WEBHOOK_URL = url
    settings.GUARDIAN_NOTIFY_EMAILS = []
    yield SimpleNamespace(url=url, received=server.received, hang=server.hang)
    server.release.set()
    server.shutdown()
    server.server_close()


def _left_behind(escalation, *, status="sending", attempts=1, ago=LONG_AGO):
    """The row a worker leaves when it dies mid-send: claimed, no outcome, no worker."""
    (target,) = notification_targets()
    delivery = NotificationDelivery.objects.create(
        escalation=escalation,
        event="arrived",
        channel=target.channel,
        target=target.name,
        status=status,
        attempts=attempts,
    )
    NotificationDelivery.objects.filter(pk=delivery.pk).update(updated_at=timezone.now() - ago)
    return delivery


def _history(client, user, escalation) -> str:
    client.force_login(user)
    response = client.get(reverse("escalations:detail", args=[escalation.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_a_notice_left_sending_by_a_dead_worker_is_sent_again_and_the_history_says_so(
    webhook, client, reviewer, monkeypatch, django_capture_on_commit_callbacks
):
    escalation = make_escalation()
    delivery = _left_behind(escalation)
    published = []
    monkeypatch.setattr(notifications, "_enqueue", lambda *notice: published.append(notice))

    with django_capture_on_commit_callbacks(execute=True) as enqueued:
        run_sweep_stalled()

    delivery.refresh_from_db()
    assert delivery.status == "failed"  # claimable again, and it says why
    assert "attempt 1 started at" in delivery.error
    assert "recorded no outcome (its worker died mid-send" in delivery.error
    assert f"sent again (attempt 2 of {MAX_ATTEMPTS} at most)" in delivery.error
    assert len(enqueued) == 1
    assert published == [(escalation.pk, "arrived")]
    event = EscalationEvent.objects.get(
        escalation=escalation, kind=EscalationEventKind.NOTIFY_RETRIED
    )
    assert "recorded no outcome" in event.note

    # The notice the sweeper enqueued (its task, run here) sends it: once, as attempt 2.
    notify_escalation.apply(args=(escalation.pk, "arrived"))
    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("sent", 2)
    assert len(webhook.received) == 1

    page = _history(client, reviewer, escalation)
    assert "Notification sent again" in page
    assert "recorded no outcome (its worker died mid-send, or its message was lost)" in page
    assert "Reviewers notified" in page


def test_a_notice_out_of_attempts_is_failed_with_the_reason_and_not_sent_again(
    webhook, client, reviewer, django_capture_on_commit_callbacks
):
    escalation = make_escalation()
    delivery = _left_behind(escalation, attempts=MAX_ATTEMPTS)

    with django_capture_on_commit_callbacks(execute=False) as enqueued:
        run_sweep_stalled()

    delivery.refresh_from_db()
    assert (delivery.status, delivery.attempts) == ("failed", MAX_ATTEMPTS)
    assert f"given up: all {MAX_ATTEMPTS} attempts spent" in delivery.error
    assert enqueued == []
    notify_escalation.apply(args=(escalation.pk, "arrived"))  # a late duplicate sends nothing
    assert webhook.received == []
    page = _history(client, reviewer, escalation)
    assert "Notification not delivered" in page
    assert f"given up: all {MAX_ATTEMPTS} attempts spent" in page


def test_a_notice_of_an_escalation_no_longer_open_is_given_up(
    webhook, django_capture_on_commit_callbacks
):
    escalation = make_escalation(status=EscalationStatus.EXPIRED, resolved_at=timezone.now())
    delivery = _left_behind(escalation)

    with django_capture_on_commit_callbacks(execute=False) as enqueued:
        run_sweep_stalled()

    delivery.refresh_from_db()
    assert delivery.status == "failed"
    assert "given up: the escalation is expired" in delivery.error
    assert enqueued == []
    assert EscalationEvent.objects.filter(
        escalation=escalation, kind=EscalationEventKind.NOTIFY_FAILED
    ).exists()


def test_a_notice_whose_message_was_lost_before_its_claim_is_sent_again(
    webhook, django_capture_on_commit_callbacks
):
    escalation = make_escalation()
    delivery = _left_behind(escalation, status="pending", attempts=0)

    with django_capture_on_commit_callbacks(execute=False) as enqueued:
        run_sweep_stalled()

    delivery.refresh_from_db()
    assert delivery.status == "failed"
    assert "never started (its message was lost)" in delivery.error
    assert "sent again (attempt 1 of" in delivery.error
    assert len(enqueued) == 1


def test_a_notice_being_sent_now_is_left_to_its_worker(webhook, django_capture_on_commit_callbacks):
    escalation = make_escalation()
    delivery = _left_behind(escalation, ago=timedelta(minutes=1))
    sent = _left_behind(make_escalation(), status="sent")
    failed = _left_behind(make_escalation(), status="failed")

    with django_capture_on_commit_callbacks(execute=False) as enqueued:
        run_sweep_stalled()

    for row in (delivery, sent, failed):
        before = row.status
        row.refresh_from_db()
        assert (row.status, row.error) == (before, "")
    assert enqueued == []
    assert not EscalationEvent.objects.filter(kind__startswith="notify_").exists()


def test_a_notice_that_fails_for_good_says_so_in_the_history(settings, client, reviewer):
    settings.GUARDIAN_NOTIFY_WEBHOOK_URL = "http://127.0.0.1:9/hook"  # nothing listens there
    settings.GUARDIAN_NOTIFY_EMAILS = []
    escalation = make_escalation()
    (target,) = notification_targets()
    NotificationDelivery.objects.create(
        escalation=escalation,
        event="arrived",
        channel=target.channel,
        target=target.name,
        status="failed",
        attempts=MAX_ATTEMPTS - 1,
    )

    notify_escalation.apply(args=(escalation.pk, "arrived"))  # the last attempt

    delivery = NotificationDelivery.objects.get(escalation=escalation)
    assert (delivery.status, delivery.attempts) == ("failed", MAX_ATTEMPTS)
    page = _history(client, reviewer, escalation)
    assert "Notification not delivered" in page
    assert f"not delivered after {MAX_ATTEMPTS} attempts: ConnectError" in page


# ---- runs ---------------------------------------------------------------------------------------


def _running(**fields) -> Run:
    run = make_run(status=RunStatus.RUNNING, **fields)
    return run


def test_a_run_whose_worker_died_is_enqueued_again_and_its_page_says_so(
    client, auditor, django_capture_on_commit_callbacks
):
    lapsed = timezone.now() - timedelta(seconds=5)
    run = _running(lease_token="dead-worker", lease_expires_at=lapsed)

    swept = run_sweep_stalled()

    assert swept == [run.pk]
    run.refresh_from_db()
    assert run.last_error.startswith(SWEPT_PREFIX)
    assert "the worker holding it stopped (its lease ran out at" in run.last_error
    assert run.last_error.endswith("enqueued again.")
    client.force_login(auditor)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    # The sweeper's line is not a worker's error: the page does not call it one.
    assert "Last worker error" not in page
    assert '<p class="run-swept">The sweeper: <bdi>Swept at ' in page
    assert "the worker holding it stopped (its lease ran out at" in page


def test_a_run_no_worker_took_up_keeps_its_own_error_and_one_sweep_line(settings, client, auditor):
    stale = timezone.now() - timedelta(seconds=settings.GUARDIAN_STALLED_AFTER_SECONDS + 5)
    run = _running(last_error="ConnectionError: the actor did not answer")
    Run.objects.filter(pk=run.pk).update(updated_at=stale)

    run_sweep_stalled()
    run_sweep_stalled()  # a second sweep replaces its line rather than adding one

    run.refresh_from_db()
    first, second = run.last_error.splitlines()
    assert first == "ConnectionError: the actor did not answer"
    assert second.startswith(SWEPT_PREFIX)
    assert "no worker had taken it up (its task's message was lost" in second
    client.force_login(auditor)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    assert (
        '<p class="run-error">Last worker error: <bdi>ConnectionError: the actor did not '
        "answer</bdi></p>" in page
    )
    assert '<p class="run-swept">The sweeper: <bdi>Swept at ' in page


def test_a_run_a_worker_holds_is_not_touched():
    held = timezone.now() + timedelta(seconds=60)
    run = _running(lease_token="alive", lease_expires_at=held)

    assert run_sweep_stalled() == []
    run.refresh_from_db()
    assert run.last_error == ""


# ---- external steps -----------------------------------------------------------------------------


def test_an_abandoned_external_step_says_on_the_run_page_that_no_result_came_back(
    api,  # noqa: F811 - the fixture imported above
    client,
    auditor,
    settings,
):
    from runs.models import ToolCall, ToolCallStatus
    from tests.test_external_runs import read, start, step

    run = start(api)
    step(api, run["id"], 0, read())
    # The caller never reports back; the sweeper looks after the grace period.
    later = timezone.now() + timedelta(seconds=settings.GUARDIAN_EXTERNAL_RESULTS_SECONDS + 1)

    run_sweep_stalled(now=later)

    assert ToolCall.objects.get(turn__run_id=run["id"]).status == ToolCallStatus.AMBIGUOUS
    client.force_login(auditor)
    page = client.get(f"/runs/{run['id']}/").content.decode()
    assert "no result came back: did it go through? It is not run again." in page


# ---- a real worker killed mid-send --------------------------------------------------------------


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_worker_killed_mid_send_leaves_a_notice_the_sweep_sends_again(webhook):
    from guardian_core.celery import app as celery_app
    from tests.processes import start_worker, stop_worker
    from tests.test_worker_runs import wait_for, worker_env

    with celery_app.connection_for_write() as broker:
        celery_app.control.purge(connection=broker)
    escalation = make_escalation(turn=make_turn(run=make_run()))
    env = worker_env(GUARDIAN_NOTIFY_WEBHOOK_URL=webhook.url)
    webhook.hang.set()  # the first POST never answers: the worker is mid-send
    worker = start_worker(**env)
    try:
        notify_escalation.apply_async(args=(escalation.pk, "arrived"))
        wait_for(lambda: webhook.received, timeout=60, what="the worker to start sending")
        os.kill(worker.pid, signal.SIGKILL)
        worker.wait(timeout=20)
    finally:
        stop_worker(worker)
    delivery = NotificationDelivery.objects.get(escalation=escalation)
    assert (delivery.status, delivery.attempts) == ("sending", 1)  # and no worker on it

    # Six minutes on, the sweep finds it; a new worker sends the notice it enqueued.
    webhook.hang.clear()
    run_sweep_stalled(now=timezone.now() + LONG_AGO)
    delivery.refresh_from_db()
    assert delivery.status == "failed"
    assert "recorded no outcome" in delivery.error
    worker = start_worker(**env)
    try:
        wait_for(
            lambda: NotificationDelivery.objects.get(pk=delivery.pk).status == "sent",
            timeout=60,
            what="the notice sent again",
        )
    finally:
        log = stop_worker(worker)
    delivery.refresh_from_db()
    assert delivery.attempts == 2, log[-3000:]
    assert len(webhook.received) == 2  # the cut-off attempt, and the one that went through
    kinds = list(
        EscalationEvent.objects.filter(escalation=escalation).values_list("kind", flat=True)
    )
    assert kinds == [EscalationEventKind.NOTIFY_RETRIED, EscalationEventKind.NOTIFIED]
