# A policy version records the version it was copied from, and its limits' help names the run
# caps and the escalation deadline (keys of the same JSON column: no data changes). As in
# 0005, the trigger that freezes a used version is dropped first (on SQLite adding a column
# rebuilds the table, which the trigger would refuse) and created again over the same columns:
# where a version came from is not what its decisions are replayed against.

import django.db.models.deletion
from django.db import migrations, models

from runs.db_triggers import create_trigger_v4, drop_trigger


class Migration(migrations.Migration):
    dependencies = [
        ("guardian_core", "0008_guardian_model_activation"),
    ]

    operations = [
        migrations.RunPython(drop_trigger, create_trigger_v4),
        migrations.AddField(
            model_name="policyversion",
            name="copied_from",
            field=models.ForeignKey(
                blank=True,
                help_text="The version this one was copied from and edited.",
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="copies",
                to="guardian_core.policyversion",
            ),
        ),
        migrations.AlterField(
            model_name="policyversion",
            name="limits",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text=(
                    "hysteresis_window, hysteresis_required, max_replans, repeat_limit, "
                    "max_turns, max_tokens, max_cost, max_wall_seconds, escalation_hours; a key "
                    "left out keeps its default."
                ),
            ),
        ),
        migrations.RunPython(create_trigger_v4, drop_trigger),
    ]
