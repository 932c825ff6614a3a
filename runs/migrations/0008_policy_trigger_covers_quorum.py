# The trigger again, now refusing a change of the quorum of a used version too.

from django.db import migrations

from runs.db_triggers import create_trigger, drop_trigger


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0007_drop_policy_trigger_for_quorum"),
        ("guardian_core", "0002_policy_version_quorum"),
    ]

    operations = [migrations.RunPython(create_trigger, drop_trigger)]
