"""Django admin for policy versions (read-only: the admins' pages at /policies/ change them) and
API tokens."""

from django.contrib import admin, messages
from django.db.models import Count
from django.http import HttpRequest, HttpResponse

from guardian_core.models import ApiToken, PolicyVersion
from guardian_core.services import (
    api_token_create,
    api_token_revoke,
)
from guardian_core.untrusted import bidi_visible


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


EDIT_ELSEWHERE = (
    "Policy versions are read-only here. Make, compare and activate them at /policies/, where "
    "every change is validated, gated and recorded."
)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Admins create machines' tokens here: the token is shown once, in the message after
    saving, and only its SHA-256 is kept. A token is revoked, never edited."""

    list_display = ["name", "prefix", "user", "created_at", "last_used_at", "revoked_at"]
    list_filter = [("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prefix", "user__username"]
    actions = ["revoke"]

    def get_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> list[str]:
        if obj is None:
            return ["user", "name"]
        return ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: ApiToken | None = None) -> list[str]:
        if obj is None:
            return []
        return ["user", "name", "prefix", "created_at", "last_used_at", "revoked_at"]

    def save_model(self, request: HttpRequest, obj: ApiToken, form, change: bool) -> None:
        if change:
            return  # nothing of a token changes but through the revoke action
        token, secret = api_token_create(user=obj.user, name=obj.name)
        obj.pk = token.pk
        obj.__dict__.update(token.__dict__)
        self.message_user(
            request,
            f"Token for {token.user}: {secret} — copy it now; it is not shown again.",
            messages.WARNING,
        )

    def has_delete_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        return False  # revoked tokens stay: who used which token keeps its meaning

    @admin.action(permissions=["change"], description="Revoke (the token stops working now)")
    def revoke(self, request: HttpRequest, queryset) -> None:
        revoked = sum(api_token_revoke(token_id=pk) for pk in queryset.values_list("pk", flat=True))
        self.message_user(request, f"Revoked {revoked} token(s).")
