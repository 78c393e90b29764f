"""The console's Schedules page: every user's schedules, when each fires next (in its own time zone) and what its last
tick did, with a link to the run it started. A form refuses what the API refuses (agents.schedules.services: the
cron expression, the time zone, the input, the run options a run would refuse) before anything is saved, and saving
computes the next time as the API does. Actions enable (the next time counted from now) or disable several at once."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join

from agents.errors import InvalidRequest
from agents.models import Schedule
from agents.schedules import services as schedules

RESCHEDULED_BY = {"cron", "timezone", "enabled"}  # an edit of these counts the next time again, from now


class RunOptionsField(forms.JSONField):
    """The run options as a JSON object; an empty box is none."""

    def prepare_value(self, value):
        return "" if value in (None, {}) else super().prepare_value(value)

    def to_python(self, value):
        return super().to_python(value) or {}


class ScheduleForm(forms.ModelForm):
    options = RunOptionsField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80, "placeholder": '{"agent": "support", "max_turns": 4}'}),
        help_text="run options, as POST /api/v1/runs takes them: "
        + ", ".join(schedules.RUN_OPTIONS)
        + "; empty: the defaults",
    )

    class Meta:
        model = Schedule
        fields = ["owner", "name", "cron", "timezone", "input", "options", "enabled"]
        help_texts = {
            "cron": "minute hour day-of-month month day-of-week (e.g. 0 9 * * 1-5), or @hourly, @daily, @weekly, …",
            "timezone": "an IANA time zone, e.g. Europe/Paris: the expression is read there, daylight saving included",
        }

    def clean(self):
        data = super().clean()
        fields = ("cron", "timezone", "input", "options")
        if any(name in self.errors for name in fields):
            return data
        candidate = Schedule(**{name: data.get(name) for name in fields})
        for field, messages in schedules.problems(candidate).items():
            if field in self.fields:
                self.add_error(field, messages)
            else:  # a run option (agent, provider, max_turns, …): it lives in the options box
                self.add_error("options", [f"{field}: {message}" for message in messages])
        return data


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = [
        "label", "owner", "cron", "timezone", "enabled", "next_run", "last_run_at", "last_run_link", "error",
    ]  # fmt: skip
    list_select_related = ["owner"]
    list_filter = ["enabled", ("owner", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["name", "cron", "input", "owner__username"]
    ordering = ["-created_at"]
    readonly_fields = ["next_run", "upcoming", "last_run_at", "last_run_link", "last_error", "created_at", "updated_at"]
    actions = ["enable", "disable"]

    def get_readonly_fields(self, request: HttpRequest, obj=None):
        # A schedule's runs are its owner's: the owner is chosen once, when it is made.
        return [*self.readonly_fields, "owner"] if obj is not None else self.readonly_fields

    def save_model(self, request: HttpRequest, obj: Schedule, form, change: bool) -> None:
        schedules.store(obj, reschedule=not change or bool(RESCHEDULED_BY & set(form.changed_data)))

    def delete_model(self, request: HttpRequest, obj: Schedule) -> None:
        schedules.delete_schedule(schedule=obj)

    @admin.action(description="Enable selected schedules (next time counted from now)", permissions=["change"])
    def enable(self, request: HttpRequest, queryset) -> None:
        changed = schedules.set_enabled(queryset, True)
        self.message_user(request, f"{changed} schedule(s) enabled.")

    @admin.action(description="Disable selected schedules", permissions=["change"])
    def disable(self, request: HttpRequest, queryset) -> None:
        changed = schedules.set_enabled(queryset, False)
        self.message_user(request, f"{changed} schedule(s) disabled.")

    @admin.display(description="schedule", ordering="name")
    def label(self, schedule: Schedule) -> str:
        return str(schedule)

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, schedule: Schedule) -> str:
        """In the schedule's own time zone (the time its expression names)."""
        return _local(schedule.next_run_at, schedule.timezone) if schedule.next_run_at else "—"

    @admin.display(description="next three times")
    def upcoming(self, schedule: Schedule) -> str:
        if not schedule.enabled:
            return "— (disabled)"
        try:
            times = schedules.next_times(schedule.cron, schedule.timezone, timezone.now(), 3)
        except InvalidRequest as exc:
            return str(exc.detail)
        return format_html_join(", ", "{}", ((_local(t, schedule.timezone),) for t in times))

    @admin.display(description="last run")
    def last_run_link(self, schedule: Schedule) -> str:
        if schedule.last_run_id is None:
            return "—"
        url = reverse("admin:agents_run_change", args=[schedule.last_run_id])
        return format_html('<a href="{}">{}</a>', url, str(schedule.last_run_id)[:8])

    @admin.display(description="last error")
    def error(self, schedule: Schedule) -> str:
        text = schedule.last_error
        return text if len(text) <= 120 else text[:119] + "…"


def _local(when, zone_name: str) -> str:
    """`when` as the time it is in the zone, with its offset (`2026-03-29 09:00 +0200`)."""
    try:
        return when.astimezone(schedules.zone(zone_name)).strftime("%Y-%m-%d %H:%M %z")
    except InvalidRequest:
        return when.strftime("%Y-%m-%d %H:%M UTC")
