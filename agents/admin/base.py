"""What every console page shares: the read-only admin base and the short labels of lists."""

from __future__ import annotations

from django.contrib import admin
from django.utils.text import Truncator

from agents.models import Thread
from agents.permissions import can_review

INPUT_CHARS = 60


ARGUMENTS_CHARS = 120  # a call's arguments on one line of the approvals queue (the run page shows them whole)


def thread_label(thread: Thread) -> str:
    """A thread on one line: its title cut short, or its short id when it has none."""
    return Truncator(" ".join(thread.title.split()) or str(thread.pk)[:8]).chars(INPUT_CHARS)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Audit rows are read-only by construction: no add, no edit (delete stays with the run's owner or staff)."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_view_permission(self, request, obj=None) -> bool:
        # agents.review_run means "see every run and decide approvals": reviewers need these pages to decide.
        return super().has_view_permission(request, obj) or can_review(request.user)
