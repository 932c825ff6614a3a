"""Signed run archives (runs/archives.py), on PostgreSQL and on the embedded SQLite: a run's
export with its chain head, signed under the log's key and written atomically, and
`verify_log --file` checking one offline and naming every kind of tampering (a flipped byte,
a changed decision, a dropped last decision, a stripped signature, a retired key)."""

import json

import pytest
from django.core.management import CommandError, call_command

from escalations.verdicts import escalation_resolve
from runs import archives
from runs.archives import archive_check, archive_check_file, archive_document, archive_sign
from runs.audit import run_chain_verify
from runs.chain import log_keys
from runs.models import Run, RunStatus
from tests.runs_helpers import drive, scripted_names, start

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _archive_dir(settings, tmp_path):
    settings.GUARDIAN_ARCHIVE_DIR = tmp_path / "archive"


def _resolved(reviewer) -> Run:
    """A run that waited for a reviewer, was approved (a labelled example sealed into its
    story) and finished."""
    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get()
    escalation_resolve(escalation_id=escalation.pk, reviewer=reviewer, decision="approve")
    run = drive(run)
    assert run.status in (RunStatus.SUCCEEDED, RunStatus.FAILED)
    return run


def _archive(run: Run, tmp_path) -> tuple[dict, object]:
    document = archive_document(run, reason="test")
    path = archives.archive_write(document, tmp_path, archives.archive_name(run))
    return document, path


def _verify_file(path) -> str:
    """verify_log --file's error message (the command must fail)."""
    with pytest.raises(CommandError) as failed:
        call_command("verify_log", "--file", str(path))
    assert failed.value.returncode == 2
    return str(failed.value)


# ---- the archive and its offline check -------------------------------------------------------


def test_an_archive_holds_the_export_its_head_and_a_signature_that_verifies(
    reviewer, tmp_path, capsys
):
    run = _resolved(reviewer)
    head = run_chain_verify(run).head
    document, path = _archive(run, tmp_path)

    assert document["format"] == "guardian-run-archive/1"
    assert document["head_hash"] == head != ""
    assert document["export"]["run"]["uid"] == str(run.uid)
    assert document["signature"]["key"] == log_keys().current_id
    assert document["export"]["escalations"][0]["verdict"]["examples"]  # the sealed story
    report = archive_check_file(path)
    assert report.ok, report.describe()
    assert (report.run_id, report.head) == (run.pk, head)
    call_command("verify_log", "--file", str(path))
    out = capsys.readouterr().out
    assert "signature valid" in out
    assert "chain intact" in out
    assert head in out
    # Written atomically: no temporary file is left beside it.
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_verify_file_needs_no_database_row_of_the_run(reviewer, tmp_path):
    run = _resolved(reviewer)
    _document, path = _archive(run, tmp_path)
    from runs.audit import run_purge

    run_purge(run_id=run.pk, reason="test")
    assert archive_check_file(path).ok


def test_flipping_one_byte_is_detected(reviewer, tmp_path):
    _document, path = _archive(_resolved(reviewer), tmp_path)
    data = bytearray(path.read_bytes())
    # A byte inside the goal's text: still JSON, another content.
    at = data.index(b'"goal": "') + len(b'"goal": "')
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    message = _verify_file(path)
    assert "1 of 1 archive does not verify" in message
    report = archive_check_file(path)
    assert any("signature does not match" in p for p in report.problems)
    # The goal is sealed in every decision's and the run's seal: the chain names it too.
    assert any(p.startswith("chain: ") for p in report.problems)


def test_a_byte_that_breaks_the_json_is_named(reviewer, tmp_path):
    _document, path = _archive(_resolved(reviewer), tmp_path)
    data = bytearray(path.read_bytes())
    data[0] = ord("x")
    path.write_bytes(bytes(data))
    _verify_file(path)
    assert "is not a JSON document" in archive_check_file(path).problems[0]


