# The policy version gains its judge settings. The trigger that freezes a used version is
# dropped first (on SQLite adding the column rebuilds the table, which the trigger would
# refuse) and created again over the new column too: a judged decision is replayed against
# the judge settings it was taken with.

from django.db import migrations, models

from runs.db_triggers import create_trigger, create_trigger_v3, drop_trigger


class Migration(migrations.Migration):
    dependencies = [
        ("guardian_core", "0004_guardian_model_versions"),
        ("runs", "0011_sqlite_log_refusals"),
    ]

    operations = [
        migrations.RunPython(drop_trigger, create_trigger),
        migrations.AddField(
            model_name="policyversion",
            name="judge",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text=(
                    "The second-tier judge on the uncertain band: adapter, model, the "
                    "conditions it may settle, timeout_seconds. Empty: no judge."
                ),
            ),
        ),
        migrations.RunPython(create_trigger_v3, drop_trigger),
    ]
