"""Django admin for policy versions."""

from django.contrib import admin

from guardian_core.models import PolicyVersion


@admin.register(PolicyVersion)
class PolicyVersionAdmin(admin.ModelAdmin):
    list_display = ["number", "label", "question_set_version", "is_active", "created_at"]
    list_filter = ["is_active"]
    readonly_fields = ["created_by", "created_at"]
