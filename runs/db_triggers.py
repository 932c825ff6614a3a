"""The database trigger that refuses to change a policy version once a run has pinned it.

It lives in the runs app because "used" means "a row in runs_run points at it". On SQLite a
migration that rebuilds runs_run or guardian_core_policyversion (most ALTERs do) must drop the
trigger first and create it again after (see runs/migrations/0003): SQLite checks triggers
while it renames the rebuilt table. tests/test_models.py fails if the trigger is missing.
"""

FROZEN_MESSAGE = "policy version is used by a run and cannot change"

# The content a run's decisions are replayed against. Migrations before 0007 created the
# trigger over the first four columns (the quorum did not exist yet): they call the _v1 pair.
FROZEN_COLUMNS_V1 = ("number", "thresholds", "question_set", "question_set_version")
FROZEN_COLUMNS = (*FROZEN_COLUMNS_V1, "quorum")
# From guardian_core 0005_policy_judge on, the judge settings too: a judged decision is
# replayed against them.
FROZEN_COLUMNS_V3 = (*FROZEN_COLUMNS, "judge")
# From guardian_core 0006_policy_limits on, the limits (hysteresis, replans, repeat limit).
FROZEN_COLUMNS_V4 = (*FROZEN_COLUMNS_V3, "limits")


def _postgres_create(columns) -> str:
    changed = "\n        OR ".join(f"NEW.{c} IS DISTINCT FROM OLD.{c}" for c in columns)
    return f"""
CREATE OR REPLACE FUNCTION guardian_policy_version_frozen() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM runs_run WHERE policy_version_id = OLD.id) AND (
        {changed}
    ) THEN
        RAISE EXCEPTION '{FROZEN_MESSAGE} (id %)', OLD.id
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER guardian_policy_version_frozen
    BEFORE UPDATE ON guardian_core_policyversion
    FOR EACH ROW EXECUTE FUNCTION guardian_policy_version_frozen();
"""


def _sqlite_create(columns) -> str:
    changed = "\n    OR ".join(f"NEW.{c} IS NOT OLD.{c}" for c in columns)
    return f"""
CREATE TRIGGER guardian_policy_version_frozen
BEFORE UPDATE ON guardian_core_policyversion
FOR EACH ROW WHEN EXISTS (SELECT 1 FROM runs_run WHERE policy_version_id = OLD.id) AND (
    {changed}
)
BEGIN
    SELECT RAISE(ABORT, '{FROZEN_MESSAGE}');
END;
"""


POSTGRES_DROP = """
DROP TRIGGER IF EXISTS guardian_policy_version_frozen ON guardian_core_policyversion;
DROP FUNCTION IF EXISTS guardian_policy_version_frozen();
"""
SQLITE_DROP = "DROP TRIGGER IF EXISTS guardian_policy_version_frozen;"


def _create(schema_editor, columns) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(_postgres_create(columns), params=None)
    elif vendor == "sqlite":
        schema_editor.execute(_sqlite_create(columns), params=None)
    else:
        raise NotImplementedError(f"no policy version trigger for {vendor}")


def create_trigger_v1(apps, schema_editor):
    _create(schema_editor, FROZEN_COLUMNS_V1)


def create_trigger(apps, schema_editor):
    _create(schema_editor, FROZEN_COLUMNS)


def create_trigger_v3(apps, schema_editor):
    _create(schema_editor, FROZEN_COLUMNS_V3)


def create_trigger_v4(apps, schema_editor):
    _create(schema_editor, FROZEN_COLUMNS_V4)


def drop_trigger(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    schema_editor.execute(POSTGRES_DROP if vendor == "postgresql" else SQLITE_DROP, params=None)
