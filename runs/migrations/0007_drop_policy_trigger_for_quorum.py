# The policy version gains a quorum column (guardian_core 0002); on SQLite adding it rebuilds
# the table, which the trigger would refuse, so it is dropped here and created again, over the
# new column too, in 0008.

from django.db import migrations

from runs.db_triggers import create_trigger_v1, drop_trigger


class Migration(migrations.Migration):
    dependencies = [("runs", "0006_run_index_on_status_only")]

    operations = [migrations.RunPython(drop_trigger, create_trigger_v1)]
