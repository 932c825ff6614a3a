"""The Celery queues (issue 26, scale-out): each kind of task is routed in the settings to its
queue (turns, guardian, notifications, maintenance), a worker started with -Q takes only its
queue's tasks and leaves the others waiting on the broker, and a worker started with no -Q
consumes every queue (the demo's, the tests' and compose's worker). Real worker processes on
the configured broker (Redis, or the embedded filesystem broker); nothing is mocked."""

import pytest
from django.conf import settings
from kombu.exceptions import ChannelError

# Every app's tasks module, as a worker's autodiscovery imports them (registers the tasks).
import escalations.tasks  # noqa: F401
import policies.tasks  # noqa: F401
import runs.tasks  # noqa: F401
from guardian_core.celery import app as celery_app
from guardian_core.tasks import worker_ping
from runs.models import Run, RunStatus

QUEUES = ("turns", "guardian", "notifications", "maintenance")
ROUTES = {
    "runs.advance_run": "turns",
    "guardian_core.run_guardian_model_job": "guardian",
    "escalations.notify": "notifications",
    "runs.deliver_verdict": "notifications",
    "runs.sweep_stalled_runs": "maintenance",
    "policies.sweep_guardian_model_jobs": "maintenance",
    "escalations.notify_due": "maintenance",
    "guardian_core.monitoring_catch_up": "maintenance",
    "runs.shadow_trials_catch_up": "maintenance",
    "runs.demo_traffic_tick": "maintenance",
    "runs.apply_retention": "maintenance",
    "guardian_core.worker_ping": "maintenance",  # not routed: the default queue
}


def _queue_of(task_name: str) -> str:
    return celery_app.amqp.router.route({}, task_name)["queue"].name


def test_the_settings_name_the_four_agreed_queues_and_the_default_is_one_of_them():
    assert tuple(settings.GUARDIAN_CELERY_QUEUES) == QUEUES
    assert settings.CELERY_TASK_DEFAULT_QUEUE in QUEUES
    assert [queue.name for queue in settings.CELERY_TASK_QUEUES] == list(QUEUES)


@pytest.mark.parametrize(("task_name", "queue"), sorted(ROUTES.items()))
def test_each_task_is_routed_to_its_queue(task_name, queue):
    assert task_name in celery_app.tasks
    assert _queue_of(task_name) == queue


def test_every_task_of_guardian_lands_on_one_of_the_queues():
    ours = [name for name in celery_app.tasks if not name.startswith("celery.")]
    assert set(ours) >= set(ROUTES) - {"guardian_core.worker_ping"}
    for name in ours:
        assert _queue_of(name) in QUEUES, name


def test_a_worker_started_with_no_queues_consumes_all_four():
    # What `celery worker` with no -Q consumes: every queue the settings declare.
    assert set(celery_app.amqp.queues.consume_from) == set(QUEUES)


def test_the_beat_schedules_only_tasks_of_the_maintenance_queue():
    for entry in settings.CELERY_BEAT_SCHEDULE.values():
        assert _queue_of(entry["task"]) == "maintenance", entry["task"]


# ---- real workers -----------------------------------------------------------------------------


def _depth(queue: str) -> int:
    """How many messages wait on `queue` (LLEN on Redis, files on the filesystem broker)."""
    with celery_app.connection_for_write() as broker:
        try:
            return broker.default_channel.queue_declare(queue=queue, passive=True).message_count
        except ChannelError:  # Redis keeps no key for an empty list: nothing waits
            return 0


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_turns_worker_runs_a_run_and_leaves_a_notice_to_the_notifications_queue():
    from escalations.notifications import NOTIFY_TASK
    from tests.processes import start_worker, stop_worker
    from tests.runs_helpers import start
    from tests.test_worker_runs import wait_for, worker_env

    with celery_app.connection_for_write() as broker:
        celery_app.control.purge(connection=broker)
    turns = start_worker(queue="turns", **worker_env())
    try:
        run = start("goal_reached")
        # A notice (of no escalation: the task would skip it) sent as the app sends them.
        celery_app.send_task(NOTIFY_TASK, args=(-1, "arrived"), ignore_result=True)
        wait_for(
            lambda: Run.objects.get(pk=run.pk).status not in (RunStatus.PENDING, RunStatus.RUNNING),
            timeout=90,
            what="the run to end on the turns worker",
        )
    finally:
        log = stop_worker(turns)
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED, log[-3000:]
    assert "runs.advance_run" in log
    assert NOTIFY_TASK + "[" not in log  # it never received the notice
    assert _depth("notifications") == 1

    # A worker with no -Q takes it (and would take everything else).
    every = start_worker(**worker_env())
    try:
        wait_for(lambda: _depth("notifications") == 0, timeout=60, what="the notice taken")
        assert worker_ping.apply_async(ignore_result=False).get(timeout=60)["pid"] == every.pid
    finally:
        log = stop_worker(every)
    for queue in QUEUES:
        assert f".> {queue} " in log, log[:3000]
    assert f"Task {NOTIFY_TASK}[" in log
