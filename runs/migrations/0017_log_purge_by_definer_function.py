# PostgreSQL: the log's purge is opened by guardian_purge_begin(reason, actor), a SECURITY
# DEFINER function of the tables' owner that records every purge in guardian_purge_log, instead
# of the custom setting `guardian.purge`, which any session could set; TRUNCATE of a decision,
# verdict or labelled example table is refused outside a purge as DELETE is
# (runs/log_triggers.py). SQLite is unchanged. Backwards puts the setting back and keeps the
# purge log (the record of what was deleted).

from django.db import migrations

from runs.log_triggers import create_pg_purge_door, drop_pg_purge_door, pg_schema

# The check of migration 0009, put back when this one is undone.
SETTING_CHECK = """
CREATE OR REPLACE FUNCTION {schema}.guardian_log_purging() RETURNS boolean AS $$
    SELECT coalesce(current_setting('guardian.purge', true), '') = 'on';
$$ LANGUAGE sql STABLE;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        create_pg_purge_door(schema_editor)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        drop_pg_purge_door(schema_editor)
        schema = pg_schema(schema_editor.connection)
        schema_editor.execute(SETTING_CHECK.replace("{schema}", schema), params=None)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0016_run_actor_newest"),
        ("escalations", "0006_guidance_constraint_messages"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
