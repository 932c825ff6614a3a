# The decision log sealed under a key the database does not hold (runs/chain.py): a run seal
# over what comes after its last decision, the key's id on each decision, and the decisions
# already written re-sealed under the key with the story they rest on. A run whose unkeyed
# chain no longer holds is left as it is (verify_log goes on naming it): a key is never put
# on a log that was already altered.
#
# The re-seal rewrites decisions, which the log's triggers refuse: they are dropped for this
# migration's transaction and made again at its end (SQLite also rebuilds runs_decision and
# runs_run for the new columns, which drops their triggers; the policy trigger reads
# runs_run). Backwards, the columns go and the old hashes are not restored: verify then
# reports every re-sealed decision, which is the truth about a log whose seals were removed.

from django.db import migrations, models

from runs.db_triggers import create_trigger_v4, drop_trigger
from runs.log_triggers import create_log_triggers, drop_log_triggers


def reseal_existing(apps, schema_editor):
    from runs.sealing import LogModels, run_log_reseal

    log_models = LogModels.of(apps)
    for run_id in log_models.Run.objects.order_by("id").values_list("id", flat=True).iterator():
        run_log_reseal(run_id, log_models)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0017_log_purge_by_definer_function"),
        ("escalations", "0006_guidance_constraint_messages"),
        ("guardian_core", "0013_guardian_model_retired"),
    ]

    operations = [
        migrations.RunPython(drop_trigger, create_trigger_v4),
        migrations.RunPython(drop_log_triggers, create_log_triggers),
        migrations.AddField(
            model_name="run",
            name="seal",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.AddField(
            model_name="decision",
            name="seal_key",
            field=models.CharField(blank=True, default="", max_length=16),
        ),
        migrations.RunPython(reseal_existing, migrations.RunPython.noop),
        migrations.RunPython(create_log_triggers, drop_log_triggers),
        migrations.RunPython(create_trigger_v4, drop_trigger),
    ]
