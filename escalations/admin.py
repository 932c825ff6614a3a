"""Django admin for escalations; verdicts and labelled examples are append-only, so read-only."""

from django.contrib import admin

from escalations.models import Escalation, LabelledExample, Verdict
from runs.admin import ReadOnlyAdmin


@admin.register(Escalation)
class EscalationAdmin(ReadOnlyAdmin):
    list_display = ["id", "run", "kind", "status", "summary", "deadline"]
    list_filter = ["status", "kind"]


@admin.register(Verdict)
class VerdictAdmin(ReadOnlyAdmin):
    list_display = ["escalation", "decision", "reviewer", "created_at"]


@admin.register(LabelledExample)
class LabelledExampleAdmin(ReadOnlyAdmin):
    list_display = ["id", "condition", "label", "probability", "source", "created_at"]
    list_filter = ["condition", "source"]
