"""Django admin for API tokens (policy versions' read-only admin is policies/admin.py)."""

from django.contrib import admin, messages
from django.http import HttpRequest

from guardian_core.models import ApiToken
from guardian_core.services import (
    api_token_create,
    api_token_revoke,
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
