"""Eval runs in the operator console: pass rates, results linked to their traces, and a case-by-case compare."""

from __future__ import annotations

from django.contrib import admin, messages
from django.shortcuts import render
from django.urls import reverse
from django.utils.html import format_html

from agents.models import EvalResult, EvalRun


def percent(rate: float) -> str:
    """A pass rate for people: 0.9259259 -> "92.6 %"."""
    return f"{rate * 100:.1f} %"


def millis(ms: float) -> str:
    """A latency for people: 243.1004900000744 -> "243 ms"."""
    return f"{ms:,.0f} ms"


class EvalResultInline(admin.TabularInline):
    """The results as one table, a row per case and protocol (the stock tabular inline heads every row with the
    result's name, which repeated the row's own cells)."""

    model = EvalResult
    extra = 0
    can_delete = False
    template = "admin/agents/evalrun/results_inline.html"
    fields = ["case_id", "protocol", "passed", "reason", "turns", "latency", "tokens_used", "trace"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="latency")
    def latency(self, result: EvalResult) -> str:
        return millis(result.latency_ms)

    @admin.display(description="tokens")
    def tokens_used(self, result: EvalResult) -> str:
        return f"{result.tokens:,}"

    @admin.display(description="trace")
    def trace(self, result: EvalResult) -> str:
        if result.run_id is None:
            return "—"
        url = reverse("admin:agents_run_change", args=[result.run_id])
        return format_html('<a href="{}">{}</a>', url, str(result.run_id)[:8])


@admin.register(EvalRun)
class EvalRunAdmin(admin.ModelAdmin):
    list_display = ["id", "created_at", "provider", "model", "protocol", "max_reflections", "score", "pass_rate_pct", "turns", "p95_latency"]  # fmt: skip  # noqa: E501
    list_filter = ["provider", "model", "protocol", "created_at"]
    # The stored figures for people (92.6 %, 2.7, 243 ms) instead of the raw floats.
    fields = [
        "id", "created_by", "created_at", "finished_at", "provider", "model", "protocol", "max_reflections", "agent",
        "cases_file", "only", "score", "pass_rate_pct", "turns", "p50_latency", "p95_latency", "tokens_used",
    ]  # fmt: skip
    readonly_fields = fields
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
        return percent(eval_run.pass_rate)

    @admin.display(description="mean turns", ordering="mean_turns")
    def turns(self, eval_run: EvalRun) -> str:
        return f"{eval_run.mean_turns:.1f}"

    @admin.display(description="p50 latency", ordering="p50_latency_ms")
    def p50_latency(self, eval_run: EvalRun) -> str:
        return millis(eval_run.p50_latency_ms)

    @admin.display(description="p95 latency", ordering="p95_latency_ms")
    def p95_latency(self, eval_run: EvalRun) -> str:
        return millis(eval_run.p95_latency_ms)

    @admin.display(description="tokens", ordering="tokens")
    def tokens_used(self, eval_run: EvalRun) -> str:
        return f"{eval_run.tokens:,}"

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
