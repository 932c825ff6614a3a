"""The admins' records moved from guardian_core and runs into the policies app (issue 23): a
database written under the schema before the move keeps every row, and the moved models read
them, with the permissions people held on them.

The database is taken back to the migrations of the commit before the move, filled through
that schema's own models (the historical ones Django rebuilds from the migrations), then
migrated forward to today's.
"""

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.utils import timezone

from policies.models import (
    GuardianModelActivation,
    GuardianModelJob,
    MonitoringCursor,
    MonitoringDay,
    PolicyActivation,
    ShadowDecision,
    ShadowTrial,
)
from tests.factories import make_decision, make_guardian_model_version, make_policy_version

# The last migration of each app at the commit before the move.
BEFORE_THE_MOVE = [
    ("guardian_core", "0013_guardian_model_retired"),
    ("runs", "0019_run_unbilled_spend"),
    ("escalations", "0006_guidance_constraint_messages"),
]


def _migrate(targets) -> MigrationExecutor:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor


def _latest() -> list[tuple[str, str]]:
    executor = MigrationExecutor(connection)
    return executor.loader.graph.leaf_nodes()


@pytest.mark.django_db(transaction=True)
def test_rows_written_before_the_move_are_read_by_the_policies_models():
    # Rows of the tables that stay (a policy version, a guardian model version, a logged
    # decision) are written now; the schema's history does not touch them either way.
    version = make_policy_version(number=41)
    model_version = make_guardian_model_version(number=7)
    decision = make_decision()
    person = get_user_model().objects.create_user("old-admin", password="x")

    executor = _migrate(BEFORE_THE_MOVE)
    old = executor.loader.project_state(BEFORE_THE_MOVE).apps
    assert not any(m._meta.app_label == "policies" for m in old.get_models())
    now = timezone.now()
    old.get_model("guardian_core", "PolicyActivation").objects.create(
        version_id=version.pk, comment="first rollout", gate_report={"ok": True}
    )
    old.get_model("guardian_core", "GuardianModelActivation").objects.create(
        version_id=model_version.pk, comment="calibrated", retired=True
    )
    old.get_model("guardian_core", "MonitoringDay").objects.create(
        day=now.date(), decisions=12, escalations=3, counts={"integrity": [1, 2]}
    )
    old.get_model("guardian_core", "MonitoringCursor").objects.create(
        pk=1, last_decision_id=decision.pk
    )
    old.get_model("guardian_core", "GuardianModelJob").objects.create(
        kind="retrain", adapter="local", status="done", version_id=model_version.pk
    )
    trial = old.get_model("runs", "ShadowTrial").objects.create(
        policy_version_id=version.pk, comment="try 41", after_decision_id=0, cursor=decision.pk
    )
    old.get_model("runs", "ShadowDecision").objects.create(
        trial=trial,
        decision_id=decision.pk,
        run_id=decision.turn.run_id,
        turn_index=decision.turn.index,
        real_outcome="continue",
        outcome="escalate",
        differs=True,
    )
    # A person held a permission on a moved model under its old app label (contenttypes and
    # auth are Django's own apps, untouched by the move: their models are today's).
    job_type, _ = ContentType.objects.get_or_create(
        app_label="guardian_core", model="guardianmodeljob"
    )
    permission, _ = Permission.objects.get_or_create(
        content_type=job_type, codename="view_guardianmodeljob", defaults={"name": "view"}
    )
    person.user_permissions.add(permission)

    _migrate(_latest())

    assert PolicyActivation.objects.get().comment == "first rollout"
    assert PolicyActivation.objects.get().version_id == version.pk
    assert GuardianModelActivation.objects.get().retired is True
    assert MonitoringDay.objects.get().counts == {"integrity": [1, 2]}
    assert MonitoringCursor.objects.get(pk=1).last_decision_id == decision.pk
    assert GuardianModelJob.objects.get().version_id == model_version.pk
    moved_trial = ShadowTrial.objects.get()
    assert moved_trial.policy_version_id == version.pk
    assert moved_trial.decisions.get().decision_id == decision.pk
    assert ShadowDecision.objects.get().differs is True
    # The permission followed its model to the new app label.
    person = get_user_model().objects.get(pk=person.pk)
    assert person.has_perm("policies.view_guardianmodeljob")
    assert not person.has_perm("guardian_core.view_guardianmodeljob")
