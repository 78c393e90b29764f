"""`GET /api/v1/usage`: the caller's tokens today (UTC) and their daily quota (API.md v1.1, "Quotas and usage")."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.limits import quotas


class UsageSerializer(serializers.Serializer):
    day = serializers.DateField(help_text="Today, UTC.")
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    quota = serializers.IntegerField(allow_null=True, help_text="Tokens per UTC day; null: no quota.")
    remaining = serializers.IntegerField(allow_null=True, help_text="null: no quota.")


class UsageView(APIView):
    @extend_schema(responses=UsageSerializer)
    def get(self, request):
        return Response(quotas.usage_report(request.user))
