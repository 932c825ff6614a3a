"""Template helpers for escalation pages: the deadline countdown and the probability-against-t*
bar (the formatting itself lives in escalations.presentation)."""

from datetime import datetime

from django import template
from django.utils import timezone

from escalations import presentation

register = template.Library()


@register.filter
def countdown(moment: datetime | None) -> str:
    """ "in 23 min" before `moment`, "overdue by 5 min" after it: rendered on the server so
    the page is read without any script."""
    return "" if moment is None else presentation.countdown(moment, timezone.now())


@register.inclusion_tag("escalations/_probability_bar.html")
def probability_bar(reason: dict) -> dict:
    """One triggered reason as a bar: the guardian's probability, t* and the uncertain band
    t*±δ, drawn with SVG attributes (the CSP allows no inline style)."""
    return {"bar": presentation.probability_bar(reason)}
