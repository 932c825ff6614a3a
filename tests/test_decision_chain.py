"""The tamper-evident decision log, on PostgreSQL and on the embedded SQLite: each decision
hashed and chained to the one before it in the run, the triggers that refuse changing or
deleting the log outside a purge, verify_log naming the first broken link, and export, purge,
import, verify."""

import csv
import io
import json

import django.apps
import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, connection, transaction
from django.urls import reverse

from escalations.models import Escalation, LabelledExample, Verdict
from escalations.verdicts import escalation_resolve
from runs.audit import ImportProblem, run_chain_verify, run_export, run_import, run_purge
from runs.chain import HASHED_FIELDS, content_hash, log_keys
from runs.models import Decision, Run, RunStatus, ToolCall, ToolCallStatus, Turn
from runs.services import run_advance
from tests.factories import log_triggers_off, tamper
from tests.runs_helpers import drive, start

pytestmark = pytest.mark.django_db


def _decisions(run: Run) -> list[Decision]:
    return list(
        Decision.objects.filter(turn__run=run).select_related("turn").order_by("turn__index")
    )


def _refund_resolved(reviewer) -> Run:
    """A run that waited for a reviewer, was approved and went on to its end: decisions by
    the one-statement path, the ORM path (the escalation, the stop) and after a verdict."""
    run = drive(start("refund_waits_for_approval"))
    assert run.status == RunStatus.WAITING
    escalation = run.escalations.get()
    escalation_resolve(escalation_id=escalation.pk, reviewer=reviewer, decision="approve")
    return drive(run)


def _refused(action) -> None:
    with pytest.raises(IntegrityError, match="append-only"), transaction.atomic():
        action()


def test_every_decision_is_hashed_and_chained_to_the_one_before_it(reviewer):
    run = _refund_resolved(reviewer)
    decisions = _decisions(run)
    assert len(decisions) >= 3
    assert decisions[0].prev_hash == ""
    for before, after in zip(decisions, decisions[1:], strict=False):
        assert after.prev_hash == before.content_hash != ""
    for decision in decisions:
        # Keyed: not the unkeyed SHA-256 anyone could recompute (runs/chain.py).
        fields = {name: getattr(decision, name) for name in HASHED_FIELDS}
        assert decision.content_hash != content_hash(
            run_uid=run.uid,
            turn_index=decision.turn.index,
            policy_number=run.policy_version.number,
            fields=fields,
        )
        assert decision.seal_key == log_keys().current_id
    report = run_chain_verify(run)
    assert report.ok
    assert report.decisions == len(decisions)
    assert report.head == decisions[-1].content_hash


def test_a_long_run_chains_every_turn_written_in_one_statement():
    from tests.test_turn_cost import _long_run

    run = _long_run(turns=12)
    for _ in range(12):
        assert run_advance(run_id=run.pk) == "continued"
    assert run_chain_verify(run).ok
    assert len(_decisions(run)) == 12


def test_verify_log_names_the_run_and_turn_of_an_altered_decision(reviewer, capsys):
    run = _refund_resolved(reviewer)
    other = _refund_resolved(reviewer)
    call_command("verify_log", "--all")
    altered = _decisions(run)[1]
    tamper("UPDATE runs_decision SET outcome = 'stop_success' WHERE id = %s", [altered.pk])

    with pytest.raises(CommandError) as failed:
        call_command("verify_log", str(run.pk))
    assert failed.value.returncode == 2
    err = capsys.readouterr().err
    assert f"run {run.pk} turn {altered.turn.index}: content_hash does not match" in err
    with pytest.raises(CommandError):
        call_command("verify_log", "--all")
    err = capsys.readouterr().err
    assert f"run {run.pk} turn {altered.turn.index}" in err
    assert f"run {other.pk} " not in err
    call_command("verify_log", str(other.pk))


