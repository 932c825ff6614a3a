# The policy version gains its limits (hysteresis, replans, repeat limit). As in 0005, the
# trigger that freezes a used version is dropped first and created again over the new column:
# a decision is replayed against the limits it was taken with. Existing rows get {}: every
# limit keeps the default it had in code, so old runs replay identically.

from django.db import migrations, models

from runs.db_triggers import create_trigger_v3, create_trigger_v4, drop_trigger


class Migration(migrations.Migration):
    dependencies = [
        ("guardian_core", "0005_policy_judge"),
    ]

    operations = [
        migrations.RunPython(drop_trigger, create_trigger_v3),
        migrations.AddField(
            model_name="policyversion",
            name="limits",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text=(
                    "hysteresis_window, hysteresis_required, max_replans, repeat_limit; "
                    "a key left out keeps its default."
                ),
            ),
        ),
        migrations.RunPython(create_trigger_v4, drop_trigger),
    ]
