"""The operator console: read-only runs with their traces, pending approvals, decisions through the services."""

from __future__ import annotations

import json
from datetime import timedelta

from django.contrib import admin, messages
from django.contrib.admin.utils import unquote
from django.core.exceptions import FieldDoesNotExist, PermissionDenied
from django.db.models import Count, Prefetch
from django.http import HttpRequest, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import path, reverse
from django.utils import timezone
from django.utils.text import Truncator

from agents import selectors, services
from agents.models import PendingApproval, Run, RunStatus, Step
from agents.permissions import can_decide, can_review

INPUT_CHARS = 60


def has_field(model, name: str) -> bool:
    try:
        model._meta.get_field(name)
    except FieldDoesNotExist:
        return False
    return True


class ReadOnlyAdmin(admin.ModelAdmin):
    """Audit rows are read-only by construction: no add, no edit (delete stays with the run's owner or staff)."""

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_view_permission(self, request, obj=None) -> bool:
        # agents.review_run means "see every run and decide approvals": reviewers need these pages to decide.
        return super().has_view_permission(request, obj) or can_review(request.user)


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = [
        "short_id", "owner", "input_summary", "status", "stop_reason", "provider_model", "protocol", "turns", "tokens",
        "duration", "created_at",
    ]  # fmt: skip
    list_filter = [
        "status",
        "stop_reason",
        "provider",
        "protocol",
        ("owner", admin.RelatedOnlyFieldListFilter),
        "created_at",
    ]
    search_fields = ["input", "id", "owner__username"]
    list_select_related = ["owner"]
    date_hierarchy = "created_at"
    actions = ["cancel_runs"]
    change_form_template = "admin/agents/run/change_form.html"
    fields = [
        "id",
        "owner",
        "input",
        "status",
        "stop_reason",
        "output",
        "error",
        "provider",
        "model",
        "protocol",
        "mode",
    ]

    def get_list_display(self, request: HttpRequest) -> list[str]:
        """The thread column only once runs have threads (a later migration adds `Run.thread`)."""
        columns = list(super().get_list_display(request))
        if has_field(Run, "thread"):
            columns.insert(columns.index("input_summary") + 1, "thread_title")
        return columns

    def get_list_select_related(self, request: HttpRequest) -> list[str]:
        return [*self.list_select_related, *(["thread"] if has_field(Run, "thread") else [])]

    @admin.display(description="run", ordering="id")
    def short_id(self, run: Run) -> str:
        return str(run.id)[:8]

    @admin.display(description="input", ordering="input")
    def input_summary(self, run: Run) -> str:
        """The goal on one line, cut short (the admin escapes it: it is user text)."""
        return Truncator(" ".join(run.input.split())).chars(INPUT_CHARS)

    @admin.display(description="thread")
    def thread_title(self, run: Run) -> str:
        thread = getattr(run, "thread", None)
        if thread is None:
            return "—"
        return Truncator(getattr(thread, "title", "") or str(thread.pk)[:8]).chars(INPUT_CHARS)

    @admin.display(description="provider / model", ordering="provider")
    def provider_model(self, run: Run) -> str:
        return f"{run.provider} / {run.model}"

    @admin.display(description="tokens")
    def tokens(self, run: Run) -> int:
        return run.total_tokens

    @admin.display(description="duration")
    def duration(self, run: Run) -> str:
        return f"{(run.updated_at - run.created_at).total_seconds():.2f} s"

    def has_review_permission(self, request: HttpRequest) -> bool:
        return can_review(request.user)

    @admin.action(description="Cancel selected runs", permissions=["review"])  # a write: not for view-only staff
    def cancel_runs(self, request: HttpRequest, queryset) -> None:
        cancelled = 0
        for run in queryset.exclude(status=RunStatus.DONE):
            try:
                services.cancel_run(run_id=run.pk, actor=request.user)
                cancelled += 1
            except services.RunFinished:
                pass
        self.message_user(request, f"Cancelled {cancelled} run(s).", messages.SUCCESS)

    def get_urls(self):
        decide = self.admin_site.admin_view(self.decide_view)
        return [path("<uuid:run_id>/decide/", decide, name="agents_run_decide"), *super().get_urls()]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        run = self.get_object(request, unquote(object_id))
        if run is None:  # unknown or malformed id: the admin's own "doesn't exist" redirect, not a 500
            return super().change_view(request, object_id, form_url, extra_context)
        steps = list(Step.objects.filter(run=run).order_by("index"))
        pending = selectors.pending_action(run)
        context = {
            "run": run,
            "steps": [_step_view(s) for s in steps],
            "pending": pending,
            "pending_arguments": json.dumps(pending["arguments"], indent=2) if pending else "",
            "can_decide": pending is not None and can_decide(request.user, run),
            "decide_url": reverse("admin:agents_run_decide", args=[run.pk]),
        }
        return super().change_view(request, object_id, form_url, {**(extra_context or {}), **context})

    def decide_view(self, request: HttpRequest, run_id):
        """Approve or deny the pending call, through the same service as the API."""
        run = get_object_or_404(Run, pk=run_id)
        back = HttpResponseRedirect(reverse("admin:agents_run_change", args=[run.pk]))
        if request.method != "POST":
            return back
        if not can_decide(request.user, run):
            raise PermissionDenied
        try:
            arguments = _edited_arguments(request.POST.get("arguments", ""))
            run = services.decide_approval(
                run_id=run.pk,
                actor=request.user,
                approved=request.POST.get("decision") == "approve",
                arguments=arguments,
                reason=request.POST.get("reason") or None,
                continue_run=True,
            )
        except ValueError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return back
        except services.ServiceError as exc:
            self.message_user(request, _detail_text(exc.detail), messages.ERROR)
            return back
        self.message_user(request, f"Decision recorded; the run is now {run.status}.", messages.SUCCESS)
        return back


