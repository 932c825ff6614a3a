# The admins' records, which were guardian_core's and runs' models: their tables unchanged.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

MOVED = {
    "guardian_core": (
        "policyactivation",
        "guardianmodelactivation",
        "monitoringday",
        "monitoringcursor",
        "guardianmodeljob",
    ),
    "runs": ("shadowtrial", "shadowdecision"),
}


def content_types_to_policies(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for old_label, models_ in MOVED.items():
        for model in models_:
            if not ContentType.objects.filter(app_label="policies", model=model).exists():
                ContentType.objects.filter(app_label=old_label, model=model).update(
                    app_label="policies"
                )


def content_types_back(apps, schema_editor):
    ContentType = apps.get_model("contenttypes", "ContentType")
    for old_label, models_ in MOVED.items():
        ContentType.objects.filter(app_label="policies", model__in=models_).update(
            app_label=old_label
        )


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('guardian_core', '0014_admin_models_to_policies'),
        ('runs', '0020_shadow_trials_to_policies'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ('contenttypes', '0002_remove_content_type_name'),
    ]

    operations = [
        # Only Django's idea of the models changes: the tables, their rows, constraints and
        # indexes stay where they are (the models name them with db_table).
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='MonitoringCursor',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('last_decision_id', models.BigIntegerField(default=0)),
                        ('folded_at', models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        'db_table': 'guardian_core_monitoringcursor',
                    },
                ),
                migrations.CreateModel(
                    name='MonitoringDay',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('day', models.DateField(unique=True)),
                        ('first_at', models.DateTimeField(blank=True, null=True)),
                        ('decisions', models.PositiveIntegerField(default=0)),
                        ('escalations', models.PositiveIntegerField(default=0)),
                        ('counts', models.JSONField(default=dict)),
                        ('fine', models.JSONField(default=dict)),
                    ],
                    options={
                        'db_table': 'guardian_core_monitoringday',
                        'ordering': ['day'],
                    },
                ),
                migrations.CreateModel(
                    name='GuardianModelActivation',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('comment', models.TextField(blank=True)),
                        ('gate_report', models.JSONField(blank=True, default=dict)),
                        ('override_reason', models.TextField(blank=True)),
                        ('retired', models.BooleanField(default=False)),
                        ('activated_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('version', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='activations', to='guardian_core.guardianmodelversion')),
                    ],
                    options={
                        'db_table': 'guardian_core_guardianmodelactivation',
                        'ordering': ['-created_at', '-pk'],
                    },
                ),
                migrations.CreateModel(
                    name='PolicyActivation',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('comment', models.TextField()),
                        ('gate_report', models.JSONField(blank=True, default=dict)),
                        ('override_reason', models.TextField(blank=True)),
                        ('activated_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('version', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='activations', to='guardian_core.policyversion')),
                    ],
                    options={
                        'db_table': 'guardian_core_policyactivation',
                        'ordering': ['-created_at', '-pk'],
                    },
                ),
                migrations.CreateModel(
                    name='ShadowTrial',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('comment', models.TextField()),
                        ('started_at', models.DateTimeField(auto_now_add=True)),
                        ('stopped_at', models.DateTimeField(blank=True, null=True)),
                        ('stop_note', models.TextField(blank=True)),
                        ('after_decision_id', models.BigIntegerField()),
                        ('cursor', models.BigIntegerField()),
                        ('caught_up_at', models.DateTimeField(blank=True, null=True)),
                        ('skipped', models.PositiveIntegerField(default=0)),
                        ('guardian_model_version', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='shadow_trials', to='guardian_core.guardianmodelversion')),
                        ('policy_version', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='shadow_trials', to='guardian_core.policyversion')),
                        ('started_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('stopped_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ],
                    options={
                        'db_table': 'runs_shadowtrial',
                        'ordering': ['-started_at', '-pk'],
                    },
                ),
                migrations.CreateModel(
                    name='ShadowDecision',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('turn_index', models.PositiveIntegerField()),
                        ('real_outcome', models.CharField(choices=[('continue', 'Continue'), ('replan', 'Replan'), ('escalate', 'Escalate'), ('stop_success', 'Stop with success'), ('stop_failure', 'Stop with failure')], max_length=20)),
                        ('real_stop_reason', models.CharField(blank=True, max_length=60)),
                        ('outcome', models.CharField(choices=[('continue', 'Continue'), ('replan', 'Replan'), ('escalate', 'Escalate'), ('stop_success', 'Stop with success'), ('stop_failure', 'Stop with failure')], max_length=20)),
                        ('stop_reason', models.CharField(blank=True, max_length=60)),
                        ('fired', models.JSONField(blank=True, default=list)),
                        ('reasons', models.JSONField(blank=True, default=list)),
                        ('answers', models.JSONField(blank=True, default=dict)),
                        ('differs', models.BooleanField()),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('decision', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='runs.decision')),
                        ('run', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='runs.run')),
                        ('trial', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='decisions', to='policies.shadowtrial')),
                    ],
                    options={
                        'db_table': 'runs_shadowdecision',
                        'ordering': ['pk'],
                    },
                ),
                migrations.CreateModel(
                    name='GuardianModelJob',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('kind', models.CharField(choices=[('recalibrate', "Recalibrate (a map over an adapter's answers)"), ('retrain', 'Retrain the local guardian')], max_length=20)),
                        ('adapter', models.CharField(choices=[('local', 'Local (in process)'), ('http', 'Vendor HTTP endpoint'), ('openai', 'OpenAI-compatible server')], max_length=20)),
                        ('conditions', models.JSONField(blank=True, default=list)),
                        ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed')], default='queued', max_length=20)),
                        ('error', models.TextField(blank=True)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('started_at', models.DateTimeField(blank=True, null=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('version', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='guardian_core.guardianmodelversion')),
                    ],
                    options={
                        'db_table': 'guardian_core_guardianmodeljob',
                        'ordering': ['-created_at', '-pk'],
                        'constraints': [models.CheckConstraint(condition=models.Q(('status__in', ['queued', 'running', 'done', 'failed'])), name='guardian_model_job_status_known'), models.CheckConstraint(condition=models.Q(models.Q(('kind', 'retrain'), _negated=True), ('adapter', 'local'), _connector='OR'), name='guardian_model_job_retrains_the_local_guardian_only')],
                    },
                ),
                migrations.AddConstraint(
                    model_name='shadowtrial',
                    constraint=models.CheckConstraint(condition=models.Q(('policy_version__isnull', True), ('guardian_model_version__isnull', True), _connector='XOR'), name='shadow_trial_one_candidate'),
                ),
                migrations.AddConstraint(
                    model_name='shadowtrial',
                    constraint=models.UniqueConstraint(condition=models.Q(('policy_version__isnull', False), ('stopped_at__isnull', True)), fields=('policy_version',), name='shadow_trial_one_running_per_policy_version'),
                ),
                migrations.AddConstraint(
                    model_name='shadowtrial',
                    constraint=models.UniqueConstraint(condition=models.Q(('guardian_model_version__isnull', False), ('stopped_at__isnull', True)), fields=('guardian_model_version',), name='shadow_trial_one_running_per_guardian_model_version'),
                ),
                migrations.AddIndex(
                    model_name='shadowdecision',
                    index=models.Index(fields=['trial', 'differs', 'id'], name='shadow_decision_differs'),
                ),
                migrations.AddConstraint(
                    model_name='shadowdecision',
                    constraint=models.UniqueConstraint(fields=('trial', 'decision'), name='shadow_decision_once'),
                ),
            ],
        ),
        # Permissions and admin history hang on content types: the moved models keep theirs,
        # relabelled, rather than getting new ones.
        migrations.RunPython(content_types_to_policies, content_types_back, elidable=False),
    ]
