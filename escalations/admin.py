"""Django admin for escalations, verdicts and labelled examples (read-only for everyone) and
the reviewers' guidance, which admins edit.

An escalation changes state only through escalations/verdicts.py::escalation_resolve (the
approve/reject actions below call it, as the reviewers' queue does); verdicts and labelled
examples are append-only rows that the resolution writes, so nobody adds or edits them here.
"""

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse

from escalations.errors import EscalationError
from escalations.guidance_form import ReviewGuidanceForm
from escalations.models import (
    VERDICT_REASON_MAX_CHARS,
    Escalation,
    LabelledExample,
    ReviewGuidance,
    Verdict,
)
from escalations.verdicts import escalation_resolve
from guardian_core.untrusted import bidi_visible
from runs.admin import ReadOnlyAdmin


class RejectForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea,
        max_length=VERDICT_REASON_MAX_CHARS,
        help_text=f"The actor is told this reason; at most {VERDICT_REASON_MAX_CHARS:,} chars.",
    )


@admin.register(Escalation)
class EscalationAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "kind", "status", "summary_shown", "deadline"]
    list_filter = ["status", "kind"]
    actions = ["approve", "reject"]

    @admin.display(description="summary")
    def summary_shown(self, escalation: Escalation) -> str:
        # Untrusted (a tool's name, the guardian's reason): its bidi controls written out.
        return bidi_visible(escalation.summary)

    def has_review_permission(self, request) -> bool:
        return request.user.has_perm("escalations.review_escalation")

    @admin.action(permissions=["review"], description="Approve the held calls")
    def approve(self, request, queryset) -> None:
        self._resolve(request, queryset, decision="approve")

    @admin.action(permissions=["review"], description="Reject, with a reason…")
    def reject(self, request, queryset):
        form = RejectForm(request.POST if "reason" in request.POST else None)
        if form.is_valid():
            self._resolve(request, queryset, decision="reject", reason=form.cleaned_data["reason"])
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": "Reject escalations",
            "form": form,
            "escalations": queryset,
            "opts": self.model._meta,
            "action_checkbox_name": admin.helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/escalations/reject.html", context)

    def _resolve(self, request, queryset, **verdict) -> None:
        for escalation in queryset:
            try:
                given = escalation_resolve(
                    escalation_id=escalation.pk, reviewer=request.user, **verdict
                )
            except EscalationError as exc:
                self.message_user(request, f"Escalation {escalation.pk}: {exc}", messages.ERROR)
            else:
                done = {"approve": "approved", "reject": "rejected"}[verdict["decision"]]
                if given is None:  # a quorum: the item waits for a second, different approver
                    done = "approval recorded; it needs a second, different approver"
                self.message_user(request, f"Escalation {escalation.pk}: {done}.")


@admin.register(Verdict)
class VerdictAdmin(ReadOnlyAdmin):
    list_display = ["escalation", "decision", "reviewer", "resulting_outcome", "created_at"]


@admin.register(LabelledExample)
class LabelledExampleAdmin(ReadOnlyAdmin):
    list_display = ["id", "condition", "label", "probability", "source", "selection", "created_at"]
    list_filter = ["condition", "source", "selection"]


@admin.register(ReviewGuidance)
class ReviewGuidanceAdmin(admin.ModelAdmin):
    """The rubric shown next to a decision: one short text per condition, per tool, or per
    condition and tool together."""

    form = ReviewGuidanceForm
    list_display = ["condition", "tool", "text_shown", "updated_at"]
    list_filter = ["condition"]
    search_fields = ["tool", "text"]
    fields = ["condition", "tool", "text", "updated_at"]
    readonly_fields = ["updated_at"]

    @admin.display(description="text")
    def text_shown(self, guidance: ReviewGuidance) -> str:
        return bidi_visible(guidance.text)