def _detail_text(detail) -> str:
    """A service error's detail as one line: field errors read as their messages."""
    if isinstance(detail, dict):
        return " ".join(str(m) for messages_ in detail.values() for m in messages_)
    return str(detail)


def _edited_arguments(raw: str) -> object:
    """The reviewer's edited arguments: empty means 'as the model asked'; else JSON (the service checks the schema)."""
    if not raw.strip():
        return None
    try:
        return json.loads(raw)
    except ValueError:
        raise ValueError("The edited arguments are not valid JSON.") from None


LONG_OUTPUT_CHARS = 400


def _step_view(step: Step) -> dict:
    """What the trace template shows of a step (plain data: the template escapes everything)."""
    data = dict(step.data)
    view = {
        "index": step.index,
        "kind": step.kind,
        "latency_ms": step.latency_ms,
        "created_at": step.created_at,
        **data,
    }
    for key in ("arguments", "original_arguments", "usage"):
        if key in data:
            view[f"{key}_json"] = json.dumps(data[key], indent=2)
    view["tool_calls_json"] = [
        {"name": c["name"], "id": c["id"], "arguments": json.dumps(c["arguments"])}
        for c in data.get("tool_calls") or []
    ]
    output = data.get("output") or ""
    view["long_output"] = len(output) > LONG_OUTPUT_CHARS
    view["output_head"] = output[:LONG_OUTPUT_CHARS]
    return view


@admin.register(PendingApproval)
class PendingApprovalAdmin(ReadOnlyAdmin):
    """Runs waiting for a decision, oldest first, with the tool and arguments they wait on."""

    list_display = ["short_id", "owner", "pending_tool", "pending_arguments", "waiting_since", "provider"]
    list_select_related = ["owner"]
    ordering = ["updated_at"]

    def get_queryset(self, request):
        steps = Prefetch("steps", queryset=Step.objects.order_by("index"), to_attr="paused_steps")
        return super().get_queryset(request).filter(status=RunStatus.AWAITING_APPROVAL).prefetch_related(steps)

    def _calls(self, run) -> list[dict]:
        """The call the run waits on (over the prefetched steps)."""
        pending = selectors.pending_action(run)
        return [{"name": pending["tool"], "arguments": pending["arguments"]}] if pending else []

    @admin.display(description="run")
    def short_id(self, run) -> str:
        return str(run.id)[:8]

    @admin.display(description="tool")
    def pending_tool(self, run) -> str:
        return ", ".join(c["name"] for c in self._calls(run))

    @admin.display(description="arguments")
    def pending_arguments(self, run) -> str:
        return "; ".join(json.dumps(c["arguments"]) for c in self._calls(run))

    @admin.display(description="waiting since", ordering="updated_at")
    def waiting_since(self, run) -> str:
        return timezone.localtime(run.updated_at).strftime("%Y-%m-%d %H:%M:%S")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        return HttpResponseRedirect(reverse("admin:agents_run_change", args=[object_id]))


def dashboard_stats() -> dict:
    """The admin index panel: runs by status over the last 24 hours, and how many wait for a decision."""
    since = timezone.now() - timedelta(hours=24)
    by_status = dict(Run.objects.filter(created_at__gte=since).values_list("status").annotate(n=Count("id")))
    return {
        "by_status": [(status.label, by_status.get(status.value, 0)) for status in RunStatus],
        "awaiting": Run.objects.filter(status=RunStatus.AWAITING_APPROVAL).count(),
    }


from agents.evals import admin as _evals_admin  # noqa: E402, F401  (registers the eval admin)
