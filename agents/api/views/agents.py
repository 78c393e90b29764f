"""`GET /api/v1/agents[/{name}]`: the named configurations runs can start from (read-only; staff edit them in the
admin). API.md v1.1, "Agents: named configurations"."""

from __future__ import annotations

from rest_framework import mixins, serializers, viewsets
from rest_framework.exceptions import NotFound

from agents.models import Agent


class AgentSerializer(serializers.ModelSerializer):
    provider = serializers.SerializerMethodField()
    model = serializers.SerializerMethodField()
    protocol = serializers.SerializerMethodField()

    class Meta:
        model = Agent
        fields = [
            "name", "description", "instructions", "provider", "model", "protocol", "tools", "sensitive_tools",
            "agents", "max_turns", "timeout_s", "temperature", "max_output_tokens", "output_schema",
            "max_total_tokens", "max_tool_calls", "tool_limits", "guardrails", "fallback_models", "created_at",
            "updated_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_provider(self, agent: Agent) -> str | None:
        return agent.provider or None

    def get_model(self, agent: Agent) -> str | None:
        return agent.model or None

    def get_protocol(self, agent: Agent) -> str | None:
        return agent.protocol or None


class AgentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Every authenticated user may read them: they name what a run can start from, not anyone's data."""

    serializer_class = AgentSerializer
    queryset = Agent.objects.order_by("name")
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def get_object(self):
        if "\x00" in self.kwargs.get(self.lookup_field, ""):  # PostgreSQL text cannot hold one: no such agent
            raise NotFound()
        return super().get_object()
