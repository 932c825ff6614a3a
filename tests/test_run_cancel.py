"""A cancel stops a run's calls: no call starts once the run is cancelled (the check is in the
statement that records the call as started), a call already running when the cancel came is
recorded so, and an external run's started calls are no longer answered as runnable."""

import threading
import time
import uuid

import pytest
from django.db import connection
from django.urls import reverse

from demo.setup import demo_policy_version
from escalations.models import EscalationStatus
from escalations.verdicts import escalation_resolve
from runs.audit import run_chain_verify
from runs.external import ExternalError, _lease, _proposal_from_body, _step_open
from runs.models import DemoSideEffect, Run, RunStatus, ToolCall, ToolCallStatus, Turn
from runs.services import _claim, run_advance, run_cancel, run_start
from runs.turns import agent_turn_advance
from tests.processes import start_worker, stop_worker
from tests.test_external_runs import api, read, start, step  # noqa: F401 - api is a fixture

REFUND = {"order_id": "ord_4472", "amount": 49.9}
IRREVERSIBLE = {"read_only": 0, "reversible_write": 0, "irreversible": 1.0, "regulated": 0}


def lookup_then_refund(seconds: float) -> dict:
    """A held step [slow_lookup, issue_refund]: the refund is irreversible, so a person
    approves the step; the lookup takes `seconds`."""
    lookup = {"topic": "courier", "seconds": seconds}
    return {
        "name": "lookup_then_refund",
        "goal": "Check the courier's report, then refund order ord_4472.",
        "acceptance_criteria": ["Refund issued"],
        "tools": ["slow_lookup", "issue_refund"],
        "actor": {
            "turns": [
                {
                    "calls": [
                        {"tool": "slow_lookup", "arguments": lookup},
                        {"tool": "issue_refund", "arguments": REFUND},
                    ]
                },
                {"calls": [], "message": "Refunded ord_4472."},
            ]
        },
        "guardian": {
            "risk": {"issue_refund": IRREVERSIBLE},
            "turns": [{}, {}, {"goal_reached": 0.97}],
        },
    }  # fmt: skip


def approved_run(reviewer, seconds: float) -> Run:
    """A run whose held step a reviewer approved: its next turn runs the lookup, then the
    refund."""
    demo_policy_version()
    scenario = lookup_then_refund(seconds)
    run = run_start(
        goal=scenario["goal"],
        tools=scenario["tools"],
        actor="scripted",
        guardian="scripted",
        config={"scenario": scenario},
    )
    assert run_advance(run_id=run.pk) == "waiting"
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    escalation_resolve(escalation_id=escalation.pk, reviewer=reviewer, decision="approve")
    run.refresh_from_db()
    assert run.status == RunStatus.RUNNING
    return run


def refunds() -> int:
    return DemoSideEffect.objects.filter(tool="issue_refund").count()


@pytest.mark.django_db
def test_no_call_starts_once_the_run_is_cancelled_under_a_worker_that_holds_it(reviewer):
    run = approved_run(reviewer, seconds=0)
    token = uuid.uuid4().hex
    claimed = _claim(run.pk, token)  # a worker took the turn...
    assert claimed is not None
    assert run_cancel(run_id=run.pk)  # ...and the run is cancelled before its calls start

    assert agent_turn_advance(claimed, token) == "finished"

    assert refunds() == 0
    run.refresh_from_db()
    assert (run.status, run.stop_reason, run.lease_token) == (RunStatus.CANCELLED, "cancelled", "")
    calls = ToolCall.objects.filter(turn__run=run, turn__index=1).order_by("position")
    assert [(c.tool, c.status, c.started_at) for c in calls] == [
        ("slow_lookup", ToolCallStatus.PROPOSED, None),
        ("issue_refund", ToolCallStatus.PROPOSED, None),
    ]
    assert all("cancelled" in c.error for c in calls), [c.error for c in calls]
    # The turn is recorded as ended, undecided: nothing follows a cancel.
    turn = Turn.objects.get(run=run, index=1)
    assert turn.finished_at is not None
    assert not hasattr(turn, "decision") or turn.decision is None
    report = run_chain_verify(run)
    assert report.ok, report.describe()


