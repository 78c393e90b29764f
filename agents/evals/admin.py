"""Eval runs in the operator console: pass rates, scores, cost and the gate's verdict; results linked to their traces
with each check's outcome and flaky cases marked; a case-by-case compare with the runs' tool calls side by side; and
the trend of one cases file's eval runs. The pure logic is agents/evals/console.py's; the review queue is
agents/evals/review_admin.py's (registered on import, here)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Max
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.http import urlencode
from django.utils.safestring import mark_safe

from agents.evals import console
from agents.evals import review_admin as _review_admin  # noqa: F401  (registers the review queue)
from agents.evals.gates import CaseSummary, summarise_cases
from agents.models import EvalResult, EvalRun, Run, Step, StepKind
from agents.usage.prices import money_text

TREND_RUNS = 200  # the newest eval runs of a cases file on its trend page


def percent(rate: float) -> str:
    """A pass rate for people: 0.9259259 -> "92.6 %"."""
    return f"{rate * 100:.1f} %"


def millis(ms: float) -> str:
    """A latency for people: 243.1004900000744 -> "243 ms"."""
    return f"{ms:,.0f} ms"


def money(nanos: int) -> str:
    """An amount in billionths in AGENT_CURRENCY: "0.0123 USD"."""
    return f"{money_text(nanos)} {settings.AGENT_CURRENCY}"


class EvalResultInline(admin.TabularInline):
    """The results as one table, a row per case, protocol and attempt (the stock tabular inline heads every row with
    the result's name, which repeated the row's own cells)."""

    model = EvalResult
    extra = 0
    can_delete = False
    template = "admin/agents/evalrun/results_inline.html"
    fields = [
        "case_id", "protocol", "attempt", "passed", "flaky", "result_score", "check_outcomes", "reason", "turns",
        "latency", "tokens_used", "cost", "trace",
    ]  # fmt: skip
    readonly_fields = fields

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._summaries: dict[int, dict[tuple[str, str], CaseSummary]] = {}  # per eval run (an inline is per request)

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def _summary(self, result: EvalResult) -> CaseSummary | None:
        """The attempts of the result's case and protocol (gates.summarise_cases; one query per eval run)."""
        if result.eval_run_id not in self._summaries:
            rows = EvalResult.objects.filter(eval_run_id=result.eval_run_id).only(
                "case_id", "protocol", "attempt", "passed", "score"
            )
            self._summaries[result.eval_run_id] = {(s.case_id, s.protocol): s for s in summarise_cases(rows)}
        return self._summaries[result.eval_run_id].get((result.case_id, result.protocol))

    @admin.display(description="flaky")
    def flaky(self, result: EvalResult) -> str:
        summary = self._summary(result)
        if summary is None or not summary.flaky:
            return ""
        note = f"passed {summary.passed} of {summary.attempts} attempts"
        return format_html('<span class="flaky" title="{}">flaky {}/{}</span>', note, summary.passed, summary.attempts)

    @admin.display(description="score")
    def result_score(self, result: EvalResult) -> str:
        return f"{result.score:.2f}"

    @admin.display(description="checks")
    def check_outcomes(self, result: EvalResult) -> str:
        """Each check in a word: "✓ exact", "✗ judge 0.40" (its reason on hover)."""
        checks = [c for c in result.checks or [] if isinstance(c, dict)]
        if not checks:
            return "—"
        spans = []
        for check in checks:
            passed, score = bool(check.get("passed")), check.get("score")
            partial = f" {score:.2f}" if isinstance(score, int | float) and 0 < score < 1 else ""
            css, mark = ("check-pass", "✓") if passed else ("check-fail", "✗")
            spans.append((css, check.get("reason") or "", mark, check.get("type", "?"), partial))
        return format_html_join(" ", '<span class="{}" title="{}">{} {}{}</span>', spans)

    @admin.display(description="latency")
    def latency(self, result: EvalResult) -> str:
        return millis(result.latency_ms)

    @admin.display(description="tokens")
    def tokens_used(self, result: EvalResult) -> str:
        return f"{result.tokens:,}"

    @admin.display(description="cost")
    def cost(self, result: EvalResult) -> str:
        return money_text(result.cost_nanos)

    @admin.display(description="trace")
    def trace(self, result: EvalResult) -> str:
        if result.run_id is None:
            return "—"
        url = reverse("admin:agents_run_change", args=[result.run_id])
        return format_html('<a href="{}">{}</a>', url, str(result.run_id)[:8])


