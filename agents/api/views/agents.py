"""`GET /api/v1/agents[/{name}]`: the named configurations runs can start from (read-only; staff edit them in the
admin). See docs/api.md#agents."""

from __future__ import annotations

from rest_framework import mixins, serializers, viewsets

from agents.models import Agent
from agents.runconfig.options import AGENT_OPTIONS


class AgentSerializer(serializers.ModelSerializer):
    provider = serializers.SerializerMethodField()
    model = serializers.SerializerMethodField()
    protocol = serializers.SerializerMethodField()

    class Meta:
        model = Agent
        fields = ["name", "description", *AGENT_OPTIONS, "created_at", "updated_at"]
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
    lookup_value_regex = r"[^/\x00]+"  # a NUL, which PostgreSQL text cannot hold, matches no route: the API's 404
