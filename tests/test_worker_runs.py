"""Runs driven by real Celery worker processes on the configured database and broker: every
scenario end to end, a worker killed with SIGKILL in the middle of a turn, and (on Redis) the
broker restarted mid-run. Nothing here is eager or mocked."""

import os
import shutil
import signal
import subprocess
import time
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.db import connection

from demo.setup import demo_policy_version
from escalations.models import EscalationStatus
from escalations.verdicts import escalation_resolve
from guardian_core.celery import app as celery_app
from runs.models import DemoSideEffect, Run, RunStatus, ToolCall, ToolCallStatus
from runs.reporting import expectation_problems
from runs.scenarios import scenario_load, scenario_names, scenario_run_start
from runs.services import run_start
from runs.sweeps import run_sweep_stalled
from tests.processes import start_worker, stop_worker
from tests.runs_helpers import start

pytestmark = [pytest.mark.worker, pytest.mark.django_db(transaction=True)]

REFUND = {"order_id": "ord_4472", "amount": 49.9}
IRREVERSIBLE = {"read_only": 0, "reversible_write": 0, "irreversible": 1.0, "regulated": 0}
SLOW_REFUND = {
    "name": "slow_refund",
    "goal": "Refund order ord_4472, then check the courier's report.",
    "acceptance_criteria": ["Refund issued"],
    "tools": ["read_order", "issue_refund", "slow_lookup"],
    "actor": {
        "turns": [
            {"calls": [{"tool": "read_order", "arguments": {"order_id": "ord_4472"}}]},
            {"calls": [{"tool": "issue_refund", "arguments": REFUND}]},
            {"calls": []},
            {"calls": [{"tool": "slow_lookup", "arguments": {"topic": "courier", "seconds": 8}}]},
            {"calls": [], "message": "Refunded ord_4472; the courier confirmed the damage."},
        ]
    },
    "guardian": {
        "risk": {"issue_refund": IRREVERSIBLE},
        "turns": [{}, {}, {}, {}, {"goal_reached": 0.97}],
    },
}  # fmt: skip


def worker_env(**extra: str) -> dict:
    """The worker's environment: this test's database (not the one the URL names) and broker."""
    db = settings.DATABASES["default"]
    if db["ENGINE"].endswith("sqlite3"):
        url = f"sqlite:///{db['NAME']}"
    else:
        url = f"postgres://{db['USER']}:{db['PASSWORD']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    return {"DATABASE_URL": url, "GUARDIAN_DEADLINE_SECONDS": "0.5", **extra}


@pytest.fixture
def clean_queue():
    with celery_app.connection_for_write() as broker:
        celery_app.control.purge(connection=broker)


