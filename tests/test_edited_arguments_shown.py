"""A reviewer's edit to a held call's arguments is said wherever the verdict appears: the
item's history and verdict, the run page, the run's JSON export (and its import), and the
labelled-example export with its API (issue 22, item 5)."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from escalations.examples import labelled_examples_export
from escalations.models import Approval, EscalationStatus
from runs.audit import run_export, run_import, run_purge
from runs.models import Run
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db

SAID = "approved with edited arguments: amount 49.9 → 39.9"


def approved_with_an_edit(client, reviewer):
    """The demo refund held for approval, approved with its amount cut from 49.9 to 39.9."""
    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get(status=EscalationStatus.OPEN)
    client.force_login(reviewer)
    response = client.get(reverse("escalations:detail", args=[escalation.pk]))
    call = response.context["pane"].held_calls[0].call
    client.post(
        reverse("escalations:decide", args=[escalation.pk]),
        {
            "decision": "approve",
            "approve_call": "0",
            "seen_0": call.action_hash,
            "risk_0": "irreversible",
            "arguments_0": json.dumps({**call.arguments, "amount": 39.9}),
            "reason": "",
        },
        HTTP_HX_REQUEST="true",
    )
    escalation.refresh_from_db()
    assert escalation.status == EscalationStatus.APPROVED
    assert Approval.objects.get(escalation=escalation).original_arguments["amount"] == 49.9
    return escalation


def test_the_items_history_and_verdict_say_what_the_reviewer_changed(client, reviewer):
    escalation = approved_with_an_edit(client, reviewer)
    page = client.get(reverse("escalations:detail", args=[escalation.pk])).content.decode()
    history = page.split('id="history-title"')[1]
    assert f"call 0 (issue_refund) {SAID}" in history
    verdict = page.split('id="closed-title"')[1].split("</section>")[0]
    assert SAID in verdict


def test_the_run_page_says_the_verdict_was_given_with_edited_arguments(client, reviewer, auditor):
    escalation = approved_with_an_edit(client, reviewer)
    client.force_login(auditor)
    page = client.get(reverse("runs:detail", args=[escalation.run_id])).content.decode()
    assert f"call 0 (issue_refund) {SAID}" in page


def test_the_runs_json_export_carries_the_approval_and_the_change_list(client, reviewer):
    escalation = approved_with_an_edit(client, reviewer)
    out = StringIO()
    call_command("export_run", str(escalation.run_id), stdout=out)
    document = json.loads(out.getvalue())
    exported = next(e for e in document["escalations"] if e["status"] == "approved")
    change = {"field": "amount", "before": 49.9, "after": 39.9}
    assert exported["verdict"]["edited_arguments"][0]["changes"] == [change]
    assert SAID in exported["verdict"]["edited_arguments"][0]["words"]
    (approval,) = exported["approvals"]
    assert approval["original_arguments"]["amount"] == 49.9
    assert approval["arguments"]["amount"] == 39.9
    assert approval["changes"] == [change]

    # Read back into another installation, the edit is still there to be shown.
    run = Run.objects.get(pk=escalation.run_id)
    document = run_export(run)
    run_purge(run_id=run.pk)
    copy = run_import(document)
    copied = Approval.objects.get(escalation__run=copy)
    assert copied.original_arguments["amount"] == 49.9


def test_the_labelled_example_export_and_its_api_carry_the_edit(client, reviewer):
    escalation = approved_with_an_edit(client, reviewer)
    (risk,) = [e for e in labelled_examples_export() if e["escalation_id"] == escalation.pk]
    edits = risk["verdict"]["edited_arguments"]
    assert [e["changes"] for e in edits] == [[{"field": "amount", "before": 49.9, "after": 39.9}]]
    assert SAID in edits[0]["words"]

    listed = client.get("/api/examples/").json()
    example = next(e for e in listed["results"] if e["escalation_id"] == escalation.pk)
    assert SAID in example["verdict"]["edited_arguments"][0]["words"]
    body = b"".join(client.get("/api/examples/export/").streaming_content).decode()
    lines = [json.loads(line) for line in body.splitlines()]
    line = next(e for e in lines if e["escalation_id"] == escalation.pk)
    assert line["verdict"]["edited_arguments"] == edits


def test_the_escalation_api_gives_the_verdict_with_the_edit(client, reviewer):
    escalation = approved_with_an_edit(client, reviewer)
    detail = client.get(f"/api/escalations/{escalation.pk}/").json()
    (edit,) = detail["verdict"]["edited_arguments"]
    assert edit["changes"] == [{"field": "amount", "before": 49.9, "after": 39.9}]
    assert SAID in edit["words"]