@admin.register(EvalRun)
class EvalRunAdmin(admin.ModelAdmin):
    list_display = ["id", "created_at", "provider", "model", "protocol", "passed_of", "pass_rate_pct", "mean_score", "cost", "gate_verdict", "p95_latency"]  # fmt: skip  # noqa: E501
    list_filter = ["provider", "model", "protocol", "created_at"]
    # The stored figures for people (92.6 %, 2.7, 243 ms) instead of the raw floats.
    fieldsets = [
        (None, {"fields": [
            "id", "created_by", "created_at", "finished_at", "provider", "model", "protocol", "max_reflections",
            "agent", "cases_file", "trend", "cases_hash", "only", "repeat", "baseline_link",
        ]}),
        ("Results", {"fields": [
            "passed_of", "pass_rate_pct", "mean_score", "cost", "gate_details", "flaky_cases", "turns",
            "p50_latency", "p95_latency", "tokens_used",
        ]}),
    ]  # fmt: skip
    readonly_fields = [name for _, options in fieldsets for name in options["fields"]]
    inlines = [EvalResultInline]
    actions = ["compare"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def get_urls(self):
        trend = self.admin_site.admin_view(self.trend_view)
        compare = self.admin_site.admin_view(self.compare_view)
        return [
            path("trend/", trend, name="agents_evalrun_trend"),
            path("compare/<int:a>/<int:b>/", compare, name="agents_evalrun_compare"),
            *super().get_urls(),
        ]

    @admin.display(description="passed")
    def passed_of(self, eval_run: EvalRun) -> str:
        return f"{eval_run.passed}/{eval_run.total}"

    @admin.display(description="pass rate", ordering="pass_rate")
    def pass_rate_pct(self, eval_run: EvalRun) -> str:
        return percent(eval_run.pass_rate)

    @admin.display(description="score", ordering="score")
    def mean_score(self, eval_run: EvalRun) -> str:
        return f"{eval_run.score:.2f}"

    @admin.display(description="cost", ordering="cost_nanos")
    def cost(self, eval_run: EvalRun) -> str:
        return money(eval_run.cost_nanos)

    @admin.display(description="gate")
    def gate_verdict(self, eval_run: EvalRun) -> str:
        """The gate's verdict in a word: passed, FAILED, or "—" when no gate was asked."""
        summary = console.gate_summary(eval_run.gate)
        if summary is None:
            return "—"
        return format_html('<strong class="{}">{}</strong>', summary.css, summary.verdict)

    @admin.display(description="gate")
    def gate_details(self, eval_run: EvalRun) -> str:
        """The verdict, what the gate asked, and its failures and regressions."""
        summary = console.gate_summary(eval_run.gate)
        if summary is None:
            return "— (no gate was asked)"
        parts = [format_html("{} — {}", self.gate_verdict(eval_run), summary.held_to)]
        for title, items in (("failures", summary.failures), ("regressions", summary.regressions)):
            if items:
                listed = format_html_join("", "<li>{}</li>", ((item,) for item in items))
                parts.append(format_html('<div class="gate-{}">{}:<ul>{}</ul></div>', title, title, listed))
        return mark_safe("".join(parts))  # every part was escaped by format_html

    @admin.display(description="flaky cases")
    def flaky_cases(self, eval_run: EvalRun) -> str:
        flaky = [s for s in summarise_cases(eval_run.results.only("case_id", "protocol", "attempt", "passed", "score"))
                 if s.flaky]  # fmt: skip
        if not flaky:
            return "none" if eval_run.repeat > 1 else "— (one attempt per case)"
        return ", ".join(f"{s.key} {s.passed}/{s.attempts}" for s in flaky)

    @admin.display(description="cases sha256")
    def cases_hash(self, eval_run: EvalRun) -> str:
        return eval_run.cases_sha256[:12] or "—"

    @admin.display(description="baseline")
    def baseline_link(self, eval_run: EvalRun) -> str:
        if eval_run.baseline_id is None:
            return "—"
        page = reverse("admin:agents_evalrun_change", args=[eval_run.baseline_id])
        diff = reverse("admin:agents_evalrun_compare", args=[eval_run.baseline_id, eval_run.pk])
        return format_html('<a href="{}">eval run {}</a> (<a href="{}">compare</a>)', page, eval_run.baseline_id, diff)

    @admin.display(description="trend")
    def trend(self, eval_run: EvalRun) -> str:
        url = reverse("admin:agents_evalrun_trend") + "?" + urlencode({"cases_file": eval_run.cases_file})
        return format_html('<a href="{}" id="trend-link">trend of this cases file</a>', url)

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

    # --- compare ---------------------------------------------------------------------------------------------------

    @admin.action(description="Compare two selected eval runs case by case")
    def compare(self, request, queryset):
        runs = list(queryset.order_by("created_at"))
        if len(runs) != 2:
            self.message_user(request, "Select exactly two eval runs to compare.", messages.WARNING)
            return None
        return self._compare(request, runs[0], runs[1])

    def compare_view(self, request: HttpRequest, a: int, b: int) -> HttpResponse:
        """The compare of eval runs a and b (the baseline's link), as the action shows it."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        return self._compare(request, get_object_or_404(EvalRun, pk=a), get_object_or_404(EvalRun, pk=b))

    def _compare(self, request: HttpRequest, a: EvalRun, b: EvalRun) -> HttpResponse:
        changes = console.case_changes(a.results.all(), b.results.all())
        may_see_runs = self.admin_site._registry[Run].has_view_permission(request)
        calls = self._calls({c.a_run for c in changes} | {c.b_run for c in changes}) if may_see_runs else {}
        trajectories = [
            {
                "change": change,
                "a_run": change.a_run,
                "b_run": change.b_run,
                "diff": console.trajectory_diff(calls.get(change.a_run, []), calls.get(change.b_run, [])),
            }
            for change in changes
            if change.a_run is not None or change.b_run is not None
        ]
        context = {
            **self.admin_site.each_context(request),
            "a": a,
            "b": b,
            "rows": changes,
            "trajectories": trajectories if may_see_runs else None,
            "title": "Compare eval runs",
        }
        return render(request, "admin/agents/evalrun/compare.html", context)

    @staticmethod
    def _calls(run_ids: set) -> dict:
        """Each run's tool calls (name and arguments), in step order: one query."""
        steps = Step.objects.filter(run_id__in=run_ids - {None}, kind=StepKind.TOOL).order_by("run_id", "index")
        grouped: dict = {}
        for run_id, data in steps.values_list("run_id", "data"):
            grouped.setdefault(run_id, []).append(data)
        return {run_id: console.calls_of(rows) for run_id, rows in grouped.items()}

    # --- trend -----------------------------------------------------------------------------------------------------

    def trend_view(self, request: HttpRequest) -> HttpResponse:
        """One cases file's eval runs, oldest first: pass rate, score and cost over time; without `cases_file`, the
        cases files with eval runs."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        cases_file = request.GET.get("cases_file")
        context = {**self.admin_site.each_context(request), "title": "Eval trend", "cases_file": cases_file}
        if cases_file is None:
            files = EvalRun.objects.values("cases_file").annotate(runs=Count("pk"), last=Max("created_at"))
            context["files"] = [
                {**f, "url": "?" + urlencode({"cases_file": f["cases_file"]})} for f in files.order_by("cases_file")
            ]
            return render(request, "admin/agents/evalrun/trend.html", context)
        newest = EvalRun.objects.filter(cases_file=cases_file).order_by("-created_at", "-pk")[:TREND_RUNS]
        runs = list(reversed(newest))
        rows: list[dict] = []
        for n, eval_run in enumerate(runs):
            before = runs[n - 1].cases_sha256 if n else ""
            rows.append(
                {
                    "run": eval_run,
                    "url": reverse("admin:agents_evalrun_change", args=[eval_run.pk]),
                    "pass_rate": percent(eval_run.pass_rate),
                    "bar": round(eval_run.pass_rate * 100, 1),
                    "score": f"{eval_run.score:.2f}",
                    "cost": money(eval_run.cost_nanos),
                    "gate": console.gate_summary(eval_run.gate),
                    "cases_changed": console.cases_changed(before, eval_run.cases_sha256),
                }
            )
        context.update(
            rows=rows,
            pass_points=console.trend_points([r.pass_rate for r in runs]),
            score_points=console.trend_points([r.score for r in runs]),
        )
        return render(request, "admin/agents/evalrun/trend.html", context)