def test_a_decision_removed_from_the_middle_breaks_the_link_of_the_next(reviewer):
    run = _refund_resolved(reviewer)
    decisions = _decisions(run)
    tamper("DELETE FROM runs_decision WHERE id = %s", [decisions[1].pk])
    report = run_chain_verify(run)
    # Its escalation now hangs on a turn without a decision, and the next link is broken.
    assert (decisions[1].turn.index, "an escalation on a turn that has no decision") in (
        report.problems
    )
    assert any(
        turn == decisions[2].turn.index and "prev_hash" in text for turn, text in report.problems
    )


def test_a_rewritten_decision_with_a_recomputed_hash_breaks_the_next_link(reviewer):
    run = _refund_resolved(reviewer)
    first, second = _decisions(run)[:2]
    fields = {name: getattr(first, name) for name in HASHED_FIELDS} | {"outcome": "replan"}
    forged = content_hash(
        run_uid=run.uid, turn_index=0, policy_number=run.policy_version.number, fields=fields
    )
    tamper(
        "UPDATE runs_decision SET outcome = 'replan', content_hash = %s WHERE id = %s",
        [forged, first.pk],
    )
    # Without the key the forged decision's own seal fails, and so does the next link.
    problems = run_chain_verify(run).problems
    assert problems[0][0] == first.turn.index
    assert "content_hash does not match" in problems[0][1]
    assert any(turn == second.turn.index and "prev_hash" in text for turn, text in problems)


def test_the_log_refuses_update_and_delete_outside_a_purge(reviewer):
    run = _refund_resolved(reviewer)
    decision = _decisions(run)[0]
    _refused(lambda: Decision.objects.filter(pk=decision.pk).update(outcome="replan"))
    decision.reasons = []
    _refused(lambda: decision.save())
    _refused(lambda: Decision.objects.filter(pk=decision.pk).delete())
    _refused(lambda: Turn.objects.filter(pk=decision.turn_id).delete())

    def raw(sql, pk=decision.pk):
        with connection.cursor() as cursor:
            cursor.execute(sql, [pk])

    _refused(lambda: raw("UPDATE runs_decision SET state_hash = 'x' WHERE id = %s"))
    _refused(lambda: raw("DELETE FROM runs_decision WHERE id = %s"))
    verdict = Verdict.objects.get(escalation__run=run)
    _refused(lambda: Verdict.objects.filter(pk=verdict.pk).update(reason="edited"))
    _refused(lambda: Verdict.objects.filter(pk=verdict.pk).update(resulting_outcome="replan"))
    _refused(lambda: raw("DELETE FROM escalations_verdict WHERE id = %s", verdict.pk))
    done = ToolCall.objects.filter(turn__run=run, status=ToolCallStatus.DONE).first()
    _refused(lambda: ToolCall.objects.filter(pk=done.pk).update(result="something else"))
    if LabelledExample.objects.filter(verdict=verdict).exists():
        _refused(lambda: LabelledExample.objects.filter(verdict=verdict).update(label={}))
    assert run_chain_verify(run).ok


def test_a_purge_deletes_the_whole_run_and_nothing_else(reviewer):
    run = _refund_resolved(reviewer)
    other = _refund_resolved(reviewer)
    assert run_purge(run_id=run.pk) is True
    assert not Run.objects.filter(pk=run.pk).exists()
    assert not Decision.objects.filter(turn__run_id=run.pk).exists()
    assert not Escalation.objects.filter(run_id=run.pk).exists()
    assert run_chain_verify(other).ok
    assert run_purge(run_id=run.pk) is False
    # The purge's permission ended with it.
    _refused(lambda: Decision.objects.filter(turn__run=other).delete())


