"""Evals over HTTP (staff only): start an eval run (queued for a worker), list them, read one with its results."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.exceptions import ValidationError
from rest_framework.permissions import IsAdminUser
from rest_framework.response import Response

from agents.api.bodies import BodySerializer
from agents.api.fields import StrictCharField, bounds
from agents.api.throttling import AgentRateThrottle
from agents.evals import runner
from agents.evals.cases import CaseError, load_cases
from agents.models import EvalResult, EvalRun, RunProtocol
from agents.tasks import run_eval
from agents.usage.prices import cost_text

CASES_FILE = "agents/evals/cases.yaml"  # as stored on the eval run; the worker reads it from the project's root


class CheckOutcomeSerializer(serializers.Serializer):
    type = serializers.CharField()
    passed = serializers.BooleanField()
    score = serializers.FloatField()
    reason = serializers.CharField()
    weight = serializers.FloatField()
    error = serializers.BooleanField(required=False, help_text="Present (true) when the check could not be made.")


@extend_schema_field({"type": "string", "nullable": True, "example": "0.000123"})
class CostField(serializers.Field):
    """A cost in billionths (`cost_nanos`) as the API writes costs: a decimal string in AGENT_CURRENCY."""

    def __init__(self, **kwargs) -> None:
        super().__init__(source="*", read_only=True, **kwargs)

    def to_representation(self, value) -> str | None:
        return cost_text(value.cost_nanos)


class EvalResultSerializer(serializers.ModelSerializer):
    checks = CheckOutcomeSerializer(many=True, read_only=True)
    cost = CostField(help_text="What the case's runs and judges cost (a decimal string in AGENT_CURRENCY).")

    class Meta:
        model = EvalResult
        fields = [
            "case_id", "protocol", "attempt", "run", "passed", "score", "checks", "reason", "output", "turns",
            "latency_ms", "tokens", "cost",
        ]  # fmt: skip


class EvalRunSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    cost = CostField(help_text="What the eval run's cases cost (a decimal string in AGENT_CURRENCY).")

    class Meta:
        model = EvalRun
        fields = [
            "id", "created_by", "created_at", "finished_at", "provider", "model", "protocol", "max_reflections",
            "only", "cases_sha256", "repeat", "baseline", "total", "passed", "pass_rate", "score", "mean_turns",
            "p50_latency_ms", "p95_latency_ms", "tokens", "cost", "gate",
        ]  # fmt: skip


class EvalRunDetailSerializer(EvalRunSerializer):
    results = EvalResultSerializer(many=True, read_only=True)

    class Meta(EvalRunSerializer.Meta):
        fields = [*EvalRunSerializer.Meta.fields, "results"]


class EvalStartSerializer(BodySerializer):
    # Not blank (the schema says minLength 1 and a non-blank pattern): leave a field out for the default.
    provider = StrictCharField(max_length=32, required=False, help_text="Default: AGENT_DEFAULT_PROVIDER.")
    model = StrictCharField(max_length=200, required=False, help_text="Default: the provider's default model.")
    protocol = serializers.ChoiceField(choices=RunProtocol.choices, required=False)
    only = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    max_reflections = serializers.IntegerField(**bounds("max_reflections"), default=0)
    concurrency = serializers.IntegerField(min_value=1, max_value=4, default=1)
    repeat = serializers.IntegerField(min_value=1, max_value=10, default=1, help_text="Attempts of each case.")


class EvalRunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Staff only. Starting one checks the body, the cases `only` selects, provider, model and the cases' tools (400,
    nothing stored), stores the eval run and queues its cases for a background worker (`manage.py run_worker`):
    202 with the eval run (`finished_at` null, no results yet) and its address in `Location`. Poll that address: the
    results appear case by case, and `finished_at` is set once all ran (or the run failed: then it has the results
    stored until then). One whose worker died mid-way stays unfinished: start another
    (agents.evals.runner.run_queued)."""

    permission_classes = [IsAdminUser]
    queryset = EvalRun.objects.select_related("created_by").order_by("-created_at")

    def get_serializer_class(self):
        return EvalRunDetailSerializer if self.action in {"retrieve", "create"} else EvalRunSerializer

    def get_queryset(self):
        queryset = super().get_queryset()
        return queryset.prefetch_related("results") if self.action == "retrieve" else queryset

    def get_throttles(self):
        return [AgentRateThrottle()] if self.action == "create" else []

    @extend_schema(
        request=EvalStartSerializer,
        responses={
            202: OpenApiResponse(
                EvalRunDetailSerializer,
                description="Queued for a background worker: `finished_at` null, no results yet. "
                "GET the `Location` until `finished_at` is set.",
            )
        },
        parameters=[
            OpenApiParameter(
                "Location",
                str,
                OpenApiParameter.HEADER,
                required=True,
                response=[202],
                description="The eval run's address: `/api/v1/evals/runs/{id}`.",
            )
        ],
    )
    def create(self, request):
        body = EvalStartSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            cases = load_cases(None, data["only"] or None)
        except CaseError as exc:
            raise ValidationError({"detail": str(exc)}) from None
        config = runner.EvalConfig(
            provider=data.get("provider") or settings.AGENT_DEFAULT_PROVIDER,
            model=data.get("model"),
            protocol=data.get("protocol"),
            max_reflections=data["max_reflections"],
            concurrency=data["concurrency"],
            cases_file=CASES_FILE,
            only=data["only"],
            repeat=data["repeat"],
        )
        if not runner.plan(cases, config.protocol):
            raise ValidationError({"only": ["No case matches."]})
        with transaction.atomic():  # the eval run and its task commit together (a bad provider, model or tool: 400)
            eval_run = runner.start_eval_run(cases=cases, config=config, created_by=request.user)
            # By name: a task's args[0] is read as the id of a run it drives (agents.runs.leases).
            run_eval.enqueue(eval_run_id=eval_run.pk, concurrency=config.concurrency)
        location = reverse("evalrun-detail", args=[eval_run.pk])
        return Response(
            EvalRunDetailSerializer(eval_run).data, status=status.HTTP_202_ACCEPTED, headers={"Location": location}
        )
