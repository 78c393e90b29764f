"""The console's view of webhooks: endpoints (never their secrets) and deliveries with every attempt, read-only."""

from __future__ import annotations

import json

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html

from agents.models import Webhook, WebhookAttempt, WebhookDelivery


class NoWrites:
    """Rows written by the service only: they can be looked at (and webhooks deleted), never added or edited."""

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Webhook)
class WebhookAdmin(NoWrites, admin.ModelAdmin):
    list_display = ["short_id", "owner", "url", "event_names", "created_at"]
    list_select_related = ["owner"]
    list_filter = [("owner", admin.RelatedOnlyFieldListFilter), "created_at"]
    search_fields = ["url", "owner__username"]
    fields = ["id", "owner", "url", "event_names", "created_at"]  # never the secret
    readonly_fields = fields

    @admin.display(description="webhook", ordering="id")
    def short_id(self, webhook: Webhook) -> str:
        return str(webhook.id)[:8]

    @admin.display(description="events")
    def event_names(self, webhook: Webhook) -> str:
        return ", ".join(webhook.events)


class AttemptInline(NoWrites, admin.TabularInline):
    model = WebhookAttempt
    fields = ["number", "at", "status_code", "error", "duration_ms"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    ordering = ["number"]


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(NoWrites, admin.ModelAdmin):
    list_display = ["short_id", "event", "status", "attempts", "target", "run_link", "created_at", "next_attempt_at"]
    list_filter = ["status", "event", "created_at"]
    list_select_related = ["webhook"]
    search_fields = ["id", "run_id", "webhook__url"]
    date_hierarchy = "created_at"
    fields = [
        "id", "event", "status", "attempts", "target", "run_link", "created_at", "next_attempt_at", "delivered_at",
        "body",
    ]  # fmt: skip
    readonly_fields = fields
    inlines = [AttemptInline]

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return False  # the record of what was sent: it goes with its webhook

    @admin.display(description="delivery", ordering="id")
    def short_id(self, delivery: WebhookDelivery) -> str:
        return str(delivery.id)[:8]

    @admin.display(description="url", ordering="webhook__url")
    def target(self, delivery: WebhookDelivery) -> str:
        return delivery.webhook.url

    @admin.display(description="run")
    def run_link(self, delivery: WebhookDelivery) -> str:
        if delivery.run_id is None:
            return "—"
        url = reverse("admin:agents_run_change", args=[delivery.run_id])
        return format_html('<a href="{}">{}</a>', url, str(delivery.run_id)[:8])

    @admin.display(description="payload")
    def body(self, delivery: WebhookDelivery) -> str:
        try:
            text = json.dumps(json.loads(delivery.payload), indent=2)
        except ValueError:
            text = delivery.payload
        return format_html('<pre style="white-space: pre-wrap">{}</pre>', text)
