"""Runs keep what failed model calls were billed until a turn counts it (Run.unbilled)."""

from django.db import migrations, models

from runs.db_triggers import create_trigger_v4, drop_trigger


class Migration(migrations.Migration):

    dependencies = [
        ("runs", "0018_keyed_log_chain"),
        ("guardian_core", "0006_policy_limits"),
    ]

    operations = [
        # SQLite rebuilds runs_run for the new column, and checks the policy trigger (which
        # reads runs_run) while it renames the rebuilt table: dropped first, made again after.
        migrations.RunPython(drop_trigger, create_trigger_v4),
        migrations.AddField(
            model_name="run",
            name="unbilled",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(create_trigger_v4, drop_trigger),
    ]
