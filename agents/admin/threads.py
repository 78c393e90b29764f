"""The threads page: conversations with their runs; deleting one goes through the services."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.db.models import (
    Count,
)
from django.http import HttpRequest
from django.urls import reverse

from agents.admin.base import ReadOnlyAdmin, thread_label
from agents.models import Run, Thread
from agents.runs import submit


@admin.register(Thread)
class ThreadAdmin(ReadOnlyAdmin):
    """Conversations: read-only; the page lists the thread's runs oldest first, each a link to its trace."""

    list_display = ["name", "owner", "run_count", "updated_at"]
    list_filter = [("owner", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["title", "id", "owner__username"]
    list_select_related = ["owner"]
    fields = ["id", "title", "owner", "created_at", "updated_at", "summary", "summary_runs"]  # history "summarize"
    change_form_template = "admin/agents/thread/change_form.html"

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(run_count=Count("runs"))  # one query for the list, no N+1

    def has_view_permission(self, request, obj=None) -> bool:
        """A thread's page is its runs: seeing it needs the right to see runs as well."""
        runs = self.admin_site._registry[Run]
        return super().has_view_permission(request, obj) and runs.has_view_permission(request)

    @admin.display(description="thread", ordering="title")
    def name(self, thread: Thread) -> str:
        return thread_label(thread)

    @admin.display(description="runs", ordering="run_count")
    def run_count(self, thread: Thread) -> int:
        return thread.run_count

    def change_view(self, request, object_id, form_url="", extra_context=None):
        thread = self.get_object(request, unquote(object_id))
        if thread is None:  # unknown or malformed id: the admin's own "doesn't exist" redirect
            return super().change_view(request, object_id, form_url, extra_context)
        runs = Run.objects.filter(thread=thread).order_by("created_at", "id")
        fields = ["id", "thread_id", "input", "output", "status", "stop_reason", "created_at"]
        context = {"thread_runs": [_thread_run_view(run) for run in runs.only(*fields)]}
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), **context})

    def delete_model(self, request: HttpRequest, obj: Thread) -> None:
        submit.delete_thread(thread=obj)  # the service owns deleting a thread with its runs and steps

    def delete_queryset(self, request: HttpRequest, queryset) -> None:
        for thread in queryset:
            submit.delete_thread(thread=thread)


def _thread_run_view(run: Run) -> dict:
    """One run of a thread's page (plain data: the template escapes everything)."""
    return {
        "short_id": str(run.pk)[:8],
        "url": reverse("admin:agents_run_change", args=[run.pk]),
        "input": run.input,
        "output": run.output,
        "status": run.status,
        "stop_reason": run.stop_reason,
        "created_at": run.created_at,
    }
