"""Evals over HTTP (staff only): start an eval run, list them, read one with its results."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import IsAdminUser
from rest_framework.response import Response

from agents.api.throttling import AgentRateThrottle
from agents.evals.cases import CaseError, load_cases
from agents.evals.runner import EvalConfig, plan, run_evals
from agents.models import EvalResult, EvalRun, RunProtocol


class EvalResultSerializer(serializers.ModelSerializer):
    class Meta:
        model = EvalResult
        fields = ["case_id", "protocol", "run", "passed", "reason", "output", "turns", "latency_ms", "tokens"]


class EvalRunSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = EvalRun
        fields = [
            "id", "created_by", "created_at", "finished_at", "provider", "model", "protocol", "max_reflections",
            "only", "total", "passed", "pass_rate", "mean_turns", "p50_latency_ms", "p95_latency_ms", "tokens",
        ]  # fmt: skip


class EvalRunDetailSerializer(EvalRunSerializer):
    results = EvalResultSerializer(many=True, read_only=True)

    class Meta(EvalRunSerializer.Meta):
        fields = [*EvalRunSerializer.Meta.fields, "results"]


class EvalStartSerializer(serializers.Serializer):
    provider = serializers.CharField(max_length=32, required=False)
    model = serializers.CharField(max_length=200, required=False)
    protocol = serializers.ChoiceField(choices=RunProtocol.choices, required=False)
    only = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    max_reflections = serializers.IntegerField(min_value=0, max_value=5, default=0)
    concurrency = serializers.IntegerField(min_value=1, max_value=4, default=1)


class EvalRunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Staff only. Starting one runs the repo's cases synchronously and answers with the results."""

    permission_classes = [IsAdminUser]
    queryset = EvalRun.objects.select_related("created_by").order_by("-created_at")

    def get_serializer_class(self):
        return EvalRunDetailSerializer if self.action in {"retrieve", "create"} else EvalRunSerializer

    def get_queryset(self):
        queryset = super().get_queryset()
        return queryset.prefetch_related("results") if self.action == "retrieve" else queryset

    def get_throttles(self):
        return [AgentRateThrottle()] if self.action == "create" else []

    @extend_schema(request=EvalStartSerializer, responses={201: EvalRunDetailSerializer})
    def create(self, request):
        body = EvalStartSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            cases = load_cases(None, data["only"] or None)
        except CaseError as exc:
            raise ValidationError({"detail": str(exc)}) from None
        config = EvalConfig(
            provider=data.get("provider") or settings.AGENT_DEFAULT_PROVIDER,
            model=data.get("model"),
            protocol=data.get("protocol"),
            max_reflections=data["max_reflections"],
            concurrency=data["concurrency"],
            cases_file="agents/evals/cases.yaml",
            only=data["only"],
        )
        if not plan(cases, config.protocol):
            raise ValidationError({"only": ["No case matches."]})
        eval_run = run_evals(cases=cases, config=config, created_by=request.user)
        return Response(EvalRunDetailSerializer(eval_run).data, status=status.HTTP_201_CREATED)
