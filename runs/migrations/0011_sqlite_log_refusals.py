# SQLite refuses what PostgreSQL refuses on the final log tables: a DELETE of a decision, a
# verdict or a labelled example outside log_purge(), and any change of a verdict but its
# resulting_outcome while empty (runs/log_triggers.py). The SQLite triggers are made again
# as a whole, so a database migrated before this gets them, with the verdict's columns of
# now. PostgreSQL's triggers are unchanged.

from django.db import migrations

from runs.log_triggers import create_log_triggers, drop_log_triggers


def remake_sqlite_triggers(apps, schema_editor):
    if schema_editor.connection.vendor == "sqlite":
        drop_log_triggers(apps, schema_editor)
        create_log_triggers(apps, schema_editor)


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0010_run_list_indexes"),
        ("escalations", "0005_queue_indexes"),
    ]

    operations = [
        # Backwards leaves the triggers as they are: they only refuse what the app never does.
        migrations.RunPython(remake_sqlite_triggers, migrations.RunPython.noop),
    ]
