"""App config for escalations: escalations, verdicts and labelled examples."""

from django.apps import AppConfig


class EscalationsConfig(AppConfig):
    name = "escalations"

    def ready(self) -> None:
        from django.contrib.auth.signals import user_logged_out

        from escalations.signals import release_claims_on_logout

        user_logged_out.connect(release_claims_on_logout, dispatch_uid="escalations.logout")
