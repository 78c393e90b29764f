"""Eval runs in the operator console: pass rates, results linked to their traces, and a case-by-case compare."""

from __future__ import annotations

from django.contrib import admin, messages
from django.shortcuts import render
from django.urls import reverse
from django.utils.html import format_html

from agents.models import EvalResult, EvalRun


class EvalResultInline(admin.TabularInline):
    model = EvalResult
    extra = 0
    can_delete = False
    fields = ["case_id", "protocol", "passed", "reason", "turns", "latency_ms", "tokens", "trace"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="trace")
    def trace(self, result: EvalResult) -> str:
        if result.run_id is None:
            return "—"
        url = reverse("admin:agents_run_change", args=[result.run_id])
        return format_html('<a href="{}">{}</a>', url, str(result.run_id)[:8])


@admin.register(EvalRun)
class EvalRunAdmin(admin.ModelAdmin):
    list_display = ["id", "created_at", "provider", "model", "protocol", "max_reflections", "score", "pass_rate_pct", "mean_turns", "p95_latency_ms"]  # fmt: skip  # noqa: E501
    list_filter = ["provider", "model", "protocol", "created_at"]
    readonly_fields = [f.name for f in EvalRun._meta.fields]
    inlines = [EvalResultInline]
    actions = ["compare"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="passed")
    def score(self, eval_run: EvalRun) -> str:
        return f"{eval_run.passed}/{eval_run.total}"

    @admin.display(description="pass rate", ordering="pass_rate")
    def pass_rate_pct(self, eval_run: EvalRun) -> str:
        return f"{eval_run.pass_rate:.0%}"

    @admin.action(description="Compare two selected eval runs case by case")
    def compare(self, request, queryset):
        runs = list(queryset.order_by("created_at"))
        if len(runs) != 2:
            self.message_user(request, "Select exactly two eval runs to compare.", messages.WARNING)
            return None
        first, second = ({(r.case_id, r.protocol): r for r in run.results.all()} for run in runs)
        rows = [
            {"case": case, "protocol": protocol, "a": first.get((case, protocol)), "b": second.get((case, protocol))}
            for case, protocol in sorted(set(first) | set(second))
        ]
        for row in rows:
            row["changed"] = bool(row["a"] and row["b"] and row["a"].passed != row["b"].passed)
        context = {
            **self.admin_site.each_context(request),
            "a": runs[0],
            "b": runs[1],
            "rows": rows,
            "title": "Compare eval runs",
        }
        return render(request, "admin/agents/evalrun/compare.html", context)
