"""Freeze a policy version once a run has pinned it (the trigger is in runs/db_triggers.py)."""

from django.db import migrations

from runs.db_triggers import create_trigger_v1 as create_trigger, drop_trigger


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0001_initial"),
        ("guardian_core", "0001_initial"),
    ]

    operations = [migrations.RunPython(create_trigger, drop_trigger)]
