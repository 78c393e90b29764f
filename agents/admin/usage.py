"""The console's usage pages: per-user quota overrides (tokens and spend), the daily usage counters (tokens and spend
in AGENT_CURRENCY), and the admin index panel (runs by status, approvals waiting, tokens over the last 30 days as a
chart, the top users)."""

from __future__ import annotations

from datetime import date, timedelta
from decimal import Decimal

from django.conf import settings
from django.contrib import admin
from django.db.models import Count, F, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from agents.admin.base import ReadOnlyAdmin
from agents.models import DailyUsage, Run, RunStatus, TokenQuota
from agents.usage import prices, quotas


@admin.register(TokenQuota)
class TokenQuotaAdmin(admin.ModelAdmin):
    """Per-user daily quotas, instead of AGENT_DAILY_TOKEN_QUOTA and AGENT_DAILY_COST_QUOTA."""

    list_display = ["user", "quota", "used_today", "spend_quota", "spent_today"]
    search_fields = ["user__username"]
    autocomplete_fields = ["user"]
    list_select_related = ["user"]
    fields = ["user", "daily_tokens", "daily_cost"]
    ordering = ["user__username"]

    def get_queryset(self, request):
        today = DailyUsage.objects.filter(owner=OuterRef("user"), day=quotas.today())
        used = today.annotate(total=F("prompt_tokens") + F("completion_tokens")).values("total")[:1]
        cost = today.values("cost_nanos")[:1]
        return (
            super()
            .get_queryset(request)
            .annotate(used_today=Coalesce(Subquery(used), 0), spent_today=Coalesce(Subquery(cost), 0))
        )

    def get_readonly_fields(self, request, obj=None):
        return ["user"] if obj is not None else []  # the user is the row's key: another user is another row

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "daily_cost":
            kwargs["min_value"] = Decimal(0)
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name == "daily_tokens":
            default = settings.AGENT_DAILY_TOKEN_QUOTA
            field.help_text = (
                "Tokens per UTC day; 0 means no quota for this user; empty: AGENT_DAILY_TOKEN_QUOTA "
                f"({default or 'none'})."
            )
        if db_field.name == "daily_cost":
            currency, default = settings.AGENT_CURRENCY, quotas.daily_cost_quota(None)
            field.help_text = (
                f"Spend per UTC day in {currency}; 0 means no spend quota for this user; empty: AGENT_DAILY_COST_QUOTA "
                f"({f'{prices.money_text(default)} {currency}' if default else 'none'})."
            )
        return field

    @admin.display(description="daily tokens", ordering="daily_tokens")
    def quota(self, row: TokenQuota) -> str:
        if row.daily_tokens is None:
            return "default"
        return f"{row.daily_tokens:,}" if row.daily_tokens else "no quota"

    @admin.display(description="used today (UTC)", ordering="used_today")
    def used_today(self, row: TokenQuota) -> str:
        return f"{row.used_today:,}"

    @admin.display(description="daily spend", ordering="daily_cost")
    def spend_quota(self, row: TokenQuota) -> str:
        if row.daily_cost is None:
            return "default"
        if not row.daily_cost:
            return "no quota"
        return f"{prices.money_text(prices.to_nanos(row.daily_cost))} {settings.AGENT_CURRENCY}"

    @admin.display(description="spent today (UTC)", ordering="spent_today")
    def spent_today(self, row: TokenQuota) -> str:
        return f"{prices.money_text(row.spent_today)} {settings.AGENT_CURRENCY}"


@admin.register(DailyUsage)
class DailyUsageAdmin(ReadOnlyAdmin):
    """Tokens and spend per user per UTC day, as the quotas count them: read-only (a database trigger keeps the
    counters)."""

    list_display = ["owner", "day", "prompt_tokens", "completion_tokens", "total", "spend"]
    list_filter = ["day"]
    date_hierarchy = "day"
    search_fields = ["owner__username"]
    list_select_related = ["owner"]
    fields = ["owner", "day", "prompt_tokens", "completion_tokens", "max_unit", "spend"]
    readonly_fields = ["spend"]
    ordering = ["-day", "owner__username"]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(total=F("prompt_tokens") + F("completion_tokens"))

    def has_delete_permission(self, request, obj=None) -> bool:
        return False  # the quota counts these rows

    @admin.display(description="total", ordering="total")
    def total(self, row: DailyUsage) -> int:
        return row.total

    @admin.display(description="spend", ordering="cost_nanos")
    def spend(self, row: DailyUsage) -> str:
        """What the day's model calls cost, in AGENT_CURRENCY (calls of models without a price count nothing)."""
        return f"{prices.money_text(row.cost_nanos)} {settings.AGENT_CURRENCY}"


