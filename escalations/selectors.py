"""Reads of escalations that pages and the API need."""

from django.db.models import QuerySet

from escalations.models import Escalation, EscalationStatus


def escalation_list_open() -> QuerySet[Escalation]:
    """Open escalations, the nearest deadline first: what a reviewer should clear next."""
    return (
        Escalation.objects.filter(status=EscalationStatus.OPEN)
        .select_related("run", "turn")
        .order_by("deadline", "id")
    )
