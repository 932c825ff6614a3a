# Shadow trials move to the policies app, tables and rows unchanged (policies 0001).

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0019_run_unbilled_spend'),
    ]

    operations = [
        # Only Django's idea of the models changes: the tables, their rows, constraints and
        # indexes stay where they are (the models name them with db_table).
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveIndex(
                    model_name='shadowdecision',
                    name='shadow_decision_differs',
                ),
                migrations.RemoveConstraint(
                    model_name='shadowdecision',
                    name='shadow_decision_once',
                ),
                migrations.RemoveConstraint(
                    model_name='shadowtrial',
                    name='shadow_trial_one_candidate',
                ),
                migrations.RemoveConstraint(
                    model_name='shadowtrial',
                    name='shadow_trial_one_running_per_policy_version',
                ),
                migrations.RemoveConstraint(
                    model_name='shadowtrial',
                    name='shadow_trial_one_running_per_guardian_model_version',
                ),
                migrations.RemoveField(
                    model_name='shadowtrial',
                    name='guardian_model_version',
                ),
                migrations.RemoveField(
                    model_name='shadowtrial',
                    name='policy_version',
                ),
                migrations.RemoveField(
                    model_name='shadowtrial',
                    name='started_by',
                ),
                migrations.RemoveField(
                    model_name='shadowtrial',
                    name='stopped_by',
                ),
                migrations.DeleteModel(
                    name='ShadowDecision',
                ),
                migrations.DeleteModel(
                    name='ShadowTrial',
                ),
            ],
        ),
    ]
