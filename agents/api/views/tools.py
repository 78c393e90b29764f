"""Tools over HTTP: the registry as the caller may use it, and invoking one tool directly."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from agents.api.bodies import unknown_fields
from agents.api.serializers import (
    ToolInvokeSerializer,
    ToolResultSerializer,
    ToolSerializer,
)
from agents.api.throttling import AgentRateThrottle
from agents.runs import runtime, submit


class ToolViewSet(viewsets.ViewSet):
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def get_throttles(self):
        return [AgentRateThrottle()] if self.action == "invoke" else []

    @extend_schema(responses=ToolSerializer(many=True))
    def list(self, request):
        floor = set(runtime.sensitive_floor())
        registry = runtime.tool_registry()
        tools = [t for n in registry.names() if (t := registry.get(n)) is not None]
        return Response([t.describe(sensitive=runtime.is_sensitive(t, floor)) for t in tools])

    @extend_schema(request=ToolInvokeSerializer, responses=ToolResultSerializer)
    @action(detail=True, methods=["post"])
    def invoke(self, request, name=None):
        if isinstance(request.data, dict) and (problems := unknown_fields(request.data, ["arguments"])):
            raise ValidationError(problems)
        arguments = request.data.get("arguments", {}) if isinstance(request.data, dict) else None
        result = submit.invoke_tool(actor=request.user, name=name, arguments=arguments)
        return Response({"name": name, "output": result.output, "is_error": result.is_error})
