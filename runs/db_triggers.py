"""The database trigger that refuses to change a policy version once a run has pinned it.

It lives in the runs app because "used" means "a row in runs_run points at it". On SQLite a
migration that rebuilds runs_run or guardian_core_policyversion (most ALTERs do) must drop the
trigger first and create it again after (see runs/migrations/0003): SQLite checks triggers
while it renames the rebuilt table. tests/test_models.py fails if the trigger is missing.
"""

FROZEN_MESSAGE = "policy version is used by a run and cannot change"

POSTGRES_CREATE = f"""
CREATE OR REPLACE FUNCTION guardian_policy_version_frozen() RETURNS trigger AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM runs_run WHERE policy_version_id = OLD.id) AND (
        NEW.number IS DISTINCT FROM OLD.number
        OR NEW.thresholds IS DISTINCT FROM OLD.thresholds
        OR NEW.question_set IS DISTINCT FROM OLD.question_set
        OR NEW.question_set_version IS DISTINCT FROM OLD.question_set_version
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
POSTGRES_DROP = """
DROP TRIGGER IF EXISTS guardian_policy_version_frozen ON guardian_core_policyversion;
DROP FUNCTION IF EXISTS guardian_policy_version_frozen();
"""

SQLITE_CREATE = f"""
CREATE TRIGGER guardian_policy_version_frozen
BEFORE UPDATE ON guardian_core_policyversion
FOR EACH ROW WHEN EXISTS (SELECT 1 FROM runs_run WHERE policy_version_id = OLD.id) AND (
    NEW.number IS NOT OLD.number
    OR NEW.thresholds IS NOT OLD.thresholds
    OR NEW.question_set IS NOT OLD.question_set
    OR NEW.question_set_version IS NOT OLD.question_set_version
)
BEGIN
    SELECT RAISE(ABORT, '{FROZEN_MESSAGE}');
END;
"""
SQLITE_DROP = "DROP TRIGGER IF EXISTS guardian_policy_version_frozen;"


def create_trigger(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_CREATE, params=None)
    elif vendor == "sqlite":
        schema_editor.execute(SQLITE_CREATE, params=None)
    else:
        raise NotImplementedError(f"no policy version trigger for {vendor}")


def drop_trigger(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    schema_editor.execute(POSTGRES_DROP if vendor == "postgresql" else SQLITE_DROP, params=None)
