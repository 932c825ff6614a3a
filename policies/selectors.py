"""Reads the admins' pages need: policy versions with their run counts."""

from django.db.models import Count, QuerySet

from guardian_core.models import PolicyVersion


def policy_version_list() -> QuerySet[PolicyVersion]:
    """Every policy version, newest first, with how many runs pinned it."""
    return PolicyVersion.objects.annotate(run_count=Count("runs")).order_by("-number")
