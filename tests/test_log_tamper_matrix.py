"""The tamper matrix of issue 22 (item 3): every table a run's story rests on × {an UPDATE of a
meaningful column, a DELETE of a row, the run's tail cut off, a forgery that rewrites the
content and recomputes every hash without the key}, done as the tables' owner with the log's
triggers switched off. verify_log must find every one and name the run and the turn.

The matrix plays someone with the owner's rights, who switches the triggers off inside the
test's transaction (tests/factories.log_triggers_off), so the rollback brings them back.
PostgreSQL only (the marker says why).
"""

import hashlib
import json

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction

from escalations.models import Approval, Escalation, LabelledExample, Verdict
from escalations.verdicts import escalation_resolve
from runs import chain, sealing
from runs.audit import run_chain_verify
from runs.models import Decision, Run, RunStatus, ToolCall, ToolCallStatus, Turn
from tests.factories import log_triggers_off
from tests.runs_helpers import drive, start
from tests.test_db_app_role import APP_ROLE, app_role  # noqa: F401 - a fixture

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.postgresql(
        reason="its forgeries rewrite rows with multi-statement SQL and UPDATE ... FROM, which "
        "SQLite's driver and dialect do not take (the seals are the same Python on both "
        "databases: tests/test_decision_chain.py checks them on SQLite)"
    ),
]

LOG_TABLES = (
    "runs_run",
    "runs_turn",
    "runs_decision",
    "runs_toolcall",
    "escalations_escalation",
    "escalations_verdict",
    "escalations_approval",
    "escalations_labelledexample",
)


# Who tampers in the cell under way: the tables' owner (triggers switched off), or the app's
# own role (tests/test_db_app_role.py), which owns nothing and so cannot switch them off.
_TAMPERER = {"who": "owner", "refused": []}


def _sql(sql: str, params=()) -> None:
    """Run `sql` as the cell's tamperer: the owner with every trigger on the log's tables off,
    or the app's role with the triggers on, in a savepoint whose refusal is recorded (and
    undone whole) rather than failing the test."""
    if _TAMPERER["who"] == "owner":
        with log_triggers_off(*LOG_TABLES), connection.cursor() as cursor:
            cursor.execute(sql, params)
        return
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(f"SET ROLE {APP_ROLE}")
            cursor.execute(sql, params)
            cursor.execute("RESET ROLE")
    except DatabaseError as refused:
        _TAMPERER["refused"].append(str(refused))


@pytest.fixture
def story(reviewer):
    """A run whose story uses every table: a refund held for a reviewer (an escalation, an
    approval, a verdict, labelled examples), approved, run and the run succeeded."""
    run = drive(start("refund_waits_for_approval"))
    escalation = run.escalations.get()
    escalation_resolve(escalation_id=escalation.pk, reviewer=reviewer, decision="approve")
    run = drive(run)
    assert run.status == RunStatus.SUCCEEDED
    assert run_chain_verify(run).ok, run_chain_verify(run).describe()
    assert Approval.objects.filter(escalation=escalation).exists()
    assert LabelledExample.objects.filter(verdict__escalation=escalation).exists()
    return run, Escalation.objects.get(pk=escalation.pk)


def _turn(run: Run, index: int) -> Turn:
    return Turn.objects.get(run=run, index=index)


def _last(run: Run) -> int:
    return Decision.objects.filter(turn__run=run).order_by("-turn__index").first().turn.index


def _cut_from(run: Run, index: int) -> None:
    """Cut the run's tail: every turn from `index` on, its decision, calls, escalations and
    what hangs on them (verdicts, approvals, examples), as if the run had stopped before."""
    turns = list(Turn.objects.filter(run=run, index__gte=index).values_list("id", flat=True))
    escalations = list(Escalation.objects.filter(turn_id__in=turns).values_list("id", flat=True))
    params = {"turns": turns, "escalations": escalations or [0]}
    _sql(
        """
        DELETE FROM escalations_labelledexample WHERE verdict_id IN (
            SELECT id FROM escalations_verdict WHERE escalation_id = ANY(%(escalations)s));
        DELETE FROM escalations_verdict WHERE escalation_id = ANY(%(escalations)s);
        UPDATE escalations_approval SET used_on_turn_id = NULL
            WHERE used_on_turn_id = ANY(%(turns)s);
        DELETE FROM escalations_approval WHERE escalation_id = ANY(%(escalations)s);
        DELETE FROM escalations_escalationevent WHERE escalation_id = ANY(%(escalations)s);
        DELETE FROM escalations_escalation WHERE id = ANY(%(escalations)s);
        DELETE FROM runs_toolcall WHERE turn_id = ANY(%(turns)s);
        DELETE FROM runs_decision WHERE turn_id = ANY(%(turns)s);
        DELETE FROM runs_turn WHERE id = ANY(%(turns)s);
        """,
        params,
    )


