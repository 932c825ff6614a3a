# The admins' records move to the policies app, tables and rows unchanged (policies 0001).

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('guardian_core', '0013_guardian_model_retired'),
    ]

    operations = [
        # Only Django's idea of the models changes: the tables, their rows, constraints and
        # indexes stay where they are (the models name them with db_table).
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveField(
                    model_name='guardianmodelactivation',
                    name='activated_by',
                ),
                migrations.RemoveField(
                    model_name='guardianmodelactivation',
                    name='version',
                ),
                migrations.RemoveConstraint(
                    model_name='guardianmodeljob',
                    name='guardian_model_job_status_known',
                ),
                migrations.RemoveConstraint(
                    model_name='guardianmodeljob',
                    name='guardian_model_job_retrains_the_local_guardian_only',
                ),
                migrations.DeleteModel(
                    name='MonitoringCursor',
                ),
                migrations.DeleteModel(
                    name='MonitoringDay',
                ),
                migrations.RemoveField(
                    model_name='policyactivation',
                    name='activated_by',
                ),
                migrations.RemoveField(
                    model_name='policyactivation',
                    name='version',
                ),
                migrations.DeleteModel(
                    name='GuardianModelActivation',
                ),
                migrations.RemoveField(
                    model_name='guardianmodeljob',
                    name='created_by',
                ),
                migrations.RemoveField(
                    model_name='guardianmodeljob',
                    name='version',
                ),
                migrations.DeleteModel(
                    name='PolicyActivation',
                ),
                migrations.DeleteModel(
                    name='GuardianModelJob',
                ),
            ],
        ),
    ]
