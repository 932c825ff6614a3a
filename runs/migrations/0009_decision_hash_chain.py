# The decision log made tamper-evident: a stable run uid, each decision's hash chained to the
# one before it (computed here for the decisions already written), and the triggers that keep
# the log append-only.

import uuid

from django.db import migrations, models

from runs.chain import HASHED_FIELDS, content_hash
from runs.db_triggers import create_trigger, drop_trigger
from runs.log_triggers import create_log_triggers, drop_log_triggers


def chain_existing(apps, schema_editor):
    """Give every run a uid and chain its decisions in turn order."""
    Run = apps.get_model("runs", "Run")
    Decision = apps.get_model("runs", "Decision")
    PolicyVersion = apps.get_model("guardian_core", "PolicyVersion")
    numbers = dict(PolicyVersion.objects.values_list("id", "number"))
    for run in Run.objects.filter(uid__isnull=True).only("id").iterator():
        Run.objects.filter(pk=run.pk).update(uid=uuid.uuid4())
    for run in Run.objects.only("id", "uid").iterator():
        prev = ""
        decisions = Decision.objects.filter(turn__run_id=run.pk).order_by("turn__index")
        for decision in decisions.select_related("turn"):
            fields = {name: getattr(decision, name) for name in HASHED_FIELDS}
            fields["prev_hash"] = prev
            digest = content_hash(
                run_uid=run.uid,
                turn_index=decision.turn.index,
                policy_number=numbers[decision.policy_version_id],
                fields=fields,
            )
            Decision.objects.filter(pk=decision.pk).update(prev_hash=prev, content_hash=digest)
            prev = digest


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0008_policy_trigger_covers_quorum"),
        ("escalations", "0005_queue_indexes"),
    ]

    operations = [
        # SQLite rebuilds runs_run below; the policy trigger that reads it must be out of the way.
        migrations.RunPython(drop_trigger, create_trigger),
        migrations.AddField(
            model_name="run",
            name="uid",
            field=models.UUIDField(null=True, editable=False),
        ),
        migrations.AddField(
            model_name="decision",
            name="prev_hash",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="decision",
            name="content_hash",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.RunPython(chain_existing, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="run",
            name="uid",
            field=models.UUIDField(default=uuid.uuid4, editable=False, unique=True),
        ),
        migrations.RunPython(create_trigger, drop_trigger),
        migrations.RunPython(create_log_triggers, drop_log_triggers),
    ]
