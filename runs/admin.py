"""Django admin for runs: turns, decisions and tool calls are shown read-only (append-only log)."""

from django.contrib import admin

from runs.models import Decision, Run, ToolCall, Turn


class ReadOnlyAdmin(admin.ModelAdmin):
    """The decision log is append-only: the admin may look, never edit or delete."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class TurnInline(admin.TabularInline):
    model = Turn
    fields = ["index", "state_hash", "started_at", "finished_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["id", "goal", "status", "stop_reason", "policy_version", "created_at"]
    list_filter = ["status"]
    search_fields = ["goal"]
    readonly_fields = ["created_by", "created_at", "updated_at", "finished_at"]
    inlines = [TurnInline]


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = ["run", "index", "state_hash", "started_at"]


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    list_display = ["turn", "outcome", "policy_version", "guardian_model_version", "created_at"]
    list_filter = ["outcome"]


@admin.register(ToolCall)
class ToolCallAdmin(ReadOnlyAdmin):
    list_display = ["turn", "position", "tool", "risk_class", "status"]
    list_filter = ["risk_class", "status"]
