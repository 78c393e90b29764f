"""HTTP layer for runs and tools: validate → service → serialize. Nothing else lives here."""

from __future__ import annotations

import json

from django.conf import settings
from django.core.cache import cache
from django.db import connection
from django.db.models import Count, Prefetch
from django.http import StreamingHttpResponse
from django_filters import rest_framework as filters
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from agents import idempotency, runtime, services
from agents.api.events import EventStreamRenderer, run_events
from agents.api.serializers import (
    NulFreeDictField,
    RunCreateSerializer,
    RunDetailSerializer,
    RunSerializer,
    SeedRunResultSerializer,
    SeedRunSerializer,
    StrictBooleanField,
    StrictCharField,
    ThreadCreateSerializer,
    ThreadDetailSerializer,
    ThreadSerializer,
    ToolInvokeSerializer,
    ToolResultSerializer,
    ToolSerializer,
)
from agents.api.throttling import AgentRateThrottle
from agents.models import Run, RunMode, RunStatus, Step, StopReason
from agents.permissions import visible_runs, visible_threads


class RunFilter(filters.FilterSet):
    status = filters.ChoiceFilter(choices=RunStatus.choices)
    stop_reason = filters.ChoiceFilter(choices=StopReason.choices)

    class Meta:
        model = Run
        fields = ["status", "stop_reason"]


class DecisionSerializer(serializers.Serializer):
    call_id = StrictCharField(max_length=200)
    approval = StrictBooleanField()
    arguments = NulFreeDictField(required=False, allow_null=True, default=None)  # stored as jsonb: no NUL
    reason = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=2000, default=None)

    def validate_empty_values(self, data):
        # `decisions` may be null, but not one of its items: DRF hands a list's allow_null to its child too.
        if data is None:
            raise ValidationError(['A decision is an object: {"call_id", "approval", …}, not null.'])
        return super().validate_empty_values(data)


SINGLE_DECISION = ("approval", "arguments", "reason")  # the one-call form of a decision; `decisions` is the batch


class AdvanceSerializer(serializers.Serializer):
    approval = StrictBooleanField(required=False, allow_null=True, default=None)
    arguments = NulFreeDictField(required=False, allow_null=True, default=None)  # stored as jsonb: no NUL
    reason = StrictCharField(required=False, allow_null=True, allow_blank=True, max_length=2000, default=None)
    decisions = DecisionSerializer(
        many=True,
        required=False,
        allow_null=True,
        default=None,
        min_length=1,
        error_messages={"min_length": "Give at least one decision."},
        help_text="Decide several pending calls at once (all or nothing); instead of approval/arguments/reason.",
    )

    def validate(self, data: dict) -> dict:
        sent = self.initial_data if isinstance(self.initial_data, dict) else {}
        mixed = [k for k in SINGLE_DECISION if k in sent] if "decisions" in sent else []
        if mixed:  # the schema says the same (`not` both forms at once), null or not
            raise ValidationError({"decisions": [f"Send decisions or {', '.join(mixed)}, not both."]})
        if data.get("decisions") is not None:
            if not data["decisions"]:
                raise ValidationError({"decisions": ["Give at least one decision."]})
            data["decisions"] = [
                {"call_id": d["call_id"], "approved": d["approval"], "arguments": d["arguments"], "reason": d["reason"]}
                for d in data["decisions"]
            ]
        return data


def _step_index(header: str) -> int:
    """Last-Event-ID as a step index; anything but plain ASCII digits (e.g. "²", "-1", "1e3") replays everything."""
    value = header.strip()
    return int(value) if value.isascii() and value.isdigit() and len(value) < 12 else -1


def _still_processing(exc: idempotency.KeyInProgress) -> Response:
    response = Response({"detail": "A request with this Idempotency-Key is still being processed."}, status=409)
    response["Retry-After"] = str(exc.retry_after)
    return response


def _to_json(data) -> object:
    """Plain JSON values (for storing a response to replay it later)."""
    return json.loads(JSONRenderer().render(data))


class RunViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet):
    serializer_class = RunSerializer
    filterset_class = RunFilter
    lookup_value_regex = "[^/]+"

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        if isinstance(response, Response) and isinstance(response.accepted_renderer, EventStreamRenderer):
            # An error of the events route (401, 404, 406): its body is JSON, and its Content-Type says so.
            response.accepted_renderer, response.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        return response

    def get_queryset(self):
        runs = visible_runs(self.request.user).order_by("-created_at").defer("history")  # only the engine reads it
        if self.action == "retrieve":
            return runs.prefetch_related(Prefetch("steps", queryset=Step.objects.order_by("index")))
        if self.action == "list":  # pending_action of paused runs from one query, not two per run
            paused = Step.objects.filter(run__status=RunStatus.AWAITING_APPROVAL).order_by("index")
            return runs.prefetch_related(Prefetch("steps", queryset=paused, to_attr="paused_steps"))
        return runs

    def get_object(self):
        try:
            return super().get_object()
        except (ValidationError, ValueError):
            raise NotFound() from None

    def get_throttles(self):
        return [AgentRateThrottle()] if self.action in {"create", "advance"} else []

    def get_serializer_class(self):
        return RunDetailSerializer if self.action == "retrieve" else RunSerializer

    @extend_schema(request=RunCreateSerializer, responses={201: RunSerializer, 202: RunSerializer})
    def create(self, request):
        key = request.headers.get("Idempotency-Key")
        if key is None:
            return self._create(request)[0]
        if not 1 <= len(key) <= idempotency.MAX_KEY_LENGTH or "\x00" in key:
            raise ValidationError({"detail": "The Idempotency-Key header must have 1 to 255 characters."})
        try:
            begun = idempotency.begin(request.user, key, request.data)
        except idempotency.KeyMismatch:
            return Response({"detail": "This Idempotency-Key was used with a different body."}, status=422)
        except idempotency.KeyInProgress as exc:
            return _still_processing(exc)
        if begun.status is not None:
            return Response(begun.response, status=begun.status)
        if begun.run is not None:  # the first request created this run, then failed or was stopped
            return self._report(begun, request)
        try:
            response, final = self._create(request, key_id=begun.record.pk)
        except idempotency.KeyInProgress as exc:  # taken over by a retry while this request was starting
            return _still_processing(exc)
        except BaseException:
            idempotency.abandon(begun.record)  # only while no run exists: a run, once created, keeps its key
            raise
        if not 200 <= response.status_code < 300:
            idempotency.abandon(begun.record)
        elif final:
            idempotency.finish(begun.record, response.status_code, _to_json(response.data))
        return response

    def _create(self, request, key_id: int | None = None) -> tuple[Response, bool]:
        """The response, and whether it is final: not for a sync run handed to the background as its process
        stopped (a retry with the same key then reports the run as it is by then)."""
        data = RunCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        options = services.RunOptions(**data.validated_data)
        run = services.submit_run(owner=request.user, options=options, key_id=key_id)
        code = status.HTTP_202_ACCEPTED if run.mode == RunMode.BACKGROUND else status.HTTP_201_CREATED
        return Response(RunSerializer(run).data, status=code), run.mode == options.mode

    def _report(self, begun: idempotency.Begun, request) -> Response:
        """A retry of a request whose run exists: the run's final response once it is done, else the run as it is
        now (202: it continues in the background). The body is the first request's (same fingerprint)."""
        run = Run.objects.get(pk=begun.run.pk)
        background = isinstance(request.data, dict) and request.data.get("mode") == RunMode.BACKGROUND
        if run.status != RunStatus.DONE:
            return Response(RunSerializer(run).data, status=status.HTTP_202_ACCEPTED)
        code = status.HTTP_202_ACCEPTED if background else status.HTTP_201_CREATED
        data = RunSerializer(run).data
        idempotency.finish(begun.record, code, _to_json(data))
        return Response(data, status=code)

    @extend_schema(request=AdvanceSerializer, responses={200: RunSerializer})
    @action(detail=True, methods=["post"])
    def advance(self, request, pk=None):
        run = self.get_object()
        body = AdvanceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        run = services.advance_run(run_id=run.pk, actor=request.user, owner_id=run.owner_id, **body.validated_data)
        return Response(RunSerializer(run).data)

    @extend_schema(responses={(200, "text/event-stream"): str})
    @action(detail=True, methods=["get"], renderer_classes=[EventStreamRenderer, JSONRenderer])
    def events(self, request, pk=None):
        """`text/event-stream` of the run's steps (replayed, then live), status changes, and a last `done`."""
        run = self.get_object()
        after = _step_index(request.headers.get("Last-Event-ID", ""))
        response = StreamingHttpResponse(run_events(run.pk, after), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
        return response

    @extend_schema(request=None, responses={200: RunSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        run = services.cancel_run(run_id=self.get_object().pk, actor=request.user)
        return Response(RunSerializer(run).data)


class ThreadViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet
):
    """Conversations: a run created with `thread_id` sees the thread's earlier runs (API.md v1.1, "Threads")."""

    serializer_class = ThreadSerializer
    lookup_value_regex = "[^/]+"

    def get_queryset(self):
        threads = visible_threads(self.request.user).annotate(run_count=Count("runs")).order_by("-updated_at")
        if self.action == "retrieve":
            runs = Run.objects.order_by("created_at").only(
                "id", "thread_id", "input", "output", "status", "stop_reason", "created_at"
            )
            return threads.prefetch_related(Prefetch("runs", queryset=runs))
        return threads

    def get_object(self):
        try:
            return super().get_object()
        except (ValidationError, ValueError):  # not a UUID: no such thread
            raise NotFound() from None

    def get_serializer_class(self):
        return ThreadDetailSerializer if self.action == "retrieve" else ThreadSerializer

    @extend_schema(request=ThreadCreateSerializer, responses={201: ThreadSerializer})
    def create(self, request):
        body = ThreadCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        thread = services.create_thread(owner=request.user, title=body.validated_data["title"])
        thread.run_count = 0
        return Response(ThreadSerializer(thread).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance) -> None:
        services.delete_thread(thread=instance)


class ToolViewSet(viewsets.ViewSet):
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def get_throttles(self):
        return [AgentRateThrottle()] if self.action == "invoke" else []

    @extend_schema(responses=ToolSerializer(many=True))
    def list(self, request):
        floor = set(runtime.sensitive_floor())
        registry = runtime.tool_registry()
        tools = [registry.get(n) for n in registry.names()]
        return Response([t.describe(sensitive=t.name in floor or t.sensitive) for t in tools])

    @extend_schema(request=ToolInvokeSerializer, responses=ToolResultSerializer)
    @action(detail=True, methods=["post"])
    def invoke(self, request, name=None):
        arguments = request.data.get("arguments", {}) if isinstance(request.data, dict) else None
        result = services.invoke_tool(actor=request.user, name=name, arguments=arguments)
        return Response({"name": name, "output": result.output, "is_error": result.is_error})


class SeedRunView(APIView):
    """The seed project's one-shot: a sync `tools` run, answered in the seed's shape."""

    throttle_classes = [AgentRateThrottle]

    @extend_schema(request=SeedRunSerializer, responses=SeedRunResultSerializer)
    def post(self, request):
        body = request.data if isinstance(request.data, dict) else {}
        allowed = {k: body[k] for k in ("input", "max_turns", "timeout_s") if k in body}
        data = RunCreateSerializer(data={**allowed, "mode": "sync", "protocol": "tools"})
        data.is_valid(raise_exception=True)
        run = services.submit_run(owner=request.user, options=services.RunOptions(**data.validated_data))
        payload = {
            "run_id": str(run.pk),
            "output": run.output,
            "stop_reason": run.stop_reason,
            "turns": run.turns,
            "ok": run.ok,
        }
        return Response(payload)


class HealthView(APIView):
    """Liveness and readiness: the database and the shared cache answer."""

    authentication_classes: list = []
    permission_classes = [AllowAny]

    @extend_schema(responses={200: dict, 503: dict})
    def get(self, request):
        parts = {"database": _check_database(), "cache": _check_cache()}
        healthy = all(v == "ok" for v in parts.values())
        body = {"status": "ok" if healthy else "error", **parts}
        body |= {"default_provider": settings.AGENT_DEFAULT_PROVIDER, "version": settings.VERSION}
        return Response(body, status=200 if healthy else 503)


HEALTH_DB_TIMEOUT_S = 3.0  # the pool's own wait (DB_POOL_TIMEOUT_S, 10 s) would keep a probe hanging


def _check_database() -> str:
    """Whether the database answers now. With the psycopg pool: a checked connection from the pool within
    HEALTH_DB_TIMEOUT_S (the database unreachable, or every connection busy, is an error, not a hang). Without it:
    Django's connection, checked before use and reopened if its session is gone (connect_timeout bounds a connect)."""
    try:
        pool = getattr(connection, "pool", None)
        if pool is not None and connection.connection is None:
            pool.open()  # as Django does before its first getconn
            conn = pool.getconn(timeout=HEALTH_DB_TIMEOUT_S)
            try:
                conn.execute("SELECT 1")
            finally:
                pool.putconn(conn)  # a broken one is dropped by the pool, not kept
        else:
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
        return "ok"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"error: {type(exc).__name__}"


def _check_cache() -> str:
    try:
        cache.set("health:ping", "pong", 10)
        return "ok" if cache.get("health:ping") == "pong" else "error: read back failed"
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        return f"error: {type(exc).__name__}"
