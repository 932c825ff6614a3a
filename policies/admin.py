"""Django admin for policy versions, read-only: the admins' pages at /policies/ change them."""

from django.contrib import admin, messages
from django.db.models import Count
from django.http import HttpRequest, HttpResponse

from guardian_core.models import PolicyVersion
from guardian_core.untrusted import bidi_visible

EDIT_ELSEWHERE = (
    "Policy versions are read-only here. Make, compare and activate them at /policies/, where "
    "every change is validated, gated and recorded."
)


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    """Policy versions, read-only: the admins' editor at /policies/ is the one way to make a
    version or activate one, so every change is validated, recorded and gated the same way."""

    list_display = [
        "number",
        "label_shown",
        "question_set_version",
        "is_active",
        "run_count",
        "created_at",
    ]
    list_filter = ["is_active"]
    exclude = ["label"]
    actions = None

    def get_queryset(self, request: HttpRequest):
        return super().get_queryset(request).annotate(run_count=Count("runs"))

    @admin.display(description="label")
    def label_shown(self, version: PolicyVersion) -> str:
        # An admin's text, shown to others: its bidi controls written out.
        return bidi_visible(version.label)

    @admin.display(description="runs", ordering="run_count")
    def run_count(self, version: PolicyVersion) -> int:
        return version.run_count

    def get_readonly_fields(self, request: HttpRequest, obj: PolicyVersion | None = None):
        # Every field, including any a later version of the model adds; the label in its
        # visible form (the raw field is excluded).
        return [
            "label_shown" if field.name == "label" else field.name
            for field in self.model._meta.fields
        ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: PolicyVersion | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: PolicyVersion | None = None) -> bool:
        return False

    def changelist_view(self, request: HttpRequest, extra_context=None) -> HttpResponse:
        self.message_user(request, EDIT_ELSEWHERE, messages.INFO)
        return super().changelist_view(request, extra_context)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None
    ) -> HttpResponse:
        if request.method == "GET":
            self.message_user(request, EDIT_ELSEWHERE, messages.INFO)
        return super().change_view(request, object_id, form_url, extra_context)
