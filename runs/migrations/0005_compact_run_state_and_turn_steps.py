"""The loop state stops being stored whole on every turn: the run keeps its current compact
state and each agent-loop turn records its steps. Existing turns are converted: each snapshot
becomes one step (what changed from the turn before), marked "migrated" because its stored
hash was made under the old scheme; the chain of new turns continues from that hash."""

from django.db import migrations, models

from runs.db_triggers import create_trigger_v1 as create_trigger, drop_trigger

WINDOW = 8  # guardian_core.engine.state.HISTORY_WINDOW when this migration was written


def _step(before: dict, after: dict) -> dict:
    old = len(before.get("history", []))
    return {
        "add_history": [[h["turn"], h["summary"]] for h in after.get("history", [])[old:]],
        "last_results": list(after.get("last_results", [])),
        "pending": list(after.get("pending", [])),
        "replanned": after.get("replans", 0) > before.get("replans", 0),
        "migrated": True,
    }


def _compact(snapshot: dict, state_hash: str) -> dict:
    history = snapshot.get("history", [])
    return {
        **snapshot,
        "history": history[-WINDOW:],
        "history_dropped": max(0, len(history) - WINDOW),
        "hash": state_hash,
    }


def forward(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    Turn = apps.get_model("runs", "Turn")
    for run in Run.objects.exclude(actor="coder_reviewer").only("id", "goal").iterator():
        before = {"history": [], "replans": 0}
        last = None
        for turn in Turn.objects.filter(run_id=run.pk).order_by("index").iterator():
            if not turn.state:  # a turn that never finished: nothing was stored
                continue
            turn.steps = [_step(before, turn.state)]
            before, last = turn.state, (turn.state, turn.state_hash)
            turn.state = {}
            turn.save(update_fields=["steps", "state"])
        if last is not None:
            Run.objects.filter(pk=run.pk).update(state=_compact(*last))


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0004_turn_risk_projections"),
    ]

    operations = [
        # SQLite rebuilds runs_run below; the trigger that reads it must be out of the way.
        migrations.RunPython(drop_trigger, create_trigger),
        migrations.AddField(
            model_name="run",
            name="state",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="turn",
            name="steps",
            field=models.JSONField(blank=True, default=list),
        ),
        migrations.AlterField(
            model_name="turn",
            name="state",
            field=models.JSONField(blank=True, default=dict),
        ),
        # Not reversible: the snapshots are gone once converted.
        migrations.RunPython(forward, migrations.RunPython.noop, elidable=True),
        migrations.RunPython(create_trigger, drop_trigger),
    ]
