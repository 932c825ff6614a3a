"""Django admin for policy versions and API tokens.

A version's content is validated in full on save (PolicyVersion.clean, the same rules as the
services), t* is computed from the costs, and activation goes through the services. Once a run
pins a version it is read-only here: the page says why, and changing it means a new version.
"""

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import IntegrityError
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from guardian_core.models import ApiToken, PolicyVersion
from guardian_core.policy_validation import thresholds_with_t_star
from guardian_core.services import (
    api_token_create,
    api_token_revoke,
    policy_version_activate,
    policy_version_deactivate,
    policy_version_run_count,
)
from runs.db_triggers import FROZEN_MESSAGE


def frozen_message(version: PolicyVersion, run_count: int) -> str:
    runs = "1 run" if run_count == 1 else f"{run_count} runs"
    return (
        f"Policy version v{version.number} is used by {runs}; its content cannot change. "
        "Make a new version."
    )


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    list_display = [
        "number",
        "label",
        "question_set_version",
        "is_active",
        "run_count",
        "created_at",
    ]
    list_filter = ["is_active"]
    fields = [
        "number",
        "label",
        "thresholds",
        "question_set",
        "question_set_version",
        "quorum",
        "judge",
        "is_active",
        "created_by",
        "created_at",
    ]
    # is_active only changes through the actions below, which validate the version and retire
    # the one active before (the form would trip the one-active constraint instead).
    readonly_fields = ["is_active", "created_by", "created_at"]
    actions = ["activate", "deactivate"]

    def get_queryset(self, request: HttpRequest):
        return super().get_queryset(request).annotate(run_count=Count("runs"))

    @admin.display(description="runs", ordering="run_count")
    def run_count(self, version: PolicyVersion) -> int:
        return version.run_count

    def get_form(self, request: HttpRequest, obj: PolicyVersion | None = None, **kwargs):
        kwargs["help_texts"] = {
            "quorum": 'Two distinct approvers for some held calls: {"regulated": true} for every '
            'regulated call, {"tools": ["issue_refund"]} for named tools, or both. {} for none.',
            **kwargs.get("help_texts", {}),
        }
        return super().get_form(request, obj, **kwargs)

    def get_changeform_initial_data(self, request: HttpRequest) -> dict:
        top = PolicyVersion.objects.order_by("-number").values_list("number", flat=True).first()
        return {"number": (top or 0) + 1, **super().get_changeform_initial_data(request)}

    # ---- a used version is read-only ----------------------------------------------------------

    def has_change_permission(self, request: HttpRequest, obj: PolicyVersion | None = None) -> bool:
        if obj is not None and self._is_used(obj):
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: PolicyVersion | None = None) -> bool:
        if obj is not None and self._is_used(obj):
            return False
        return super().has_delete_permission(request, obj)

    def _is_used(self, version: PolicyVersion) -> bool:
        return policy_version_run_count(version) > 0

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None
    ) -> HttpResponse:
        version = self.get_object(request, object_id)
        if (
            version is not None
            and request.method == "GET"
            and self.has_view_permission(request, version)
        ):
            run_count = policy_version_run_count(version)
            if run_count:
                self.message_user(request, frozen_message(version, run_count), messages.WARNING)
        return super().change_view(request, object_id, form_url, extra_context)

    def changeform_view(
        self, request: HttpRequest, object_id=None, form_url: str = "", extra_context=None
    ) -> HttpResponse:
        version = self.get_object(request, object_id) if object_id else None
        if (
            request.method == "POST"
            and version is not None
            and self.has_view_permission(request, version)
            and self._is_used(version)
        ):
            # A form opened before a run pinned the version: answer with the reason, on the
            # read-only page, rather than a bare 403.
            self.message_user(
                request,
                f"Not saved. {frozen_message(version, policy_version_run_count(version))}",
                messages.ERROR,
            )
            return HttpResponseRedirect(request.path)
        # A run can pin the version between the check above and the save; the database trigger
        # then refuses the update. Say so instead of letting the error become a 500.
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except IntegrityError as exc:
            if FROZEN_MESSAGE not in str(exc) or version is None:
                raise
            run_count = policy_version_run_count(version)
            self.message_user(
                request,
                f"Not saved: a run started on it meanwhile. {frozen_message(version, run_count)}",
                messages.ERROR,
            )
            return HttpResponseRedirect(request.path)

    def save_model(self, request: HttpRequest, obj: PolicyVersion, form, change: bool) -> None:
        # The form validated the content (PolicyVersion.clean); t* is derived, never typed.
        obj.thresholds = thresholds_with_t_star(obj.thresholds)
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)

    # ---- activation: the one thing still allowed on a used version ------------------------

    def has_manage_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("guardian_core.manage_policy")

    @admin.action(permissions=["manage"], description="Activate (new runs pin it)")
    def activate(self, request: HttpRequest, queryset) -> None:
        if queryset.count() != 1:
            self.message_user(request, "Select exactly one version to activate.", messages.ERROR)
            return
        version = queryset.get()
        try:
            policy_version_activate(version_id=version.pk)
        except ValidationError as exc:
            self.message_user(request, " ".join(exc.messages), messages.ERROR)
        else:
            self.message_user(request, f"Activated {version}; new runs pin it.")

    @admin.action(permissions=["manage"], description="Deactivate (no new run can start)")
    def deactivate(self, request: HttpRequest, queryset) -> None:
        for version in queryset:
            if policy_version_deactivate(version_id=version.pk):
                self.message_user(
                    request, f"Deactivated {version}; activate another before starting runs."
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
