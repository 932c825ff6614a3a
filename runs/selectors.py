"""Reads of runs that pages and the API need."""

from django.db.models import Count, QuerySet

from runs.models import Run


def run_list() -> QuerySet[Run]:
    """Every run, newest first, with its policy version and turn count in the same query."""
    return Run.objects.select_related("policy_version").annotate(turn_count=Count("turns"))


def run_get(*, run_id: int) -> Run:
    """One run with its policy version and turn count; raises Run.DoesNotExist."""
    return run_list().get(pk=run_id)
