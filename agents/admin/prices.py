"""The console's model prices (docs/cost.md): staff set a model's price per million tokens here, over the repository's
table and AGENT_PRICES; runs use it within seconds (agents/usage/prices.py)."""

from __future__ import annotations

from decimal import Decimal

from django import forms
from django.conf import settings
from django.contrib import admin

from agents.models import ModelPrice
from agents.providers import KEY_SETTINGS

PRICE_FIELDS = ("input", "cached_input", "output")


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    """Prices per model; a negative price is refused on its field."""

    list_display = ["provider", "model", "input", "cached_input", "output", "updated_at"]
    list_filter = ["provider"]
    search_fields = ["model"]
    fields = ["provider", "model", "input", "cached_input", "output"]
    ordering = ["provider", "model"]

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name == "provider":  # the providers that bill (they need a key): the offline demo costs nothing
            return forms.ChoiceField(choices=[(name, name) for name in KEY_SETTINGS], label="Provider")
        if db_field.name in PRICE_FIELDS:
            kwargs["min_value"] = Decimal(0)
        field = super().formfield_for_dbfield(db_field, request, **kwargs)
        if db_field.name in PRICE_FIELDS:
            field.help_text = f"{db_field.help_text.capitalize()}, in {settings.AGENT_CURRENCY}."
        return field
