"""The pending-approvals queue: every call waiting for a decision, decided here one by one or together."""

from __future__ import annotations

import json
from datetime import timedelta

from django.contrib import admin
from django.db.models import (
    DurationField,
    ExpressionWrapper,
    F,
    IntegerField,
    OuterRef,
    Prefetch,
    Subquery,
    Value,
)
from django.db.models.functions import Cast, Coalesce
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe
from django.utils.text import Truncator
from django.utils.timesince import timesince, timeuntil

from agents.admin.base import ARGUMENTS_CHARS, ReadOnlyAdmin
from agents.models import PendingApproval, RunStatus, Step, StepKind
from agents.runs import selectors


def paused_at():
    """When a paused run started waiting: its calls expire `approval_ttl_s` after that (the run's last change for a
    run paused before expiry existed). A database expression, so the queue sorts on it (SQLite and PostgreSQL)."""
    ttl = ExpressionWrapper(
        Cast("approval_ttl_s", IntegerField()) * Value(timedelta(seconds=1)), output_field=DurationField()
    )
    return Coalesce(F("approval_expires_at") - ttl, F("updated_at"))


@admin.register(PendingApproval)
class PendingApprovalAdmin(ReadOnlyAdmin):
    """Runs waiting for a decision, oldest first: every waiting call of the reply, how long it has waited, and the
    time left before the system denies it."""

    list_display = [
        "short_id", "owner", "pending_tool", "pending_arguments", "waiting_since", "age", "time_left", "provider",
    ]  # fmt: skip
    list_select_related = ["owner"]
    change_list_template = "admin/agents/pendingapproval/change_list.html"

    def get_queryset(self, request):
        # Only the steps since each run's last model reply: what the selector needs, one query for the whole page.
        reply = Step.objects.filter(run=OuterRef("run"), kind=StepKind.MODEL).order_by("-index").values("index")[:1]
        paused = Step.objects.filter(index__gte=Coalesce(Subquery(reply), 0)).order_by("index")
        steps = Prefetch("steps", queryset=paused, to_attr="paused_steps")
        runs = super().get_queryset(request).filter(status=RunStatus.AWAITING_APPROVAL)
        return runs.annotate(waiting_since=paused_at()).prefetch_related(steps)

    def get_ordering(self, request):
        return [paused_at().asc(), "pk"]  # oldest first

    def _calls(self, run) -> list[dict]:
        """Every call the run waits on, in order (over the prefetched steps; computed once per row)."""
        if not hasattr(run, "_waiting_calls"):
            run._waiting_calls = selectors.pending_actions(run)
        return run._waiting_calls

    @admin.display(description="run")
    def short_id(self, run) -> str:
        return str(run.id)[:8]

    @admin.display(description="tool")
    def pending_tool(self, run) -> str:
        return format_html_join(mark_safe("<br>"), "{}", ((c["tool"],) for c in self._calls(run)))

    @admin.display(description="arguments")
    def pending_arguments(self, run) -> str:
        lines = ((Truncator(json.dumps(c["arguments"])).chars(ARGUMENTS_CHARS),) for c in self._calls(run))
        return format_html_join(mark_safe("<br>"), "{}", lines)

    @admin.display(description="waiting since", ordering="waiting_since")
    def waiting_since(self, run) -> str:
        return date_format(timezone.localtime(run.waiting_since), "DATETIME_FORMAT")  # the site's one format

    @admin.display(description="waited", ordering="-waiting_since")
    def age(self, run) -> str:
        return timesince(run.waiting_since, timezone.now(), depth=2)

    @admin.display(description="time left", ordering="approval_expires_at")
    def time_left(self, run) -> str:
        expires = run.approval_expires_at
        if expires is None:
            return "—"
        now = timezone.now()
        return "expired" if expires <= now else timeuntil(expires, now, depth=2)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        return HttpResponseRedirect(reverse("admin:agents_run_change", args=[object_id]))
