"""The price table over HTTP (docs/cost.md, "The price table over HTTP"): every user reads the prices runs are
charged at; staff set and remove the console's prices (ModelPrice), as in the admin. Validate → agents.usage.prices
→ serialize."""

from __future__ import annotations

import re
from decimal import Decimal

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.permissions import SAFE_METHODS, IsAdminUser, IsAuthenticated
from rest_framework.response import Response

from agents.api.bodies import BodySerializer
from agents.api.fields import DecimalText, StrictCharField, StrictChoiceField
from agents.api.inputs import json_type
from agents.models import ModelPrice
from agents.providers import KEY_SETTINGS
from agents.usage import prices

# ModelPrice's columns hold 12 digits, 6 of them decimals: a price is below 1000000.
WHOLE_DIGITS, DECIMAL_PLACES = 6, 6
UNSIGNED = re.compile(r"[0-9]+(\.[0-9]+)?")  # a decimal string as written: no exponent, no spaces
PRICE_INPUT = {
    "oneOf": [
        {"type": "string", "pattern": f"^0*[0-9]{{1,{WHOLE_DIGITS}}}(\\.[0-9]{{1,{DECIMAL_PLACES}}})?$"},
        {"type": "number", "minimum": 0, "maximum": float("9" * WHOLE_DIGITS + "." + "9" * DECIMAL_PLACES)},
    ],
    "description": f'Per million tokens, in AGENT_CURRENCY: a decimal string ("0.15") or a number, at least 0 and '
    f"below 1000000, with at most {DECIMAL_PLACES} decimal places (else 400).",
}


class PriceText(DecimalText):
    """A price as a decimal string without trailing zeros ("0.15")."""

    def to_representation(self, value: Decimal) -> str:
        return prices.price_text(value)


class PriceSerializer(serializers.Serializer):
    id = serializers.IntegerField(
        allow_null=True, help_text="The console's price's id, for DELETE; null for the other tables' prices."
    )
    provider = serializers.CharField()
    model = serializers.CharField(help_text='As a run names it; it may hold "/" (e.g. openai/gpt-4o-mini).')
    input = PriceText(source="price.input", help_text="Per million input tokens, in `currency`.")
    output = PriceText(source="price.output", help_text="Per million output tokens, in `currency`.")
    cached_input = PriceText(
        source="price.cached_input",
        allow_null=True,
        help_text="Per million cached input tokens, in `currency`; null: they cost the `input` price.",
    )
    currency = serializers.SerializerMethodField(help_text="AGENT_CURRENCY (e.g. USD).")
    source = serializers.ChoiceField(
        choices=prices.SOURCES,
        help_text="The table the price comes from, the one that wins: console over settings (AGENT_PRICES) over "
        "repository (agents/usage/prices.json, used only while AGENT_CURRENCY is its currency, USD).",
    )

    def get_currency(self, entry: prices.Entry) -> str:
        return settings.AGENT_CURRENCY


@extend_schema_field(PRICE_INPUT)
class PriceField(serializers.DecimalField):
    """A price as ModelPrice holds it: a decimal string or a JSON number, at least 0 (a negative one, -0 too, is
    refused naming its field), within the column's digits."""

    def __init__(self, **kwargs) -> None:
        super().__init__(max_digits=WHOLE_DIGITS + DECIMAL_PLACES, decimal_places=DECIMAL_PLACES, **kwargs)

    def validate_empty_values(self, data):
        return serializers.Field.validate_empty_values(self, data)  # DecimalField's reads "" as null: it is no price

    def to_internal_value(self, data) -> Decimal:
        if isinstance(data, bool) or not isinstance(data, int | float | str):
            raise serializers.ValidationError(f"Expected a decimal string or a number, got {json_type(data)}.")
        if isinstance(data, str) and not UNSIGNED.fullmatch(data.removeprefix("-")):
            self.fail("invalid")
        value = super().to_internal_value(data)
        if value.is_signed():
            self.fail("min_value", min_value=0)
        return value


@extend_schema_field(
    {
        "type": "string",
        "pattern": f"^({'|'.join(KEY_SETTINGS)})$",
        "description": f"A provider that bills: {', '.join(KEY_SETTINGS)} (the demo is priced only in AGENT_PRICES).",
    }
)
class PricedProviderField(StrictChoiceField):
    """A provider with a price: a pattern in the schema, not an enum, which would share the name `provider` with the
    providers a run may name (a choice set that follows the settings) and rename theirs."""


class PriceSetSerializer(BodySerializer):
    provider = PricedProviderField(choices=list(KEY_SETTINGS))
    model = StrictCharField(max_length=200, help_text="As a run names it (1 to 200 characters).")
    input = PriceField()
    output = PriceField()
    cached_input = PriceField(
        required=False,
        allow_null=True,
        help_text=f"{PRICE_INPUT['description']} Leave it out (or null) for cached input tokens at `input`.",
    )


class PriceViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """The effective price table; the console's prices set and removed by staff (`is_staff`; others 403)."""

    serializer_class = PriceSerializer
    queryset = ModelPrice.objects.all()  # what DELETE finds by id; the list is prices.price_table()
    filter_backends: list = []

    def get_permissions(self):
        return [IsAuthenticated()] if self.request.method in SAFE_METHODS else [IsAdminUser()]

    @extend_schema(
        description="Every provider/model some table prices, at the price its runs are charged, by provider then model."
    )
    def list(self, request):
        page = self.paginate_queryset(prices.price_table())
        return self.get_paginated_response(PriceSerializer(page, many=True).data)

    @extend_schema(
        description="Staff: sets the console's price of provider/model (over AGENT_PRICES and the repository's); "
        "runs use it from their next model call.",
        request=PriceSetSerializer,
        responses={
            200: OpenApiResponse(PriceSerializer, description="Replaced the console's price of that model."),
            201: OpenApiResponse(PriceSerializer, description="Made the console's price of that model."),
        },
    )
    def create(self, request):
        body = PriceSetSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        price = prices.Price(data["input"], data["output"], data.get("cached_input"))
        entry, created = prices.set_price(provider=data["provider"], model=data["model"], price=price)
        return Response(PriceSerializer(entry).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(
        description="Staff: removes the console's price; the model's price is then AGENT_PRICES' or the "
        "repository's, if either has one.",
        responses={204: OpenApiResponse(description="Removed.")},
    )
    def destroy(self, request, pk=None):
        self.get_object().delete()  # post_delete: this process prices its next call without it (agents/apps.py)
        return Response(status=status.HTTP_204_NO_CONTENT)
