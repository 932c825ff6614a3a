"""Reads of runs that pages, the API and commands need."""

from django.db.models import Count, QuerySet

from runs.models import Run, Turn


def run_list() -> QuerySet[Run]:
    """Every run, newest first, with its policy version and turn count in the same query."""
    return Run.objects.select_related("policy_version").annotate(turn_count=Count("turns"))


def run_get(*, run_id: int) -> Run:
    """One run with its policy version and turn count; raises Run.DoesNotExist."""
    return run_list().get(pk=run_id)


def run_turns_decided(*, run_id: int, after_index: int = -1) -> QuerySet[Turn]:
    """The run's turns that have a decision, oldest first, after `after_index`."""
    return (
        Turn.objects.filter(run_id=run_id, index__gt=after_index, decision__isnull=False)
        .select_related("decision")
        .prefetch_related("tool_calls")
        .order_by("index")
    )
