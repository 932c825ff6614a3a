"""The reviewers' guidance: notes shown next to the items they name, written by admins."""

from django.db.models import QuerySet

from escalations.models import ReviewGuidance


def review_guidance_list() -> QuerySet[ReviewGuidance]:
    """Every piece of the reviewers' guidance, by condition then tool (a few dozen rows)."""
    return ReviewGuidance.objects.order_by("condition", "tool", "pk")


def review_guidance_save(
    *, guidance: ReviewGuidance | None, condition: str, tool: str, text: str
) -> ReviewGuidance:
    """Add guidance (guidance=None) or change it; shown next to every item it names from the
    next page load on. The caller has validated it (escalations/guidance_form.py)."""
    guidance = guidance or ReviewGuidance()
    guidance.condition, guidance.tool, guidance.text = condition, tool, text.strip()
    guidance.save()
    return guidance


def review_guidance_delete(*, guidance_id: int) -> bool:
    """Remove a piece of guidance; True if it was there."""
    deleted, _ = ReviewGuidance.objects.filter(pk=guidance_id).delete()
    return bool(deleted)
