"""A real Celery worker process consumes tasks from the configured broker and from the embedded
filesystem broker (the default of `make demo`), with no eager mode anywhere."""

import json
import uuid

import pytest

from guardian_core.tasks import worker_ping
from tests.processes import run_manage, start_worker, stop_worker

pytestmark = pytest.mark.worker


def test_a_worker_process_runs_a_task_sent_through_the_configured_broker():
    queue = f"test-{uuid.uuid4().hex[:8]}"
    worker = start_worker(queue=queue)
    try:
        answer = worker_ping.apply_async(queue=queue).get(timeout=60)
    finally:
        log = stop_worker(worker)
    assert answer["pid"] == worker.pid, log


def test_the_embedded_filesystem_broker_delivers_to_a_real_worker_process(tmp_path):
    # No server at all: the queue and the results are files under GUARDIAN_VAR_DIR.
    embedded = {
        "DATABASE_URL": None,
        "CELERY_BROKER_URL": None,
        "CELERY_RESULT_BACKEND": None,
        "GUARDIAN_VAR_DIR": str(tmp_path),
    }
    queue = f"test-{uuid.uuid4().hex[:8]}"
    worker = start_worker(queue=queue, **embedded)
    try:
        sent = run_manage(
            "shell",
            "-c",
            "import json; from guardian_core.tasks import worker_ping;"
            f"print(json.dumps(worker_ping.apply_async(queue={queue!r}).get(timeout=60)))",
            timeout=90,
            **embedded,
        )
    finally:
        log = stop_worker(worker)
    assert sent.returncode == 0, sent.stderr + log
    answer = json.loads(sent.stdout.strip().splitlines()[-1])
    assert answer["pid"] == worker.pid
    # The worker's banner names its transport: the embedded queue of files.
    assert "guardian_core.filesystem_broker:Transport://" in log


@pytest.mark.parametrize(("conn_max_age", "reused"), [("600", True), ("0", False)])
def test_a_worker_keeps_its_database_connection_between_tasks(conn_max_age, reused):
    queue = f"test-{uuid.uuid4().hex[:8]}"
    worker = start_worker(queue=queue, DATABASE_CONN_MAX_AGE=conn_max_age)
    try:
        seen = {
            worker_ping.apply_async(queue=queue).get(timeout=60)["db_connection"] for _ in range(3)
        }
    finally:
        stop_worker(worker)
    assert (len(seen) == 1) is reused
