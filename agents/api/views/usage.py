"""`GET /api/v1/usage`: the caller's tokens and spend today (UTC) and their daily quotas (docs/api.md#usage;
docs/cost.md)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.api.fields import DecimalText
from agents.usage import quotas


class UsageSerializer(serializers.Serializer):
    day = serializers.DateField(help_text="Today, UTC.")
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    quota = serializers.IntegerField(allow_null=True, help_text="Tokens per UTC day; null: no quota.")
    remaining = serializers.IntegerField(allow_null=True, help_text="null: no quota.")
    cost = DecimalText(help_text='What today\'s model calls cost, in `currency`; "0" when none had a price.')
    cost_quota = DecimalText(allow_null=True, help_text="Spend per UTC day, in `currency`; null: no spend quota.")
    cost_remaining = DecimalText(allow_null=True, help_text="null: no spend quota.")
    currency = serializers.CharField(help_text="The currency of `cost` (AGENT_CURRENCY, e.g. USD).")


class UsageView(APIView):
    @extend_schema(responses=UsageSerializer)
    def get(self, request):
        return Response(quotas.usage_report(request.user))