def _forge(run: Run) -> None:
    """Recompute every seal of the run as someone with every row but not the key would: the
    same code, the real key's id, another key."""
    real = chain.log_keys()
    forger = chain.LogKeys(real.current_id, {real.current_id: b"f" * 64})
    if _TAMPERER["who"] == "owner":
        with log_triggers_off(*LOG_TABLES):
            sealing.run_log_seal_all(run.pk, keys=forger)
        return
    try:
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute(f"SET ROLE {APP_ROLE}")
            sealing.run_log_seal_all(run.pk, keys=forger)
            with connection.cursor() as cursor:
                cursor.execute("RESET ROLE")
    except DatabaseError as refused:
        _TAMPERER["refused"].append(str(refused))


REFUND_4999 = json.dumps({"order_id": "ord_4472", "amount": 4999.0})


def _held_turn(run, escalation) -> int:
    return escalation.turn.index


# Per table: (update, delete, the turn a tail cut starts at). Each takes (run, escalation)
# and returns the turn index verify must name (None: any turn).
def _run_update(run, escalation):
    _sql("UPDATE runs_run SET goal = 'Refund ord_4472 in full' WHERE id = %s", [run.pk])
    return _last(run)


def _run_flip(run, escalation):
    _sql(
        "UPDATE runs_run SET status = 'failed', final_answer = NULL, stop_reason = 'x' "
        "WHERE id = %s",
        [run.pk],
    )
    return _last(run)


def _turn_update(run, escalation):
    held = escalation.turn
    proposal = held.proposal
    proposal["calls"][0]["arguments"]["amount"] = 4999.0
    _sql("UPDATE runs_turn SET proposal = %s WHERE id = %s", [json.dumps(proposal), held.pk])
    return held.index


def _turn_delete(run, escalation):
    middle = _turn(run, escalation.turn.index + 1)
    _sql(
        "UPDATE escalations_approval SET used_on_turn_id = NULL WHERE used_on_turn_id = %(t)s;"
        "DELETE FROM runs_toolcall WHERE turn_id = %(t)s;"
        "DELETE FROM runs_decision WHERE turn_id = %(t)s;"
        "DELETE FROM runs_turn WHERE id = %(t)s;",
        {"t": middle.pk},
    )
    return None


def _decision_update(run, escalation):
    first = _turn(run, 0)
    _sql("UPDATE runs_decision SET reasons = '[]' WHERE turn_id = %s", [first.pk])
    return 0


def _decision_delete(run, escalation):
    middle = _turn(run, escalation.turn.index + 1)
    _sql("DELETE FROM runs_decision WHERE turn_id = %s", [middle.pk])
    return None


def _call_update(run, escalation):
    held = ToolCall.objects.get(turn=escalation.turn, status=ToolCallStatus.HELD)
    _sql("UPDATE runs_toolcall SET arguments = %s WHERE id = %s", [REFUND_4999, held.pk])
    return escalation.turn.index


def _call_result_update(run, escalation):
    done = ToolCall.objects.filter(turn__run=run, status=ToolCallStatus.DONE).last()
    _sql("UPDATE runs_toolcall SET result = '{\"refunded\": 4999}' WHERE id = %s", [done.pk])
    return done.turn.index


def _call_delete(run, escalation):
    call = ToolCall.objects.filter(turn__run=run).order_by("turn__index", "position").first()
    _sql("DELETE FROM runs_toolcall WHERE id = %s", [call.pk])
    return call.turn.index


def _approval_update(run, escalation):
    approval = Approval.objects.get(escalation=escalation)
    forged = hashlib.sha256(b"another action").hexdigest()
    _sql("UPDATE escalations_approval SET action_hash = %s WHERE id = %s", [forged, approval.pk])
    return escalation.turn.index + 1


