"""Runs keep the Idempotency-Key they were started under (Run.start_key, start_digest): a
retried start finds its run again instead of making a second one."""

from django.conf import settings
from django.db import migrations, models

from runs.db_triggers import create_trigger_v4, drop_trigger


class Migration(migrations.Migration):
    dependencies = [
        ("guardian_core", "0017_shipped_default_policy_version"),
        ("runs", "0022_webhook_delivery_idle_and_given_up"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        # SQLite rebuilds runs_run for the new columns, and checks the policy trigger (which
        # reads runs_run) while it renames the rebuilt table: dropped first, made again after.
        migrations.RunPython(drop_trigger, create_trigger_v4),
        migrations.AddField(
            model_name="run",
            name="start_digest",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.AddField(
            model_name="run",
            name="start_key",
            field=models.CharField(blank=True, default="", max_length=128),
        ),
        migrations.RunPython(create_trigger_v4, drop_trigger),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.UniqueConstraint(
                condition=~models.Q(start_key=""),
                fields=("created_by", "start_key"),
                name="run_start_key_unique_per_user",
            ),
        ),
    ]
