"""The embedded SQLite database keeps the decision log final as PostgreSQL does: a fresh file
is migrated in a child process, which then tries every UPDATE and DELETE the triggers refuse,
through the ORM and in raw SQL, and purges a whole run through log_purge()."""

import json

import pytest

from tests.processes import run_manage

# Runs in `manage.py shell` against the SQLite file; prints one JSON object: what each attempt
# did ("refused" with the trigger's message, or "allowed").
PROBE = r"""
import json
from django.contrib.auth import get_user_model
from django.db import DatabaseError, connection, transaction
from escalations.models import LabelledExample, Verdict
from runs.audit import run_purge
from runs.log_triggers import log_purge
from runs.models import Decision, Run, ToolCall, Turn
from tests.factories import make_decision, make_escalation, make_tool_call, make_turn

def attempt(action):
    try:
        with transaction.atomic():
            action()
    except DatabaseError as exc:
        return "refused: " + str(exc)
    return "allowed"

def raw(sql, *params):
    def run():
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
    return run

reviewer = get_user_model().objects.create(username="probe-reviewer")
turn = make_turn()
decision = make_decision(turn=turn)
call = make_tool_call(turn=turn, status="done", result="ok")
escalation = make_escalation(turn=turn)
verdict = Verdict.objects.create(escalation=escalation, decision="approve", reviewer=reviewer)
example = LabelledExample.objects.create(
    condition="integrity", projection={"goal": "g"}, label=True, source="human",
    question_set_version="q", model_version="m", verdict=verdict,
)
lone = make_decision()  # a turn with a decision and nothing else holding it
orm = {
    "decision delete": lambda: Decision.objects.filter(pk=decision.pk).delete(),
    "turn delete": lambda: Turn.objects.filter(pk=lone.turn_id).delete(),
    "verdict outcome while empty": (
        lambda: Verdict.objects.filter(pk=verdict.pk).update(resulting_outcome="continue")
    ),
    "verdict outcome once set": (
        lambda: Verdict.objects.filter(pk=verdict.pk).update(resulting_outcome="replan")
    ),
    "done call other column": lambda: ToolCall.objects.filter(pk=call.pk).update(intent="why"),
}
sql = {
    "decision update": ("UPDATE runs_decision SET outcome = 'replan' WHERE id = %s", decision),
    "decision raw delete": ("DELETE FROM runs_decision WHERE id = %s", decision),
    "example update": (
        "UPDATE escalations_labelledexample SET label = 'false' WHERE id = %s", example
    ),
    "example delete": ("DELETE FROM escalations_labelledexample WHERE id = %s", example),
    "verdict delete": ("DELETE FROM escalations_verdict WHERE id = %s", verdict),
    "verdict reason update": (
        "UPDATE escalations_verdict SET reason = 'later' WHERE id = %s", verdict
    ),
    "done call result update": ("UPDATE runs_toolcall SET result = 'forged' WHERE id = %s", call),
}
results = {"vendor": connection.vendor}
for name, action in orm.items():
    results[name] = attempt(action)
for name, (statement, row) in sql.items():
    results[name] = attempt(raw(statement, row.pk))

def failing_purge():
    with log_purge():
        LabelledExample.objects.filter(pk=example.pk).delete()
        raise RuntimeError("the purge fails half way")

try:
    failing_purge()
except RuntimeError:
    pass
delete_decision = "DELETE FROM runs_decision WHERE id = %s"
results["example kept after a failed purge"] = LabelledExample.objects.filter(
    pk=example.pk
).exists()
results["delete after a failed purge"] = attempt(raw(delete_decision, decision.pk))
results["purge"] = run_purge(run_id=turn.run_id)
results["purged"] = not (
    Run.objects.filter(pk=turn.run_id).exists()
    or Decision.objects.filter(turn__run_id=turn.run_id).exists()
    or Verdict.objects.exists()
    or LabelledExample.objects.exists()
)
with connection.cursor() as cursor:
    cursor.execute("SELECT count(*) FROM guardian_log_purge")
    results["purge mark left"] = cursor.fetchone()[0]
results["delete after a purge"] = attempt(raw(delete_decision, lone.pk))
print("PROBE " + json.dumps(results))
"""


@pytest.fixture(scope="module")
def probed(tmp_path_factory) -> dict:
    database = tmp_path_factory.mktemp("sqlite") / "guardian.sqlite3"
    env = {"DATABASE_URL": f"sqlite:///{database}"}
    migrated = run_manage("migrate", "--no-input", timeout=300, **env)
    assert migrated.returncode == 0, migrated.stderr
    probe = run_manage("shell", "--no-imports", "-c", PROBE, timeout=120, **env)
    assert probe.returncode == 0, probe.stderr
    line = next(line for line in probe.stdout.splitlines() if line.startswith("PROBE "))
    return json.loads(line.removeprefix("PROBE "))


REFUSED = [
    "decision update",
    "decision delete",
    "decision raw delete",
    "turn delete",
    "example update",
    "example delete",
    "verdict delete",
    "verdict reason update",
    "verdict outcome once set",
    "done call result update",
    "delete after a failed purge",
    "delete after a purge",
]


@pytest.mark.parametrize("attempt", REFUSED)
def test_sqlite_refuses_changing_or_deleting_the_final_log(probed, attempt):
    assert probed["vendor"] == "sqlite"
    assert probed[attempt].startswith("refused: the decision log is append-only"), probed[attempt]


@pytest.mark.parametrize("attempt", ["verdict outcome while empty", "done call other column"])
def test_sqlite_allows_what_postgresql_allows(probed, attempt):
    assert probed[attempt] == "allowed"


def test_a_purge_on_sqlite_deletes_the_whole_run_and_leaves_no_mark(probed):
    assert probed["example kept after a failed purge"] is True
    assert probed["purge"] is True
    assert probed["purged"] is True
    assert probed["purge mark left"] == 0
