"""Cancel racing a verdict, on PostgreSQL in separate threads: locks are taken run first
everywhere, so the two wait for each other instead of deadlocking, and the end state is one
of the two orders, never a mix."""

import threading
import time

import pytest
from django.db import OperationalError, connections, transaction

from escalations.models import EscalationStatus, Verdict
from escalations.verdicts import escalation_resolve
from runs.models import DemoSideEffect, Run, RunStatus
from runs.services import run_cancel
from tests.runs_helpers import drive, start

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgresql(
        reason="row locks and advisory locks: SQLite has neither, it locks the whole file"
    ),
]


def _waiting_on_locks() -> int:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def _wait_until(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _in_thread(action, errors: list) -> threading.Thread:
    def run():
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 - the test reports every error
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_cancel_queued_before_a_verdict_never_deadlocks_with_it(reviewer):
    """The order that deadlocked: a cancel waits on the run, a verdict arrives. The verdict
    used to lock its escalation first and then wait for the run behind the cancel, which in
    turn waited for the escalation: PostgreSQL killed one of them (an HTTP 500)."""
    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    release, locked = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def hold_the_run():  # a turn's outcome being written, say: the run row is locked
        with transaction.atomic():
            Run.objects.select_for_update().get(pk=run.pk)
            locked.set()
            release.wait(timeout=30)

    threads = [_in_thread(hold_the_run, errors)]
    locked.wait(timeout=10)
    threads.append(_in_thread(lambda: run_cancel(run_id=run.pk), errors))
    _wait_until(lambda: _waiting_on_locks() >= 1, "the cancel to wait for the run")
    threads.append(
        _in_thread(
            lambda: escalation_resolve(
                escalation_id=escalation.pk, reviewer=reviewer, decision="approve"
            ),
            errors,
        )
    )
    _wait_until(lambda: _waiting_on_locks() >= 2, "the verdict to wait as well")
    release.set()
    for thread in threads:
        thread.join(timeout=30)

    assert [type(e).__name__ for e in errors] == ["EscalationError"]  # already cancelled
    assert "already cancelled" in str(errors[0])
    run.refresh_from_db()
    escalation.refresh_from_db()
    assert (run.status, escalation.status) == (RunStatus.CANCELLED, EscalationStatus.CANCELLED)
    assert not Verdict.objects.filter(escalation=escalation).exists()


def _race(*actions) -> list[BaseException]:
    """Run the actions at once, each in its own thread and connection; return their errors."""
    barrier = threading.Barrier(len(actions))
    errors: list[BaseException] = []

    def run(action):
        try:
            barrier.wait()
            action()
        except BaseException as exc:  # noqa: BLE001 - the test reports every error
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(action,)) for action in actions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return errors


def test_cancel_racing_an_approval_never_deadlocks_and_ends_in_one_order(reviewer):
    for _ in range(10):
        run = drive(start("refund_waits_for_approval"))
        escalation = run.escalations.get(status=EscalationStatus.OPEN)
        errors = _race(
            lambda run=run: run_cancel(run_id=run.pk),
            lambda escalation=escalation: escalation_resolve(
                escalation_id=escalation.pk, reviewer=reviewer, decision="approve"
            ),
        )
        run.refresh_from_db()
        escalation.refresh_from_db()
        assert run.status == RunStatus.CANCELLED
        if escalation.status == EscalationStatus.CANCELLED:  # the cancel came first
            assert not Verdict.objects.filter(escalation=escalation).exists()
            assert [type(e).__name__ for e in errors] == ["EscalationError"]
        else:  # the verdict came first, then the cancel stopped the run before its next turn
            assert escalation.status == EscalationStatus.APPROVED
            assert errors == []
        assert DemoSideEffect.objects.count() == 0


def _a_real_deadlock() -> OperationalError:
    """Two connections take two advisory locks in opposite orders; PostgreSQL aborts one."""
    first_held, second_held = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def take(mine: int, theirs: int, held: threading.Event, other: threading.Event):
        with transaction.atomic(), connections["default"].cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [mine])
            held.set()
            other.wait(timeout=10)
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [theirs])

    threads = [
        _in_thread(lambda: take(1, 2, first_held, second_held), errors),
        _in_thread(lambda: take(2, 1, second_held, first_held), errors),
    ]
    for thread in threads:
        thread.join(timeout=30)
    [deadlock] = errors
    assert isinstance(deadlock, OperationalError)
    return deadlock


def test_a_conflict_that_outlives_its_retries_is_a_409_not_a_500():
    from guardian_core.api import exception_handler

    response = exception_handler(_a_real_deadlock(), {})
    assert response.status_code == 409
    assert "try again" in " ".join(response.data["detail"])


def test_a_transaction_aborted_by_a_deadlock_is_run_again():
    from guardian_core.db import retry_on_conflict

    deadlock = _a_real_deadlock()
    attempts = []

    def work():
        attempts.append(1)
        if len(attempts) == 1:
            raise deadlock
        return "done"

    assert retry_on_conflict(work) == "done"
    assert len(attempts) == 2