def dashboard_stats() -> dict:
    """The admin index panel: runs by status over the last 24 hours, how many wait for a decision, and token usage."""
    since = timezone.now() - timedelta(hours=24)
    by_status = dict(Run.objects.filter(created_at__gte=since).values_list("status").annotate(n=Count("id")))
    return {
        "by_status": [(status.label, by_status.get(status.value, 0)) for status in RunStatus.__members__.values()],
        "awaiting": Run.objects.filter(status=RunStatus.AWAITING_APPROVAL).count(),
        **usage_stats(),
    }


USAGE_DAYS = 30
TOP_USERS = 5
SLOT_W, BAR_W, BARS_H, CHART_H = 20, 14, 100, 124  # the chart's geometry, in SVG user units


def usage_stats() -> dict:
    """Tokens per UTC day over the last 30 days (a bar chart), today's total, and the top users today and over the
    30 days with their quotas. Four aggregate queries over DailyUsage, never over runs or steps."""
    today = quotas.today()
    first = today - timedelta(days=USAGE_DAYS - 1)
    recent = DailyUsage.objects.filter(day__gte=first, day__lte=today).order_by()
    tokens = F("prompt_tokens") + F("completion_tokens")
    per_day = dict(recent.values_list("day").annotate(n=Sum(tokens)))
    days = [first + timedelta(days=i) for i in range(USAGE_DAYS)]
    top_today, top_month = _top_users(recent.filter(day=today)), _top_users(recent)
    _with_quotas(top_today + top_month)
    return {
        "usage_chart": _usage_chart(days, [int(per_day.get(day, 0)) for day in days]),
        "tokens_today": int(per_day.get(today, 0)),
        "top_today": top_today,
        "top_month": top_month,
        "top_tables": [
            ("Top users today", top_today, "top-users-today"),
            (f"Top users, last {USAGE_DAYS} days", top_month, "top-users-30d"),
        ],
    }


def _top_users(rows) -> list[dict]:
    tokens = Sum(F("prompt_tokens") + F("completion_tokens"))
    top = rows.values("owner_id", "owner__username").annotate(tokens=tokens).order_by("-tokens", "owner__username")
    return [
        {"user_id": r["owner_id"], "username": r["owner__username"], "tokens": int(r["tokens"])}
        for r in top[:TOP_USERS]
    ]


def _with_quotas(users: list[dict]) -> None:
    """Each user's daily quota by quotas.quota_for's own rule, with every override read in one query."""
    overrides = dict(
        TokenQuota.objects.filter(user_id__in={u["user_id"] for u in users}).values_list("user_id", "daily_tokens")
    )
    for user in users:
        user["quota"] = quotas.daily_quota(overrides.get(user["user_id"]))


def _usage_chart(days: list[date], totals: list[int]) -> dict:
    """Bar geometry for the template's inline SVG (one bar per day, the busiest day full height), and its text."""
    peak = max(totals)
    return {
        "bars": [_bar(i, day, total, peak) for i, (day, total) in enumerate(zip(days, totals, strict=True))],
        "first": days[0],
        "last": days[-1],
        "peak": peak,
        "total": sum(totals),
        "summary": _chart_summary(days, totals, peak),
        "width": SLOT_W * len(days),
        "height": CHART_H,
        "bars_h": BARS_H,
        "bar_w": BAR_W,
        "slot_w": SLOT_W,
    }


def _bar(i: int, day: date, total: int, peak: int) -> dict:
    """The `i`th day's bar, scaled to the busiest day: at least one unit high for a day with any use."""
    height = 0.0 if not peak else max(round(total / peak * BARS_H, 1), 1.0 if total else 0.0)
    return {
        "day": day,
        "tokens": total,
        "label": f"{day:%a %Y-%m-%d}: {total:,} tokens",
        "slot_x": i * SLOT_W,
        "x": i * SLOT_W + (SLOT_W - BAR_W) / 2,
        "y": round(BARS_H - height, 1),
        "height": height,
    }


def _chart_summary(days: list[date], totals: list[int], peak: int) -> str:
    """The chart's text: the total, today's, and the busiest day's."""
    busiest = days[totals.index(peak)]
    summary = f"{sum(totals):,} tokens over {len(days)} days; today {totals[-1]:,}"
    if peak:
        summary += f"; the busiest day was {busiest:%Y-%m-%d} with {peak:,}"
    return summary + "."
