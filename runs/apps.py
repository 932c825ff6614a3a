"""App config for runs: runs, turns, decisions and tool calls; the app's database role."""

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class RunsConfig(AppConfig):
    name = "runs"

    def ready(self) -> None:
        from runs.db_roles import grant_app_role_after_migrate

        # Every migrate ends by granting the app's role (GUARDIAN_DB_APP_ROLE) its rights on
        # the tables as they now are: runs/db_roles.py.
        post_migrate.connect(grant_app_role_after_migrate, dispatch_uid="guardian_app_role")

        # A log key that cannot seal (too short outside DEBUG) stops every process at start,
        # not at its first turn.
        from runs.chain import check_log_key

        check_log_key()

        # A web or worker process loads the guardian's model before its first step, not in
        # it (runs/warm.py; sent by guardian_core/gunicorn_conf.py and guardian_core/celery.py).
        from guardian_core.warming import serving_process_started
        from runs.warm import process_warm

        serving_process_started.connect(process_warm, dispatch_uid="guardian_process_warm")
