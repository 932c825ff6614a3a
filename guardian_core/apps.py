"""App config of the project package: loads the Celery app and keeps the role groups in sync."""

from django.apps import AppConfig
from django.db.models.signals import post_migrate


class GuardianCoreConfig(AppConfig):
    name = "guardian_core"
    verbose_name = "Guardian"

    def ready(self) -> None:
        # Loaded here rather than in __init__.py so that guardian_core.engine stays free of
        # Celery and Django; shared tasks then bind to this app.
        from guardian_core import (
            celery,  # noqa: F401
            preferences,  # noqa: F401 (reads preferences at sign-in)
        )
        from guardian_core.roles import sync_role_groups_after_migrate

        # Django creates permissions in post_migrate; the role groups need them, so they are
        # brought in line right after, on every migrate.
        post_migrate.connect(sync_role_groups_after_migrate, dispatch_uid="guardian_roles")
