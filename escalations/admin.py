"""Django admin for escalations, verdicts and labelled examples (read-only for everyone) and
the reviewers' guidance, which admins edit.

An escalation changes state only through escalations/verdicts.py::escalation_resolve (the
approve/reject actions below call it, as the reviewers' queue does); verdicts and labelled
examples are append-only rows that the resolution writes, so nobody adds or edits them here.
"""

from django import forms
from django.contrib import admin, messages
from django.template.response import TemplateResponse
from django.utils.functional import lazy
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

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


def _reason_help() -> str:
    return _("The actor is told this reason; at most %(max)s chars.") % {
        "max": f"{VERDICT_REASON_MAX_CHARS:,}"
    }


class RejectForm(forms.Form):
    reason = forms.CharField(
        widget=forms.Textarea,
        max_length=VERDICT_REASON_MAX_CHARS,
        help_text=lazy(_reason_help, str)(),
    )


@admin.register(Escalation)
class EscalationAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "kind", "status", "summary_shown", "deadline"]
    list_filter = ["status", "kind"]
    actions = ["approve", "reject"]

    @admin.display(description=gettext_lazy("summary"))
    def summary_shown(self, escalation: Escalation) -> str:
        # Untrusted (a tool's name, the guardian's reason): its bidi controls written out.
        return bidi_visible(escalation.summary)

    def has_review_permission(self, request) -> bool:
        return request.user.has_perm("escalations.review_escalation")

    @admin.action(permissions=["review"], description=gettext_lazy("Approve the held calls"))
    def approve(self, request, queryset) -> None:
        self._resolve(request, queryset, decision="approve")

    @admin.action(permissions=["review"], description=gettext_lazy("Reject, with a reason…"))
    def reject(self, request, queryset):
        form = RejectForm(request.POST if "reason" in request.POST else None)
        if form.is_valid():
            self._resolve(request, queryset, decision="reject", reason=form.cleaned_data["reason"])
            return None
        context = {
            **self.admin_site.each_context(request),
            "title": _("Reject escalations"),
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
                self.message_user(
                    request,
                    _("Escalation %(id)s: %(problem)s") % {"id": escalation.pk, "problem": exc},
                    messages.ERROR,
                )
            else:
                done = {"approve": _("approved"), "reject": _("rejected")}[verdict["decision"]]
                if given is None:  # a quorum: the item waits for a second, different approver
                    done = _("approval recorded; it needs a second, different approver")
                self.message_user(
                    request,
                    _("Escalation %(id)s: %(done)s.") % {"id": escalation.pk, "done": done},
                )


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

    @admin.display(description=gettext_lazy("text"))
    def text_shown(self, guidance: ReviewGuidance) -> str:
        return bidi_visible(guidance.text)
