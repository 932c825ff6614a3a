"""App config for escalations: escalations, verdicts and labelled examples."""

from django.apps import AppConfig


class EscalationsConfig(AppConfig):
    name = "escalations"