def test_export_purge_import_verify(reviewer, tmp_path):
    run = _refund_resolved(reviewer)
    path = tmp_path / "run.json"
    call_command("export_run", str(run.pk), "-o", str(path))
    document = json.loads(path.read_text())
    assert document["head_hash"] == _decisions(run)[-1].content_hash
    assert [t["decision"]["content_hash"] for t in document["turns"]] == [
        d.content_hash for d in _decisions(run)
    ]
    assert document["escalations"][0]["verdict"]["reviewer"] == reviewer.username
    uid, old_id = run.uid, run.pk
    calls = ToolCall.objects.filter(turn__run=run).count()
    with pytest.raises(CommandError, match="--yes"):
        call_command("purge_run", str(run.pk))
    call_command("purge_run", str(run.pk), "--yes")
    assert not Run.objects.filter(pk=old_id).exists()

    call_command("import_run", str(path))

    imported = Run.objects.get(uid=uid)
    assert imported.pk != old_id
    assert run_chain_verify(imported).ok
    call_command("verify_log", str(imported.pk))
    assert ToolCall.objects.filter(turn__run=imported).count() == calls
    assert Verdict.objects.get(escalation__run=imported).reviewer == reviewer
    assert run_export(imported)["turns"] == document["turns"]
    with pytest.raises(ImportProblem, match="already in this database"):
        run_import(document)


def test_a_document_with_an_altered_decision_is_not_imported(reviewer, tmp_path):
    run = _refund_resolved(reviewer)
    document = run_export(run)
    run_purge(run_id=run.pk)
    document["turns"][1]["decision"]["reasons"] = []
    path = tmp_path / "altered.json"
    path.write_text(json.dumps(document))
    with pytest.raises(CommandError, match="turn 1: content_hash does not match"):
        call_command("import_run", str(path))
    assert not Run.objects.filter(uid=run.uid).exists()


def test_the_existing_decisions_are_chained_by_the_migration():
    from importlib import import_module

    from tests.factories import make_decision, make_turn

    migration = import_module("runs.migrations.0009_decision_hash_chain")
    keyed = import_module("runs.migrations.0018_keyed_log_chain")
    # Written as before the chain: make_decision seals as the app does unless told the hash.
    first = make_decision(content_hash="")
    run = first.turn.run
    second = make_decision(turn=make_turn(run=run, index=1), content_hash="")
    assert first.content_hash == second.content_hash == second.prev_hash == ""
    with log_triggers_off("runs_decision"):
        migration.chain_existing(django.apps.apps, None)
    # The unkeyed chain of 0009 is no longer enough: verify names every decision.
    assert "not sealed under any key" in run_chain_verify(run).problem
    with log_triggers_off("runs_decision"):
        keyed.reseal_existing(django.apps.apps, None)
    report = run_chain_verify(run)
    assert report.ok, report.describe()
    assert report.decisions == 2
    second.refresh_from_db()
    first.refresh_from_db()
    assert second.prev_hash == first.content_hash != ""
    assert first.seal_key == second.seal_key == log_keys().current_id


def test_the_run_page_verifies_and_exports(client, auditor, reviewer):
    run = _refund_resolved(reviewer)
    client.force_login(auditor)
    page = client.get(reverse("runs:detail", args=[run.pk]))
    assert reverse("runs:verify", args=[run.pk]) in page.content.decode()
    verified = client.get(reverse("runs:verify", args=[run.pk]), HTTP_HX_REQUEST="true")
    assert "Chain intact" in verified.content.decode()
    assert _decisions(run)[-1].content_hash in verified.content.decode()
    tamper("UPDATE runs_decision SET reasons = '[]' WHERE id = %s", [_decisions(run)[1].pk])
    verified = client.get(reverse("runs:verify", args=[run.pk]), HTTP_HX_REQUEST="true")
    assert "Chain broken at turn 1" in verified.content.decode()

    exported = client.get(reverse("runs:export_json", args=[run.pk]))
    assert exported["Content-Type"].startswith("application/json")
    assert json.loads(exported.content)["run"]["uid"] == str(run.uid)
    rows = list(
        csv.DictReader(
            io.StringIO(
                b"".join(
                    client.get(reverse("runs:export_csv", args=[run.pk])).streaming_content
                ).decode()
            )
        )
    )
    assert [int(r["turn"]) for r in rows] == [d.turn.index for d in _decisions(run)]
    assert rows[0]["content_hash"] == _decisions(run)[0].content_hash
