# How each labelled example was selected (escalated, audit sample, imported, near-miss), and
# audit samples: escalations of a kind that holds nothing, so the one-open-escalation-per-run
# rule leaves them out and a turn is drawn at most once.
#
# The backfill writes labelled examples, which the log's triggers keep unchanged: they are
# dropped for this migration's transaction and made again at its end, as runs 0018 does
# (SQLite also rebuilds the table for the new column, which drops its triggers). An imported
# example (source import) keeps the column's default, `imported`; one a verdict or the judge
# made is `escalated`: no audit sample existed before this migration.

from django.db import migrations, models

from runs.log_triggers import create_log_triggers, drop_log_triggers


def backfill_selection(apps, schema_editor):
    LabelledExample = apps.get_model("escalations", "LabelledExample")
    LabelledExample.objects.filter(source__in=("human", "judge")).update(selection="escalated")


class Migration(migrations.Migration):
    dependencies = [
        ("escalations", "0006_guidance_constraint_messages"),
        # The log's triggers are the runs app's: made by then, so they are dropped and made
        # again whole here.
        ("runs", "0020_shadow_trials_to_policies"),
    ]

    operations = [
        migrations.RunPython(drop_log_triggers, create_log_triggers),
        migrations.AddField(
            model_name="labelledexample",
            name="selection",
            field=models.CharField(
                choices=[
                    ("escalated", "Escalated (a verdict on what the policy raised)"),
                    ("audit_sample", "Audit sample (a random turn that went on)"),
                    ("imported", "Imported"),
                    ("near_miss", "Near-miss over-sampling"),
                ],
                default="imported",
                max_length=20,
            ),
        ),
        migrations.RunPython(backfill_selection, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="labelledexample",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    ("selection__in", ["escalated", "audit_sample", "imported", "near_miss"])
                ),
                name="labelled_example_selection_known",
            ),
        ),
        migrations.AddIndex(
            model_name="labelledexample",
            index=models.Index(fields=["selection", "condition"], name="example_selection"),
        ),
        migrations.RunPython(create_log_triggers, drop_log_triggers),
        migrations.AlterField(
            model_name="escalation",
            name="kind",
            field=models.CharField(
                choices=[
                    ("gated_step", "Irreversible or regulated step"),
                    ("uncertain", "Uncertain guardian answer"),
                    ("guardian_failure", "Guardian failure"),
                    ("integrity", "Injected instructions"),
                    ("review_loop", "Coder/reviewer loop"),
                    ("ambiguous_call", "Ambiguous tool call"),
                    ("audit_sample", "Audit sample"),
                ],
                max_length=20,
            ),
        ),
        migrations.RemoveConstraint(
            model_name="escalation",
            name="one_open_escalation_per_run",
        ),
        migrations.AddConstraint(
            model_name="escalation",
            constraint=models.UniqueConstraint(
                condition=models.Q(
                    ("status", "open"), models.Q(("kind", "audit_sample"), _negated=True)
                ),
                fields=("run",),
                name="one_open_escalation_per_run",
            ),
        ),
        migrations.AddConstraint(
            model_name="escalation",
            constraint=models.UniqueConstraint(
                condition=models.Q(("kind", "audit_sample")),
                fields=("turn",),
                name="one_audit_sample_per_turn",
            ),
        ),
    ]