def _approval_delete(run, escalation):
    _sql("DELETE FROM escalations_approval WHERE escalation_id = %s", [escalation.pk])
    return escalation.turn.index + 1


def _verdict_update(run, escalation):
    _sql(
        "UPDATE escalations_verdict SET reason = 'approved by the CFO' WHERE escalation_id = %s",
        [escalation.pk],
    )
    return escalation.turn.index + 1


def _verdict_delete(run, escalation):
    verdict = Verdict.objects.get(escalation=escalation)
    _sql(
        "DELETE FROM escalations_labelledexample WHERE verdict_id = %(v)s;"
        "DELETE FROM escalations_verdict WHERE id = %(v)s;",
        {"v": verdict.pk},
    )
    return escalation.turn.index + 1


def _example_update(run, escalation):
    _sql(
        "UPDATE escalations_labelledexample SET label = '\"read_only\"' WHERE verdict_id IN "
        "(SELECT id FROM escalations_verdict WHERE escalation_id = %s)",
        [escalation.pk],
    )
    return escalation.turn.index + 1


def _example_delete(run, escalation):
    _sql(
        "DELETE FROM escalations_labelledexample WHERE verdict_id IN "
        "(SELECT id FROM escalations_verdict WHERE escalation_id = %s)",
        [escalation.pk],
    )
    return escalation.turn.index + 1


def _escalation_update(run, escalation):
    _sql(
        "UPDATE escalations_escalation SET summary = 'a routine read' WHERE id = %s",
        [escalation.pk],
    )
    return escalation.turn.index + 1


def _escalation_delete(run, escalation):
    verdict = Verdict.objects.get(escalation=escalation)
    _sql(
        "DELETE FROM escalations_labelledexample WHERE verdict_id = %(v)s;"
        "DELETE FROM escalations_verdict WHERE id = %(v)s;"
        "DELETE FROM escalations_approval WHERE escalation_id = %(e)s;"
        "DELETE FROM escalations_escalationevent WHERE escalation_id = %(e)s;"
        "DELETE FROM escalations_escalation WHERE id = %(e)s;",
        {"v": verdict.pk, "e": escalation.pk},
    )
    return escalation.turn.index + 1


def _tail_of_log(run, escalation):
    _cut_from(run, _last(run))
    return None


def _tail_of_last_decision_only(run, escalation):
    _sql("DELETE FROM runs_decision WHERE turn_id = %s", [_turn(run, _last(run)).pk])
    return None


def _tail_of_calls(run, escalation):
    last_with_calls = (
        ToolCall.objects.filter(turn__run=run).order_by("-turn__index").first().turn.index
    )
    _cut_from(run, last_with_calls)
    return None


def _tail_of_review(run, escalation):
    """Back to the held step, as if no reviewer had ever answered: the verdict, approvals,
    examples, the escalation and every turn after it gone."""
    _cut_from(run, escalation.turn.index)
    return None


TABLES = {
    "run": {"update": _run_update, "delete": _run_flip, "tail": _tail_of_log},
    "turn": {"update": _turn_update, "delete": _turn_delete, "tail": _tail_of_log},
    "decision": {
        "update": _decision_update,
        "delete": _decision_delete,
        "tail": _tail_of_last_decision_only,
    },
    "tool_call": {"update": _call_update, "delete": _call_delete, "tail": _tail_of_calls},
    "tool_call_result": {"update": _call_result_update},
    "approval": {"update": _approval_update, "delete": _approval_delete, "tail": _tail_of_review},
    "verdict": {"update": _verdict_update, "delete": _verdict_delete, "tail": _tail_of_review},
    "labelled_example": {
        "update": _example_update,
        "delete": _example_delete,
        "tail": _tail_of_review,
    },
    "escalation": {
        "update": _escalation_update,
        "delete": _escalation_delete,
        "tail": _tail_of_review,
    },
}
# A run's row cannot be DELETEd alone: its turns, decisions and everything else go with it
# (ON DELETE CASCADE), and a log with no run is no run's log to check; the run's "delete"
# cell flips its status instead (a succeeded run made failed, its answer gone). Recording the
# head hash outside the database (the export prints it) is what shows a whole run removed.
CELLS = [
    pytest.param(table, change, id=f"{table}-{change}")
    for table, changes in TABLES.items()
    for change in (*changes, "forged")
]


