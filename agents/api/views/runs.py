"""Runs over HTTP: validate → service → serialize (create, list, read, advance, cancel, events, the seed recipe's
run). Nothing else lives here."""

from __future__ import annotations

import json

from django import forms
from django.db.models import Prefetch
from django.http import StreamingHttpResponse
from django_filters import rest_framework as filters
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from agents.api.authentication import owner_facts
from agents.api.bodies import unknown_fields
from agents.api.events import EventStreamRenderer, Frames, Turn, run_events
from agents.api.parsers import RunBodyParser
from agents.api.serializers import (
    AdvanceSerializer,
    EventsQuerySerializer,
    FeedbackSerializer,
    ForkSerializer,
    RunCreateSerializer,
    RunDetailSerializer,
    RunSerializer,
    ScoreSerializer,
    SeedRunResultSerializer,
    SeedRunSerializer,
)
from agents.api.throttling import AgentRateThrottle
from agents.evals import online
from agents.models import Run, RunMode, RunStatus, Step, StopReason
from agents.permissions import visible_runs
from agents.runs import drive, fork, idempotency, multitask, representation, review, search, submit


class _TrueOrFalse(forms.NullBooleanField):
    def to_python(self, value):
        if value is None:  # not given
            return None
        if value in ("true", "false"):
            return value == "true"
        raise forms.ValidationError("Must be true or false.", code="invalid")


class StrictBooleanFilter(filters.BooleanFilter):
    """`true` or `false` and nothing else (a 400): django-filter's own boolean takes any other word for "not given",
    which the schema's `type: boolean` does not allow."""

    field_class = _TrueOrFalse

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("widget", forms.TextInput)
        super().__init__(*args, **kwargs)


