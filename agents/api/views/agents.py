"""Agents over HTTP (docs/agents.md): anyone signed in reads them; staff (or a staff user's API key with scope
`agents`) create, change, delete and restore them. Every change is a new immutable version (agents.catalog).
validate → agents.catalog.services → serialize."""

from __future__ import annotations

from django.core.validators import RegexValidator
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.response import Response

from agents.api.bodies import BodySerializer
from agents.api.fields import StrictCharField, option_field
from agents.catalog import services as catalog
from agents.models import Agent, AgentVersion
from agents.runconfig.options import AGENT_OPTIONS, BY_NAME

NAME_PATTERN = r"^[-a-zA-Z0-9_]+$"


class AgentSerializer(serializers.ModelSerializer):
    provider = serializers.SerializerMethodField()
    model = serializers.SerializerMethodField()
    protocol = serializers.SerializerMethodField()
    history = serializers.SerializerMethodField()
    version = serializers.IntegerField(read_only=True, help_text="Its current version (each change makes one).")

    class Meta:
        model = Agent
        fields = ["name", "description", *AGENT_OPTIONS, "evaluators", "version", "created_at", "updated_at"]
        read_only_fields = fields

    def get_provider(self, agent: Agent) -> str | None:
        return agent.provider or None

    def get_model(self, agent: Agent) -> str | None:
        return agent.model or None

    def get_protocol(self, agent: Agent) -> str | None:
        return agent.protocol or None

    def get_history(self, agent: Agent) -> str | None:
        return agent.history or None


def _nullable(name: str) -> serializers.Field:
    """An option's field as an agent body takes it: the run body's type and bounds, optional, null for "unset"."""
    field = option_field(BY_NAME[name], help=False)
    field.required, field.allow_null, field.default = False, True, serializers.empty
    if isinstance(field, serializers.CharField):
        field.allow_blank = True
    return field


class AgentChangeSerializer(BodySerializer):
    """An agent's fields as a create or a change gives them; each option as the run body bounds it (null: unset)."""

    description = StrictCharField(max_length=500, required=False, allow_blank=True, allow_null=True)
    evaluators = serializers.ListField(
        child=serializers.DictField(), required=False, allow_null=True, max_length=20,
        help_text='Online evaluators: [{"name", "check", "sample"}] (docs/evals.md#scores-on-production-runs).',
    )  # fmt: skip

    def get_fields(self) -> dict:
        fields = super().get_fields()
        return {**fields, **{name: _nullable(name) for name in AGENT_OPTIONS}}


class AgentCreateSerializer(AgentChangeSerializer):
    name = StrictCharField(
        max_length=64,
        validators=[RegexValidator(NAME_PATTERN, "Letters, digits, - and _ only.")],
        help_text="How runs name it: letters, digits, - and _.",
    )

    def get_fields(self) -> dict:
        fields = super().get_fields()
        return {"name": fields.pop("name"), **fields}


class AgentVersionSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    config = serializers.DictField(read_only=True, help_text="Its description, options and evaluators then.")

    class Meta:
        model = AgentVersion
        fields = ["version", "created_at", "created_by", "config", "restored_from"]
        read_only_fields = fields


class CanWriteAgents(BasePermission):
    """Reading: anyone signed in. Writing: staff (a key also needs the scope `agents`: ApiKeyScopes)."""

    message = "Only staff may create, change, delete or restore agents."

    def has_permission(self, request, view) -> bool:
        if request.method in SAFE_METHODS:
            return bool(request.user and request.user.is_authenticated)
        return bool(request.user and request.user.is_staff)


class AgentViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    """Every authenticated user may read them: they name what a run can start from, not anyone's data."""

    serializer_class = AgentSerializer
    queryset = Agent.objects.order_by("name")
    lookup_field = "name"
    lookup_value_regex = r"[^/\x00]+"  # a NUL, which PostgreSQL text cannot hold, matches no route: the API's 404
    permission_classes = [CanWriteAgents]

    @extend_schema(request=AgentCreateSerializer, responses={201: AgentSerializer})
    def create(self, request):
        body = AgentCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        agent = catalog.create(body.validated_data, request.user)
        return Response(AgentSerializer(agent).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=AgentChangeSerializer, responses={200: AgentSerializer})
    def partial_update(self, request, name: str):
        self.get_object()  # 404 first
        body = AgentChangeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        agent = catalog.update(name, body.validated_data, request.user)
        return Response(AgentSerializer(agent).data)

    def destroy(self, request, name: str):
        self.get_object()
        catalog.delete(name, request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(responses={200: AgentVersionSerializer(many=True)})
    @action(detail=True, methods=["get"], url_path="versions", url_name="versions", pagination_class=None)
    def versions(self, request, name: str):
        """Its versions, newest first."""
        return Response(AgentVersionSerializer(catalog.versions(name), many=True).data)

    @extend_schema(request=None, responses={201: AgentVersionSerializer})
    @action(detail=True, methods=["post"], url_path=r"versions/(?P<n>[0-9]{1,9})/restore", url_name="restore")
    def restore(self, request, name: str, n: str):
        """A new version equal to version `n`."""
        version = catalog.restore(name, int(n), request.user)
        return Response(AgentVersionSerializer(version).data, status=status.HTTP_201_CREATED)