def wait_for(predicate, *, timeout: float, what: str, poll: float = 0.2, tick=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if tick:
            tick()
        if predicate():
            return
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def status_of(run: Run) -> str:
    return Run.objects.values_list("status", flat=True).get(pk=run.pk)


def test_every_demo_scenario_ends_as_its_story_says_on_a_real_worker(clean_queue):
    demo_policy_version()
    worker = start_worker(**worker_env())
    try:
        runs = {name: scenario_run_start(name) for name in scenario_names()}
        wait_for(
            lambda: all(status_of(run) != RunStatus.RUNNING for run in runs.values()),
            timeout=120,
            what="every scenario to stop running",
        )
    finally:
        log = stop_worker(worker)
    for name, run in runs.items():
        run.refresh_from_db()
        problems = expectation_problems(run, scenario_load(name)["expect"])
        assert problems == [], f"{name}: {problems}\n{log[-3000:]}"


def test_a_worker_killed_mid_turn_is_replaced_and_the_refund_happens_exactly_once(
    clean_queue, reviewer
):
    demo_policy_version()
    env = worker_env(GUARDIAN_TURN_LEASE_SECONDS="5")
    first = start_worker(**env)
    second = None
    try:
        run = run_start(
            goal=SLOW_REFUND["goal"],
            tools=SLOW_REFUND["tools"],
            actor="scripted",
            guardian="scripted",
            config={"scenario": SLOW_REFUND},
        )
        wait_for(lambda: status_of(run) == RunStatus.WAITING, timeout=60, what="the held refund")
        escalation = run.escalations.get(status=EscalationStatus.OPEN)
        escalation_resolve(escalation_id=escalation.pk, reviewer=reviewer, decision="approve")

        slow = ToolCall.objects.filter(turn__run=run, tool="slow_lookup")
        wait_for(
            lambda: slow.filter(status=ToolCallStatus.STARTED).exists(),
            timeout=60,
            what="the slow lookup to start",
        )
        first.send_signal(signal.SIGKILL)  # mid-turn: the lookup is running, nothing recorded
        first.wait(timeout=10)

        second = start_worker(**env)
        # The lease runs out; the sweeper (beat's job, called here) hands the run to the
        # new worker, which retries the unfinished turn from its recorded proposal.
        wait_for(
            lambda: status_of(run) != RunStatus.RUNNING,
            timeout=90,
            what="the run to finish on the second worker",
            poll=1.0,
            tick=run_sweep_stalled,
        )
    finally:
        first_log = stop_worker(first)
        second_log = stop_worker(second) if second else ""
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, first_log[-2000:] + second_log[-2000:]
    indices = list(run.turns.order_by("index").values_list("index", flat=True))
    assert indices == list(range(len(indices)))
    assert DemoSideEffect.objects.filter(tool="issue_refund").count() == 1
    assert slow.get().status == ToolCallStatus.DONE


REDIS_SERVER = shutil.which("redis-server")


@pytest.mark.skipif(
    not settings.CELERY_BROKER_URL.startswith("redis://") or REDIS_SERVER is None,
    reason="needs the Redis broker (CI runs it)",
)
def test_a_run_finishes_when_redis_restarts_in_the_middle(clean_queue, settings):
    settings.GUARDIAN_STALLED_AFTER_SECONDS = 1
    demo_policy_version()
    broker = urlsplit(settings.CELERY_BROKER_URL)
    redis_dir = _redis_dir(broker.port)
    worker = start_worker(**worker_env())
    try:
        run = start("drifting_agent")
        wait_for(
            lambda: run.turns.filter(decision__isnull=False).count() >= 1,
            timeout=60,
            what="the first turn",
        )
        subprocess.run(
            ["redis-cli", "-p", str(broker.port), "shutdown", "nosave"],
            check=False,
            capture_output=True,
        )
        time.sleep(1.0)
        _redis_start(broker.port, redis_dir)
        wait_for(
            lambda: status_of(run) != RunStatus.RUNNING,
            timeout=90,
            what="the run to finish after the restart",
            poll=1.0,
            tick=run_sweep_stalled,
        )
    finally:
        _redis_start(broker.port, redis_dir)  # whatever happened, leave Redis up
        log = stop_worker(worker)
        connection.close()
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED, log[-3000:]
    indices = list(run.turns.order_by("index").values_list("index", flat=True))
    assert indices == [0, 1, 2, 3, 4]


def _redis_dir(port: int) -> str:
    out = subprocess.run(
        ["redis-cli", "-p", str(port), "config", "get", "dir"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return out[-1] if out else os.getcwd()


def _redis_start(port: int, directory: str) -> None:
    ping = subprocess.run(["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True)
    if "PONG" in ping.stdout:
        return
    subprocess.run(
        [
            REDIS_SERVER,
            "--bind",
            "127.0.0.1",
            "--port",
            str(port),
            "--daemonize",
            "yes",
            "--dir",
            directory,
            "--save",
            "",
            "--appendonly",
            "no",
            "--logfile",
            os.path.join(directory, "redis.log"),
        ],
        check=True,
    )
    for _ in range(50):
        ping = subprocess.run(
            ["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True
        )
        if "PONG" in ping.stdout:
            return
        time.sleep(0.1)
    raise RuntimeError(f"redis did not come back on port {port}")
