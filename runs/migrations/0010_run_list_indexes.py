# The auditors' runs list: newest first by keyset (run_newest), and the goal search, which on
# PostgreSQL a trigram index answers (Django's icontains there is UPPER(goal::text) LIKE ...,
# so the index is on that expression). SQLite has no trigram index: there the search scans.

from django.db import migrations, models

TRIGRAM_INDEX = "run_goal_trigram"


def create_trigram_index(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    # pg_trgm is a trusted extension (PostgreSQL 13+): the database's owner may create it.
    schema_editor.execute("CREATE EXTENSION IF NOT EXISTS pg_trgm")
    schema_editor.execute(
        f"CREATE INDEX IF NOT EXISTS {TRIGRAM_INDEX} ON runs_run "
        "USING gin (UPPER(goal::text) gin_trgm_ops)"
    )


def drop_trigram_index(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f"DROP INDEX IF EXISTS {TRIGRAM_INDEX}")


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0009_decision_hash_chain"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(fields=["created_at", "id"], name="run_newest"),
        ),
        migrations.RunPython(create_trigram_index, drop_trigram_index),
    ]
