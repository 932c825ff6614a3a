"""App config for the admins' room: policy versions' editor and gates, evaluation, monitoring,
guardian model versions and jobs, shadow trials."""

from django.apps import AppConfig


class PoliciesConfig(AppConfig):
    name = "policies"
    verbose_name = "Policies and guardian models"
