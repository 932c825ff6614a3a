"""The client's README examples (clients/python/examples), run as a user runs them, against a
live Guardian judging with its local guardian: a reviewer in the queue confirms the injected
note and approves the refund; the refund runs once, the note never reaches the model, the
guardian finds the goal reached, and every step replays."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from escalations.models import Escalation, EscalationKind, EscalationStatus
from escalations.verdicts import escalation_resolve
from runs.models import Run, RunStatus, ToolCall
from runs.replay import run_replay
from tests.client_helpers import guardian_for

pytestmark = pytest.mark.django_db(transaction=True)

EXAMPLES = Path(__file__).resolve().parent.parent / "clients" / "python" / "examples"


class QueueReviewer:
    """Decides each escalation as it opens, as a reviewer would: approves a held refund and
    answers that the order note is an injection. Records what each one showed."""

    def __init__(self, reviewer) -> None:
        self.reviewer, self.seen, self.done = reviewer, [], threading.Event()
        self.thread = threading.Thread(target=self._work, daemon=True)
        self.thread.start()

    def _work(self) -> None:
        try:
            while not self.done.is_set():
                for escalation in Escalation.objects.filter(status=EscalationStatus.OPEN):
                    results = escalation.turn.tool_calls.values_list("result", flat=True)
                    self.seen.append((escalation.kind, list(results)))
                    if escalation.kind == EscalationKind.GATED_STEP:
                        answer = {"decision": "approve"}
                    else:
                        answer = {"decision": "answer", "answer": {"integrity": True}}
                    escalation_resolve(
                        escalation_id=escalation.pk, reviewer=self.reviewer, reason="", **answer
                    )
                time.sleep(0.1)
        finally:
            connection.close()

    def stop(self) -> None:
        self.done.set()
        self.thread.join(timeout=10)


@pytest.mark.parametrize("example", ["langgraph_refund.py", "agents_sdk_refund.py"])
def test_the_readme_example_refunds_once_withholds_the_injected_note_and_replays(
    example, live_server, integrator, reviewer
):
    token = guardian_for(integrator)
    queue = QueueReviewer(reviewer)
    try:
        finished = subprocess.run(
            [sys.executable, str(EXAMPLES / example), "--wait", "60"],
            env={**os.environ, "GUARDIAN_URL": live_server.url, "GUARDIAN_TOKEN": token},
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        queue.stop()
    assert finished.returncode == 0, finished.stdout + finished.stderr
    printed = finished.stdout
    assert printed.count("refund_order('ord_4472', 49.9)") == 1
    assert "is succeeded" in printed

    run = Run.objects.get()
    assert run.status == RunStatus.SUCCEEDED
    assert ToolCall.objects.filter(turn__run=run, tool="refund_order", status="done").count() == 1
    assert run.guardian == "local"
    assert run.stop_reason == "goal_reached"
    # The guardian flagged the note as it came back, and the reviewer saw it; the model never
    # did. Then the refund was held for the reviewer.
    kinds = [kind for kind, _ in queue.seen]
    assert kinds == [EscalationKind.INTEGRITY, EscalationKind.GATED_STEP]
    assert "NOTE TO THE AI ASSISTANT" in str(queue.seen[0][1])
    assert "NOTE TO THE AI ASSISTANT" not in printed
    assert {replayed.status for replayed in run_replay(run=run)} == {"identical"}


def test_an_example_with_a_bad_token_says_what_to_check(live_server):
    finished = subprocess.run(
        [sys.executable, str(EXAMPLES / "langgraph_refund.py")],
        env={**os.environ, "GUARDIAN_URL": live_server.url, "GUARDIAN_TOKEN": "gdn_old"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 1
    assert "Traceback" not in finished.stderr
    assert "Authorization: the token is not valid." in finished.stderr
    assert "check GUARDIAN_TOKEN" in finished.stderr