class RunFilter(filters.FilterSet):
    status = filters.ChoiceFilter(choices=RunStatus.choices)
    stop_reason = filters.ChoiceFilter(choices=StopReason.choices)
    mine = StrictBooleanFilter(
        method="filter_mine", help_text="true: only the caller's own runs (a reviewer otherwise sees every run)."
    )

    class Meta:
        model = Run
        fields = ["status", "stop_reason", "mine"]

    def filter_mine(self, queryset, name, value):
        return queryset.filter(owner_id=self.request.user.pk) if value else queryset


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
    lookup_value_converter = "anyuuid"  # any other id matches no route: the API's JSON 404

    def initialize_request(self, request, *args, **kwargs):
        request = super().initialize_request(request, *args, **kwargs)
        if self.action == "create":  # a run's input may carry documents: its own, larger bound (agents/api/parsers.py)
            request.parsers = [RunBodyParser()]
        return request

    def initial(self, request, *args, **kwargs):
        if self.action == "events":  # its turn to read first, before any read (authentication's): see Turn
            self.turn = Turn()
        super().initial(request, *args, **kwargs)

    def finalize_response(self, request, response, *args, **kwargs):
        turn = getattr(self, "turn", None)
        if turn is not None and not isinstance(response, StreamingHttpResponse):  # an error: no stream to set up
            turn.release()
        response = super().finalize_response(request, response, *args, **kwargs)
        if isinstance(response, Response) and isinstance(response.accepted_renderer, EventStreamRenderer):
            # An error of the events route (401, 404, 406): its body is JSON, and its Content-Type says so.
            response.accepted_renderer, response.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        return response

    def get_queryset(self):
        runs = visible_runs(self.request.user).order_by("-created_at").defer("history")  # only the engine reads it
        if self.action == "retrieve":
            return runs.prefetch_related(Prefetch("steps", queryset=Step.objects.order_by("index")), "scores")
        if self.action == "list":  # pending_action of paused runs from one query, not two per run
            paused = Step.objects.filter(run__status=RunStatus.AWAITING_APPROVAL).order_by("index")
            runs = search.from_query(self.request.query_params).apply(runs)  # metadata, words, time (400 if bad)
            return runs.prefetch_related(Prefetch("steps", queryset=paused, to_attr="paused_steps"))
        return runs

    def get_throttles(self):
        return [AgentRateThrottle()] if self.action in {"create", "advance", "fork", "feedback"} else []

    def get_serializer_class(self):
        return RunDetailSerializer if self.action == "retrieve" else RunSerializer

    def perform_destroy(self, instance) -> None:
        submit.delete_run(actor=self.request.user, run=instance)  # another user's: the delete permission, audited

    @extend_schema(
        description="The caller's runs (every run for a reviewer), newest first. Besides the parameters below, "
        "`metadata.<key>=<value>` keeps the runs whose metadata has that key with that value (`?metadata.team=billing`;"
        " `5` also matches the number 5, `true` the boolean); several such parameters: all must match.",
        parameters=[
            OpenApiParameter(
                "q",
                {"type": "string", "pattern": search.Q_PATTERN, "maxLength": search.MAX_Q_CHARS},
                description="Words that must all be in the run's input or output (full-text, English stemming).",
            ),
            OpenApiParameter("created_after", search.MOMENT_SCHEMA, description="Runs created after this moment."),
            OpenApiParameter("created_before", search.MOMENT_SCHEMA, description="Runs created before this moment."),
        ],
    )
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(request=ForkSerializer, responses={201: RunSerializer})
    @action(detail=True, methods=["post"])
    def fork(self, request, pk=None):
        """A new run whose state is this one's after step `from_step` (its steps up to it, copied), with the edits
        given, continued as `mode` says; it carries `forked_from`."""
        run = self.get_object()
        body = ForkSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        overrides = dict(body.validated_data)
        from_step = overrides.pop("from_step")
        new = fork.fork_run(
            run_id=run.pk, actor=request.user, from_step=from_step, overrides=overrides, facts=owner_facts(request)
        )
        return Response(RunSerializer(new).data, status=status.HTTP_201_CREATED)

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
        stopped, nor for a run waiting its turn on its thread (a retry with the same key then reports the run as it
        is by then)."""
        data = RunCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        options = submit.RunOptions(**data.validated_data)
        run = submit.submit_run(owner=request.user, options=options, key_id=key_id, facts=owner_facts(request))
        accepted = run.mode == RunMode.BACKGROUND or run.thread_queued  # queued: a worker or its turn comes later
        code = status.HTTP_202_ACCEPTED if accepted else status.HTTP_201_CREATED
        return Response(RunSerializer(run).data, status=code), run.mode == options.mode and not run.thread_queued

    def _report(self, begun: idempotency.Begun, request) -> Response:
        """A retry of a request whose run exists: the run's final response once it is done, else the run as it is
        now (202: it continues in the background). The body is the first request's (same fingerprint)."""
        assert begun.run is not None  # a report is on the run an earlier request created
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
        multitask.check_its_turn(run)  # 409 while it waits for its thread's earlier runs
        run = review.advance_run(
            run_id=run.pk,
            actor=request.user,
            owner_id=run.owner_id,
            facts=owner_facts(request),
            **body.validated_data,
        )
        return Response(RunSerializer(run).data)

    @extend_schema(parameters=[EventsQuerySerializer], responses={(200, "text/event-stream"): str})
    @action(detail=True, methods=["get"], renderer_classes=[EventStreamRenderer, JSONRenderer])
    def events(self, request, pk=None):
        """`text/event-stream` of the run's steps (replayed, then live), status changes, and a last `done`; between
        them the work in progress (assistant.delta, assistant.retry, tool.started, tool.finished), never stored."""
        run = self.get_object()
        query = EventsQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        after = _step_index(request.headers.get("Last-Event-ID", ""))
        turn = getattr(self, "turn", None) or Turn()
        frames = run_events(run.pk, after, deltas=query.validated_data["deltas"] == "1", turn=turn)
        response = StreamingHttpResponse(Frames(frames, turn), content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
        return response

    @extend_schema(request=FeedbackSerializer, responses={201: ScoreSerializer})
    @action(detail=True, methods=["post"])
    def feedback(self, request, pk=None):
        """A score (0-1) and a comment on a run, by its owner or a reviewer; it shows in the run's `scores` with
        `source` human. Another user's run: 404."""
        run = self.get_object()
        body = FeedbackSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        score = online.add_feedback(run=run, user=request.user, **body.validated_data)
        return Response(representation.score_json(score), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: RunSerializer})
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        run = drive.cancel_run(run_id=self.get_object().pk, actor=request.user)
        return Response(RunSerializer(run).data)


class SeedRunView(APIView):
    """The seed project's one-shot: a sync `tools` run, answered in the seed's shape."""

    throttle_classes = [AgentRateThrottle]
    parser_classes = [RunBodyParser]  # a run's creation: the larger bound (agents/api/parsers.py)

    @extend_schema(request=SeedRunSerializer, responses=SeedRunResultSerializer)
    def post(self, request):
        body = request.data if isinstance(request.data, dict) else {}
        problems = unknown_fields(body, list(SeedRunSerializer().fields))
        if problems:
            raise ValidationError(problems)
        data = RunCreateSerializer(data={**body, "mode": "sync", "protocol": "tools"})
        data.is_valid(raise_exception=True)
        run = submit.submit_run(
            owner=request.user, options=submit.RunOptions(**data.validated_data), facts=owner_facts(request)
        )
        payload = {
            "run_id": str(run.pk),
            "output": run.output,
            "stop_reason": run.stop_reason,
            "turns": run.turns,
            "ok": run.ok,
        }
        return Response(payload)
