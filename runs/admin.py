"""Django admin for runs: runs, turns, decisions and tool calls are shown read-only.

The record is what auditors replay and trust, so nobody edits it here, not even a superuser:
a run's status, answer, lease and config change only through runs/services.py (start, advance,
cancel), which keep the log consistent. Viewing needs the model's view permission.
"""

from django.contrib import admin

from guardian_core.untrusted import bidi_visible
from runs.models import Decision, Run, ToolCall, Turn


class ReadOnlyAdmin(admin.ModelAdmin):
    """The decision log is append-only: the admin may look, never add, edit or delete.

    With no change permission Django answers a POST to the change page, and any request to the
    add page, with 403, and renders the change page as a read-only view.
    """

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

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


# A run's untrusted and user-written text: shown by the methods below in its visible form (each
# bidirectional control written out as [U+202E]), never as the raw field, which would obey it.
_RUN_TEXT_FIELDS = ("goal", "acceptance_criteria", "final_answer", "last_error")


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    # Runs start and cancel through the services (the API and the pages), never by hand here.
    list_display = ["id", "goal_shown", "status", "stop_reason", "policy_version", "created_at"]
    list_filter = ["status"]
    search_fields = ["goal"]
    exclude = _RUN_TEXT_FIELDS
    readonly_fields = ["goal_shown", "criteria_shown", "final_answer_shown", "last_error_shown"]
    inlines = [TurnInline]

    @admin.display(description="goal")
    def goal_shown(self, run: Run) -> str:
        return bidi_visible(run.goal)

    @admin.display(description="acceptance criteria")
    def criteria_shown(self, run: Run) -> str:
        criteria = run.acceptance_criteria if isinstance(run.acceptance_criteria, list) else []
        return bidi_visible("; ".join(str(c) for c in criteria))

    @admin.display(description="final answer")
    def final_answer_shown(self, run: Run) -> str:
        return bidi_visible(run.final_answer)

    @admin.display(description="last error")
    def last_error_shown(self, run: Run) -> str:
        return bidi_visible(run.last_error)


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