@pytest.mark.django_db(transaction=True)
def test_a_cancel_while_the_lookup_runs_stops_the_refund_on_postgresql_threads(reviewer):
    """The reported race, in two threads of this process on the configured database: the
    worker's turn runs the approved step; the cancel lands while the lookup runs."""
    if connection.vendor != "postgresql":
        pytest.skip("SQLite has one writer at a time: the worker test below covers it")
    run = approved_run(reviewer, seconds=2)
    outcome = {}

    def worker():
        try:
            outcome["advance"] = run_advance(run_id=run.pk)
        finally:
            connection.close()

    thread = threading.Thread(target=worker)
    thread.start()
    lookup = ToolCall.objects.filter(turn__run=run, turn__index=1, tool="slow_lookup")
    deadline = time.monotonic() + 10
    while not lookup.filter(status=ToolCallStatus.STARTED).exists():
        assert time.monotonic() < deadline, "the lookup never started"
        time.sleep(0.05)
    assert run_cancel(run_id=run.pk)
    thread.join(timeout=20)
    assert not thread.is_alive()

    assert outcome["advance"] == "finished"
    assert refunds() == 0
    run.refresh_from_db()
    assert (run.status, run.lease_token) == (RunStatus.CANCELLED, "")
    looked = lookup.get()
    assert looked.status == ToolCallStatus.DONE
    assert "running when the run was cancelled" in looked.error
    refund = ToolCall.objects.get(turn__run=run, turn__index=1, tool="issue_refund")
    assert (refund.status, refund.started_at) == (ToolCallStatus.PROPOSED, None)
    assert "cancelled" in refund.error
    # The cancelled run's log still verifies: the cancel is sealed, not mistaken for tampering.
    report = run_chain_verify(run)
    assert report.ok, report.describe()


@pytest.mark.worker
@pytest.mark.django_db(transaction=True)
def test_a_cancel_while_the_lookup_runs_on_a_real_worker_stops_the_refund(reviewer):
    from tests.test_worker_runs import wait_for, worker_env

    run = approved_run(reviewer, seconds=4)
    worker = start_worker(**worker_env())
    try:
        lookup = ToolCall.objects.filter(turn__run=run, turn__index=1, tool="slow_lookup")
        wait_for(
            lambda: lookup.filter(status=ToolCallStatus.STARTED).exists(),
            timeout=60,
            what="the slow lookup to start",
            poll=0.05,
        )
        assert run_cancel(run_id=run.pk)
        wait_for(
            lambda: (
                lookup.filter(status=ToolCallStatus.DONE).exists()
                and not Run.objects.filter(pk=run.pk).exclude(lease_token="").exists()
            ),
            timeout=30,
            what="the worker to finish the turn",
        )
        time.sleep(1)  # a refund written late would land now
    finally:
        log = stop_worker(worker)
    assert refunds() == 0, log[-3000:]
    run.refresh_from_db()
    assert (run.status, run.stop_reason) == (RunStatus.CANCELLED, "cancelled")
    assert "running when the run was cancelled" in lookup.get().error
    refund = ToolCall.objects.get(turn__run=run, turn__index=1, tool="issue_refund")
    assert (refund.status, refund.started_at) == (ToolCallStatus.PROPOSED, None)


# ---- external runs ------------------------------------------------------------------------------


@pytest.mark.django_db
def test_an_external_step_opened_after_a_cancel_is_not_answered_run(api):  # noqa: F811
    run_id = start(api)["id"]
    token, claimed = _lease(run_id)  # a request took the run to open step 0...
    assert run_cancel(run_id=run_id)  # ...and the run is cancelled before it records it

    with pytest.raises(ExternalError) as refused:
        _step_open(
            claimed,
            token,
            step=0,
            proposal=_proposal_from_body({"calls": [read()], "message": ""}),
            recent=[],
        )

    assert refused.value.status == 409
    assert "cancelled" in refused.value.detail
    assert not ToolCall.objects.filter(turn__run_id=run_id).exists()


@pytest.mark.django_db
def test_an_external_call_handed_out_before_a_cancel_is_no_longer_runnable(api):  # noqa: F811
    run_id = start(api)["id"]
    gate = step(api, run_id, 0, read())
    assert gate["status"] == "run"

    assert run_cancel(run_id=run_id)

    read_back = api.get(reverse("api:run-step", args=[run_id, 0])).json()
    again = step(api, run_id, 0, read(), expect=200)  # a retry of the proposal
    for answer in (read_back, again):
        assert answer["status"] == "cancelled"
        assert [c["status"] for c in answer["calls"]] == ["cancelled"]
        assert "cancelled" in answer["calls"][0]["message"]
    call = ToolCall.objects.get(turn__run_id=run_id)
    assert "running when the run was cancelled" in call.error

    # Its results, reported now, do not continue the run.
    response = api.post(
        reverse("api:run-step-results", args=[run_id, 0]),
        {"results": [{"position": 0, "result": "order ord_1: shipped"}]},
        format="json",
    )
    assert response.status_code == 409, response.content
    assert "cancelled" in " ".join(response.json()["detail"])
    assert Run.objects.get(pk=run_id).status == RunStatus.CANCELLED
    assert not Turn.objects.filter(run_id=run_id, decision__isnull=False).exists()