def test_a_changed_decision_is_detected_by_the_signature_and_by_the_chain(reviewer, tmp_path):
    document, path = _archive(_resolved(reviewer), tmp_path)
    document["export"]["turns"][0]["decision"]["reasons"] = ["nothing to see"]
    path.write_text(json.dumps(document))
    report = archive_check_file(path)
    assert "signature does not match its content" in report.problems[0]
    assert any("turn 0: content_hash does not match" in p for p in report.problems)
    _verify_file(path)

    # Signed again by someone holding the key: the chain inside still names the turn.
    body = {k: v for k, v in document.items() if k != "signature"}
    document["signature"] = archive_sign(body)
    report = archive_check(document, path="resigned")
    assert not report.ok
    assert [p for p in report.problems if "signature" in p] == []
    assert any("turn 0: content_hash does not match" in p for p in report.problems)


def test_dropping_the_last_decision_is_detected(reviewer, tmp_path):
    document, path = _archive(_resolved(reviewer), tmp_path)
    turns = document["export"]["turns"]
    last = max(i for i, t in enumerate(turns) if t["decision"] is not None)
    turns[last]["decision"] = None
    body = {k: v for k, v in document.items() if k != "signature"}
    document["signature"] = archive_sign(body)  # even re-signed
    path.write_text(json.dumps(document))
    report = archive_check_file(path)
    assert any("its tail was cut" in p for p in report.problems), report.problems
    assert any("chain head" in p for p in report.problems)
    _verify_file(path)


def test_a_stripped_signature_is_detected(reviewer, tmp_path, capsys):
    document, path = _archive(_resolved(reviewer), tmp_path)
    del document["signature"]
    path.write_text(json.dumps(document))
    _verify_file(path)
    assert "has no signature" in capsys.readouterr().err
    assert archive_check_file(path).problems[0].startswith("has no signature")


def test_an_archive_signed_before_a_key_rotation_verifies_with_the_old_key_kept(
    reviewer, tmp_path, settings
):
    settings.GUARDIAN_LOG_KEY = "a" * 40
    run = _resolved(reviewer)
    _document, path = _archive(run, tmp_path)
    settings.GUARDIAN_LOG_KEY = "b" * 40
    settings.GUARDIAN_LOG_OLD_KEYS = ["a" * 40]
    assert archive_check_file(path).ok
    settings.GUARDIAN_LOG_OLD_KEYS = []
    problems = archive_check_file(path).problems
    assert "signed under an unknown key" in problems[0]
    _verify_file(path)


def test_verify_log_refuses_file_with_a_run(tmp_path):
    with pytest.raises(CommandError, match="--file alone"):
        call_command("verify_log", "1", "--file", str(tmp_path / "x.json"))


def test_a_run_cancelled_before_its_first_turn_archives_and_verifies(tmp_path):
    from runs.services import run_cancel

    run = start("goal_reached")
    assert run_cancel(run_id=run.pk)
    run.refresh_from_db()
    _document, path = _archive(run, tmp_path)
    report = archive_check_file(path)
    assert report.ok, report.describe()
    assert report.decisions == 0


def test_an_archive_of_a_run_with_an_audit_sample_verifies(reviewer, settings, tmp_path):
    # The audit sample travels in the export but is no part of the sealed story.
    from tests.test_audit_samples import audit_items, reading_run

    settings.GUARDIAN_AUDIT_SAMPLE_SHARE = 1.0
    run = drive(reading_run(turns=2))
    item = audit_items(run).first()
    (asked,) = item.reason["triggered"]
    escalation_resolve(
        escalation_id=item.pk, reviewer=reviewer, decision="answer",
        answer={asked["source"]: 3 if asked["source"] == "drift" else False},
    )  # fmt: skip
    document, path = _archive(run, tmp_path)
    assert any(e["kind"] == "audit_sample" for e in document["export"]["escalations"])
    assert archive_check_file(path).ok


@pytest.mark.parametrize("name", scripted_names())
def test_the_offline_check_agrees_with_verify_log_on_every_scripted_story(name, tmp_path):
    run = drive(start(name))
    in_database = run_chain_verify(run)
    assert in_database.ok, in_database.describe()
    _document, path = _archive(run, tmp_path)
    report = archive_check_file(path)
    assert report.ok, report.describe()
    assert (report.decisions, report.head) == (in_database.decisions, in_database.head)
