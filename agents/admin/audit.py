"""The console's log entries: who changed or deleted what, and when, through the admin or (a deletion of another
user's run or thread) the API. Read-only: an audit row is never edited nor deleted here. Shown to superusers and to
staff granted Django's own `admin.view_logentry`."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.models import LogEntry


@admin.register(LogEntry)
class LogEntryAdmin(admin.ModelAdmin):
    list_display = ["action_time", "user", "action_flag", "content_type", "object_repr", "message"]
    list_filter = ["action_flag", "content_type"]
    search_fields = ["object_repr", "object_id", "change_message", "user__username"]
    date_hierarchy = "action_time"
    list_select_related = ["user", "content_type"]

    @admin.display(description="change message")
    def message(self, entry: LogEntry) -> str:
        return entry.get_change_message()  # the admin's own are JSON, turned into words here

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
