"""A turn costs the same at any run length: it reads the run's compact state and the last few
turns, writes its own steps, and any earlier state is rebuilt from the steps (make bench
measures the time; these tests hold the shape of the work)."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from demo.setup import demo_policy_version
from guardian_core.engine.state import HISTORY_WINDOW
from runs.mapping import TurnStateMismatch, turn_state
from runs.models import Run, Turn
from runs.services import run_advance, run_advance_slice, run_start
from tests.runs_helpers import reading_scenario

pytestmark = pytest.mark.django_db


def _long_run(turns: int = 60) -> Run:
    demo_policy_version()
    return run_start(
        goal="Read every order, one a turn.",
        tools=["read_order"],
        actor="scripted",
        guardian="scripted",
        budgets={"max_turns": turns + 5},
        config={"scenario": reading_scenario(turns)},
    )


def _statements(run: Run) -> list[str]:
    """What one turn sends the database. The test runs inside a transaction, so Django adds
    savepoints where a worker (in autocommit) sends BEGIN and COMMIT, which it does not log."""
    with CaptureQueriesContext(connection) as queries:
        assert run_advance(run_id=run.pk) == "continued"
    return [q["sql"] for q in queries.captured_queries if "SAVEPOINT" not in q["sql"]]


def test_a_turn_runs_the_same_statements_at_turn_3_as_at_turn_40():
    run = _long_run()
    for _ in range(3):
        run_advance(run_id=run.pk)
    early = _statements(run)
    for _ in range(36):
        run_advance(run_id=run.pk)
    late = _statements(run)
    assert len(early) == len(late)
    # lease, run, last turns, turn, call started, call done, run, turn, decision
    assert len(late) <= 10, "\n".join(late)


def test_the_run_keeps_a_bounded_state_and_its_turns_keep_steps_not_snapshots():
    run = _long_run()
    for _ in range(30):
        run_advance(run_id=run.pk)
    run.refresh_from_db()
    assert len(run.state["history"]) == HISTORY_WINDOW
    assert run.state["history_dropped"] == 30 - HISTORY_WINDOW
    assert run.state["history"][-1]["turn"] == 29
    assert all(
        state == {} for state in Turn.objects.filter(run=run).values_list("state", flat=True)
    )
    assert all(
        len(steps) >= 1 for steps in Turn.objects.filter(run=run).values_list("steps", flat=True)
    )


def test_each_turns_steps_rebuild_the_hash_it_stored():
    run = _long_run()
    for _ in range(12):
        run_advance(run_id=run.pk)
    run.refresh_from_db()
    for turn in run.turns.order_by("index"):
        assert turn_state(turn).hash == turn.state_hash == turn.decision.state_hash
    assert turn_state(run.turns.get(index=11)).to_dict() == run.state


def test_a_turn_whose_steps_were_altered_is_found_out():
    run = _long_run()
    for _ in range(5):
        run_advance(run_id=run.pk)
    altered = run.turns.get(index=2)
    steps = altered.steps
    steps[-1]["last_results"] = ["an output nobody saw"]
    Turn.objects.filter(pk=altered.pk).update(steps=steps)
    with pytest.raises(TurnStateMismatch, match="turn 2"):
        turn_state(run.turns.get(index=4))


def test_the_scenario_is_checked_once_when_the_run_starts_not_on_every_turn(monkeypatch):
    import guardian_core.adapters.scripted as scripted

    run = _long_run(20)
    checks = []
    original = scripted.check_scenario
    monkeypatch.setattr(scripted, "check_scenario", lambda s: checks.append(1) or original(s))
    for _ in range(5):
        run_advance(run_id=run.pk)
    assert checks == []
    assert run.turns.count() == 5


def test_old_snapshot_turns_are_migrated_to_steps_and_the_run_goes_on():
    """Data recorded before the state was stored by steps: a whole snapshot on every turn."""
    import importlib

    from django.apps import apps

    migration = importlib.import_module("runs.migrations.0005_compact_run_state_and_turn_steps")
    run = _long_run(20)
    for _ in range(12):
        run_advance(run_id=run.pk)
    # Make the run look as the old code left it: a full snapshot per turn, no steps.
    snapshots = {}
    for turn in run.turns.order_by("index"):
        history = [
            {"turn": i, "summary": f"turn {i}: read_order done"} for i in range(turn.index + 1)
        ]
        snapshots[turn.pk] = {**turn_state(turn).content(), "history": history}
    for pk, snapshot in snapshots.items():
        Turn.objects.filter(pk=pk).update(state=snapshot, steps=[])
    last_snapshot = snapshots[run.turns.get(index=11).pk]
    Run.objects.filter(pk=run.pk).update(state={})

    migration.forward(apps, None)

    run.refresh_from_db()
    assert run.state["history"] == last_snapshot["history"][-8:]
    assert run.state["history_dropped"] == 4
    assert run.state["hash"] == run.turns.get(index=11).state_hash
    assert all(t.state == {} and t.steps[0]["migrated"] for t in run.turns.all())
    assert run_advance(run_id=run.pk) == "continued"
    after = run.turns.get(index=12)
    assert turn_state(after).hash == after.state_hash  # the chain goes on from the old hash


# ---- the common turn's outcome in one statement (PostgreSQL, outside a transaction) ---------

postgres_only = pytest.mark.postgresql(
    reason="the turn's one-statement write is PostgreSQL's (writable CTEs with RETURNING "
    "across tables); SQLite takes the ORM path, tested elsewhere"
)


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_continuing_turn_is_written_in_one_statement_with_everything_the_log_needs():
    run = _long_run(20)
    for _ in range(3):
        run_advance(run_id=run.pk)
    with CaptureQueriesContext(connection) as queries:
        assert run_advance(run_id=run.pk) == "continued"
    sql = [q["sql"] for q in queries.captured_queries]
    # the claim (returning the run and its last turns); the turn with its read started, in a
    # commit that does not wait for the flush; then one write of the outcome with the read's
    # result (tests/test_turn_commits.py)
    assert len(sql) == 3, "\n".join(sql)
    assert sql[-1].lstrip().startswith("WITH moved AS")
    run.refresh_from_db()
    turn = run.turns.get(index=3)
    assert (turn.decision.outcome, turn.decision.state_hash) == ("continue", turn.state_hash)
    assert turn.finished_at is not None
    assert turn.usage["turns"] == 4
    assert turn_state(turn).to_dict() == run.state
    assert (run.lease_token, run.failures) == ("", 0)


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_run_cancelled_while_its_turn_ran_records_the_turn_and_stays_cancelled(monkeypatch):
    import runs.turns
    from runs.services import run_cancel

    run = _long_run(20)
    run_advance(run_id=run.pk)
    real = runs.turns.run_turn

    def cancelled_meanwhile(*args, **kwargs):
        record = real(*args, **kwargs)
        run_cancel(run_id=run.pk)  # a person cancels while the turn's calls run
        return record

    monkeypatch.setattr(runs.turns, "run_turn", cancelled_meanwhile)
    assert run_advance(run_id=run.pk) == "finished"
    run.refresh_from_db()
    assert (run.status, run.lease_token) == ("cancelled", "")
    assert run.turns.get(index=1).decision.outcome == "continue"  # recorded, nothing follows


@postgres_only
@pytest.mark.django_db(transaction=True)
def test_a_turn_whose_lease_was_taken_over_writes_nothing(monkeypatch):
    import runs.turns

    run = _long_run(20)
    real = runs.turns.run_turn

    def lease_lost_meanwhile(*args, **kwargs):
        record = real(*args, **kwargs)
        Run.objects.filter(pk=run.pk).update(lease_token="another-worker")
        return record

    monkeypatch.setattr(runs.turns, "run_turn", lease_lost_meanwhile)
    assert run_advance(run_id=run.pk) == "failed"  # the other worker's turn counts
    run.refresh_from_db()
    assert run.lease_token == "another-worker"
    assert not run.turns.filter(decision__isnull=False).exists()
    assert run.state == {}


# ---- a worker's time slice ----------------------------------------------------------------


def test_a_slice_advances_turn_after_turn_and_enqueues_only_after_its_last(
    django_capture_on_commit_callbacks,
):
    run = _long_run(200)
    with django_capture_on_commit_callbacks() as enqueued:
        assert run_advance_slice(run_id=run.pk, seconds=0.3) == "continued"
    assert run.turns.count() >= 2  # several turns, one message
    assert len(enqueued) == 1


def test_a_slice_of_zero_is_one_turn_and_its_message():
    run = _long_run(20)
    assert run_advance_slice(run_id=run.pk, seconds=0) == "continued"
    assert run.turns.count() == 1


def test_a_slice_ends_when_the_run_does(django_capture_on_commit_callbacks):
    run = _long_run(3)
    Run.objects.filter(pk=run.pk).update(budgets={"max_turns": 3})
    with django_capture_on_commit_callbacks() as enqueued:
        assert run_advance_slice(run_id=run.pk, seconds=30) == "finished"
    run.refresh_from_db()
    assert (run.status, run.stop_reason, run.turns.count()) == ("failed", "turn_cap", 3)
    assert enqueued == []
