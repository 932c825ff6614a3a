"""What a worker's turn commits, and when (runs/ports.py CallRecorder, runs/services.py
RunSlice, runs/recording.py turn_finish): a read-only turn once, with its decision; a write
turn twice, its call's "started" with the turn before the call runs and its result with the
decision; a turn inside a worker's slice reads the run under the lease it kept instead of
claiming it again. The crash between a write turn's two commits is in test_turn_commit_crash.py.
"""

import re

import pytest
from django.db import connection
from django.utils import timezone

from demo.setup import demo_policy_version
from guardian_core.engine.conditions import RiskClass
from guardian_core.engine.tools import Tool
from runs.models import DemoSideEffect, Run, ToolCall, ToolCallStatus
from runs.services import RunSlice, run_advance, run_cancel, run_start
from tests.test_turn_cost import _long_run

pytestmark = pytest.mark.django_db(transaction=True)

# How a statement says its commit need not wait for the WAL flush (runs/ports.py).
NO_WAIT = "set_config('synchronous_commit', 'off', true)"

postgres_only = pytest.mark.postgresql(
    reason="the one-statement write and synchronous_commit are PostgreSQL's; SQLite takes "
    "the ORM path with the same commits"
)


class _Statements:
    """Every statement the connection sends, with whether it ran inside a transaction block
    (then it commits with the block's end) or on its own (autocommit: its own commit)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []

    def __call__(self, execute, sql, params, many, context):
        self.seen.append((sql.strip(), connection.in_atomic_block))
        return execute(sql, params, many, context)


def _capture(advance) -> tuple[str, list[tuple[str, bool]]]:
    statements = _Statements()
    with connection.execute_wrapper(statements):
        result = advance()
    return result, statements.seen


def _tagging_run(tool: str = "flag_order") -> Run:
    demo_policy_version()
    steps = [
        {"calls": [{"tool": "read_order", "arguments": {"order_id": "ord_4472"}}]},
        {"calls": [{"tool": tool, "arguments": {"order_id": "ord_4472", "tag": "damaged"}}]},
        {"calls": [], "message": "Tagged."},
    ]
    return run_start(
        goal="Tag the damaged order.",
        tools=["read_order", tool],
        actor="scripted",
        guardian="scripted",
        config={
            "scenario": {
                "name": "tagging",
                "goal": "Tag the damaged order.",
                "tools": ["read_order", tool],
                "actor": {"turns": steps},
                "guardian": {"model_version": "scripted-tagging"},
            }
        },
    )


@postgres_only
def test_a_read_only_turn_in_a_slice_reads_the_run_and_waits_for_no_flush():
    run = _long_run(20)
    turns = RunSlice(run.pk)
    assert turns.advance(last=False) == "continued"  # the slice's first turn claims
    token = turns.token
    assert token
    before = Run.objects.get(pk=run.pk).lease_expires_at

    result, seen = _capture(lambda: turns.advance(last=False))

    assert result == "continued"
    sql = [text for text, _ in seen]
    assert len(sql) == 3, "\n".join(sql)
    read, started, finish = sql
    # The run read under the kept lease: a SELECT, no write of its own.
    assert read.startswith("WITH claimed AS (")
    assert "UPDATE runs_run" not in read
    # The turn and its read's start: one statement, its commit not waited for.
    assert "INSERT INTO runs_turn" in started
    assert "INSERT INTO runs_toolcall" in started
    assert NO_WAIT in started
    # The read's result, the decision and the renewed lease: one statement, not waited for.
    assert finish.startswith("WITH moved AS")
    assert "UPDATE runs_toolcall" in finish
    assert NO_WAIT in finish
    assert [inside for _, inside in seen] == [False, False, False]  # each its own commit
    run.refresh_from_db()
    assert run.lease_token == token == turns.token
    assert run.lease_expires_at > before  # renewed by the turn's own write
    turn = run.turns.get(index=1)
    assert turn.decision.outcome == "continue"
    assert list(turn.tool_calls.values_list("status", "result")) == [
        ("done", '{"error": "no such order"}')
    ]


@postgres_only
def test_the_slices_last_turn_commits_with_the_flush_and_gives_the_lease_back():
    run = _long_run(20)
    turns = RunSlice(run.pk)
    assert turns.advance(last=False) == "continued"

    result, seen = _capture(lambda: turns.advance(last=True))

    assert result == "continued"
    finish = [text for text, _ in seen if text.startswith("WITH moved AS")]
    assert len(finish) == 1
    assert NO_WAIT not in finish[0]  # the slice's last commit waits for the flush
    run.refresh_from_db()
    assert (run.lease_token, run.lease_expires_at, turns.token) == ("", None, "")


@postgres_only
def test_a_read_only_turn_outside_a_slice_waits_for_one_flush_its_decisions():
    run = _long_run(20)
    run_advance(run_id=run.pk)

    result, seen = _capture(lambda: run_advance(run_id=run.pk, enqueue_next=False))

    assert result == "continued"
    sql = [text for text, _ in seen]
    # the claim (lease taken, returning the run and its last turns); the turn with its read
    # started, not waited for; then the decision, flushed
    assert len(sql) == 3, "\n".join(sql)
    assert "UPDATE runs_run" in sql[0]
    assert NO_WAIT in sql[1]
    assert sql[2].startswith("WITH moved AS")
    assert NO_WAIT not in sql[2]
    assert Run.objects.get(pk=run.pk).lease_token == ""


def test_a_cancel_between_two_turns_of_a_slice_stops_the_next_one_before_it_reads_on():
    run = _long_run(20)
    turns = RunSlice(run.pk)
    assert turns.advance(last=False) == "continued"
    assert run_cancel(run_id=run.pk)

    assert turns.advance(last=False) == "skipped"

    run.refresh_from_db()
    assert run.status == "cancelled"
    assert run.turns.count() == 1


def test_a_lease_taken_over_between_two_turns_of_a_slice_is_not_read_under_again():
    run = _long_run(20)
    turns = RunSlice(run.pk)
    assert turns.advance(last=False) == "continued"
    # The lease ran out and the sweeper gave the run to another worker.
    Run.objects.filter(pk=run.pk).update(lease_token="another-worker")

    assert turns.advance(last=False) == "skipped"

    assert Run.objects.get(pk=run.pk).turns.count() == 1


def test_an_expired_kept_lease_is_not_read_under():
    run = _long_run(20)
    turns = RunSlice(run.pk)
    assert turns.advance(last=False) == "continued"
    Run.objects.filter(pk=run.pk).update(lease_expires_at=timezone.now())

    assert turns.advance(last=False) == "skipped"


# A reversible write whose function looks at what is committed when it runs: the worker is in
# autocommit then (no transaction open), so what it finds was committed before the call ran.
SEEN_WHEN_TAGGING: list[dict] = []


def _witnessed_tag(arguments: dict, *, idempotency_key: str) -> str:
    call = ToolCall.objects.select_related("turn").get(idempotency_key=idempotency_key)
    SEEN_WHEN_TAGGING.append(
        {
            "in_transaction": connection.in_atomic_block,
            "status": call.status,
            "proposal": call.turn.proposal,
        }
    )
    DemoSideEffect.objects.create(
        tool="witnessed_tag", idempotency_key=idempotency_key, payload=arguments
    )
    return "tagged"


WITNESSED_TAG = Tool(
    name="witnessed_tag",
    description="Tag an order (test: looks at what is committed when it runs).",
    schema={
        "type": "object",
        "properties": {"order_id": {"type": "string"}, "tag": {"type": "string"}},
        "required": ["order_id", "tag"],
    },
    risk_class=RiskClass.REVERSIBLE_WRITE,
    func=_witnessed_tag,
)


def test_a_write_turn_commits_the_turn_and_its_call_started_before_the_call_runs(settings):
    settings.GUARDIAN_TOOLS = [*settings.GUARDIAN_TOOLS, "tests.test_turn_commits.WITNESSED_TAG"]
    SEEN_WHEN_TAGGING.clear()
    run = _tagging_run("witnessed_tag")
    assert run_advance(run_id=run.pk, enqueue_next=False) == "continued"  # the read

    result, seen = _capture(lambda: run_advance(run_id=run.pk, enqueue_next=False))

    assert result == "continued"
    assert len(SEEN_WHEN_TAGGING) == 1
    witness = SEEN_WHEN_TAGGING[0]
    assert witness["in_transaction"] is False
    assert witness["status"] == ToolCallStatus.STARTED
    assert witness["proposal"]["calls"][0]["tool"] == "witnessed_tag"
    # Two commits: the turn with its call started (one statement on PostgreSQL, one
    # transaction on SQLite), then the call's result with the decision.
    started = [i for i, (text, _) in enumerate(seen) if "INSERT INTO runs_toolcall" in text]
    assert len(started) == 1
    text, inside = seen[started[0]]
    if "INSERT INTO runs_turn" not in text:
        before, before_inside = seen[started[0] - 1]
        assert before.startswith('INSERT INTO "runs_turn"')
        assert inside  # the same transaction as the turn's insert
        assert before_inside
    writes = [(text, inside) for text, inside in seen if not text.startswith("WITH claimed")]
    done_on_its_own = [
        text
        for text, inside in writes
        if not inside and text.startswith("UPDATE") and "runs_toolcall" in text
    ]
    assert done_on_its_own == []  # the result waits for the decision
    call = ToolCall.objects.get(turn__run=run, tool="witnessed_tag")
    assert (call.status, call.result) == (ToolCallStatus.DONE, "tagged")
    assert call.turn.decision.outcome == "continue"


def test_a_write_turn_that_fails_before_its_decision_runs_its_call_again_under_its_key(
    monkeypatch,
):
    import runs.turns

    run = _tagging_run()
    assert run_advance(run_id=run.pk, enqueue_next=False) == "continued"
    real = runs.turns.turn_finish

    def lost_before_the_decision(*args, **kwargs):
        raise ConnectionError("the database went away before the decision's commit")

    monkeypatch.setattr(runs.turns, "turn_finish", lost_before_the_decision)
    assert run_advance(run_id=run.pk, enqueue_next=False) == "failed"
    call = ToolCall.objects.get(turn__run=run, tool="flag_order")
    assert call.status == ToolCallStatus.STARTED  # the result never landed
    assert DemoSideEffect.objects.filter(tool="flag_order").count() == 1

    monkeypatch.setattr(runs.turns, "turn_finish", real)
    assert run_advance(run_id=run.pk, enqueue_next=False) == "continued"

    call.refresh_from_db()
    assert call.status == ToolCallStatus.DONE
    assert "already flagged under this key" in call.result  # run again, under the same key
    assert DemoSideEffect.objects.filter(tool="flag_order").count() == 1
    assert call.turn.decision.outcome == "continue"
    assert run_advance(run_id=run.pk, enqueue_next=False) == "continued"  # and it goes on


def test_an_approved_irreversible_calls_result_is_committed_right_after_it_runs(reviewer):
    """A call that needs approval is recorded done in a commit of its own, before the
    guardian reads its result: a crash after it leaves the call done, not ambiguous, and
    nobody is asked whether the refund went through."""
    from escalations.models import EscalationStatus
    from escalations.verdicts import escalation_resolve
    from tests.runs_helpers import drive, start

    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    escalation_resolve(escalation_id=escalation.pk, reviewer=reviewer, decision="approve")

    result, seen = _capture(lambda: run_advance(run_id=run.pk, enqueue_next=False))

    assert result in ("continued", "finished")
    sql = [text for text, _ in seen]
    done = [
        i
        for i, (text, inside) in enumerate(seen)
        if not inside and text.startswith("UPDATE") and "runs_toolcall" in text
    ]
    assert len(done) == 1, "\n".join(sql)
    decision = next(
        i for i, text in enumerate(sql) if re.search(r'INSERT INTO "?runs_decision', text)
    )
    assert done[0] < decision
    refund = ToolCall.objects.get(turn__run=run, tool="issue_refund", status="done")
    assert refund.result.startswith("Refund of 49.90")