def _assert_named(run: Run, expected_turn, capsys) -> None:
    report = run_chain_verify(run)
    assert not report.ok
    assert all(turn is not None for turn, _ in report.problems), report.describe()
    if expected_turn is not None:
        assert expected_turn in [turn for turn, _ in report.problems], report.describe()
    with pytest.raises(CommandError) as failed:
        call_command("verify_log", "--all")
    assert failed.value.returncode == 2
    err = capsys.readouterr().err
    assert f"BROKEN run {run.pk} turn " in err


@pytest.fixture(params=["owner", "app_role"])
def tamperer(request):
    """Each cell twice: as the tables' owner with the triggers off (a superuser can do no
    more), and as the app's role with them on."""
    if request.param == "app_role":
        request.getfixturevalue("app_role")
    _TAMPERER.update(who=request.param, refused=[])
    yield request.param
    _TAMPERER.update(who="owner", refused=[])


@pytest.mark.parametrize(("table", "change"), CELLS)
def test_every_change_to_a_runs_story_is_refused_or_found_and_named(
    story, table, change, tamperer, capsys
):
    run, escalation = story
    other = drive(start("goal_reached"))  # another run, which must still verify
    if change == "forged":
        # Rewrite the content (the table's own UPDATE), then recompute every hash: the
        # decisions' and the run's, under the real key's id but not the key.
        TABLES[table]["update"](run, escalation)
        _forge(run)
        expected = None
    else:
        expected = TABLES[table][change](run, escalation)
    if _TAMPERER["refused"]:
        # The app's role was refused (a trigger, or a right it lacks), and the savepoint took
        # back the whole statement: whatever else it got through must still be found.
        assert tamperer == "app_role"
        report = run_chain_verify(run)
        if report.ok:
            return
    _assert_named(run, expected, capsys)
    assert run_chain_verify(other).ok


def test_a_forgery_with_the_right_content_but_no_key_fails(story):
    """Nothing changed but the seals, recomputed as the unkeyed chain was (anyone can), or
    as HMACs under a guessed key: neither verifies. Under the real key they would, which is
    why the key lives outside the database."""
    run, _ = story
    rows = list(sealing.decided_turns(run.pk))
    prev = ""
    for row in rows:
        row["prev_hash"] = prev
        prev = chain.content_hash(
            run_uid=run.uid,
            turn_index=row["turn_index"],
            policy_number=run.policy_version.number,
            fields=row,
        )
        _sql(
            "UPDATE runs_decision SET prev_hash = %s, content_hash = %s WHERE turn_id = %s",
            [row["prev_hash"], prev, row["turn_pk"]],
        )
    report = run_chain_verify(run)
    assert not report.ok
    assert {turn for turn, _ in report.problems} >= {row["turn_index"] for row in rows}

    _forge(run)  # HMACs under another key, the real key's id
    report = run_chain_verify(run)
    assert {turn for turn, text in report.problems if "content_hash does not match" in text} == {
        row["turn_index"] for row in rows
    }

    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE runs_decision DISABLE TRIGGER USER")
    sealing.run_log_seal_all(run.pk)  # the real key: the one thing a forger lacks
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE runs_decision ENABLE TRIGGER USER")
    assert run_chain_verify(run).ok


def _with_triggers_off(action) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("ALTER TABLE runs_decision DISABLE TRIGGER USER")
    action()
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE runs_decision ENABLE TRIGGER USER")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")


def test_a_seal_under_a_key_not_configured_is_named_unknown_and_a_retired_key_verifies(
    story, settings
):
    run, _ = story
    settings.GUARDIAN_LOG_KEY = "a" * 64
    _with_triggers_off(lambda: sealing.run_log_seal_all(run.pk))  # sealed under key a
    old = chain.log_keys().current_id
    assert run_chain_verify(run).ok

    settings.GUARDIAN_LOG_KEY = "b" * 64  # rotated, and the old key forgotten
    report = run_chain_verify(run)
    assert f"sealed under an unknown key {old}" in report.problem
    assert report.broken_turn == 0

    settings.GUARDIAN_LOG_OLD_KEYS = ["a" * 64]  # kept to verify what it sealed
    assert run_chain_verify(run).ok
    sealing.run_reseal(run.pk)  # new seals are made under the new key
    assert Run.objects.get(pk=run.pk).seal["key"] == chain.log_keys().current_id != old
    assert run_chain_verify(run).ok
