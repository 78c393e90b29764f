"""Threads over HTTP: a conversation is a list of runs; create, list, read, delete, and start its next run."""

from __future__ import annotations

from django.db.models import Count, Prefetch
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.response import Response

from agents.api.serializers import (
    ThreadCreateSerializer,
    ThreadDetailSerializer,
    ThreadSerializer,
)
from agents.models import Run
from agents.permissions import visible_threads
from agents.runs import submit


class ThreadViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin, viewsets.GenericViewSet
):
    """Conversations: a run created with `thread_id` sees the thread's earlier runs (docs/api.md#threads)."""

    serializer_class = ThreadSerializer
    lookup_value_converter = "anyuuid"  # any other id matches no route: the API's JSON 404

    def get_queryset(self):
        threads = visible_threads(self.request.user).annotate(run_count=Count("runs")).order_by("-updated_at")
        if self.action == "retrieve":
            runs = Run.objects.order_by("created_at").only(
                "id", "thread_id", "input", "input_parts", "output", "status", "stop_reason", "created_at"
            )
            return threads.prefetch_related(Prefetch("runs", queryset=runs))
        return threads

    def get_serializer_class(self):
        return ThreadDetailSerializer if self.action == "retrieve" else ThreadSerializer

    @extend_schema(request=ThreadCreateSerializer, responses={201: ThreadSerializer})
    def create(self, request):
        body = ThreadCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        thread = submit.create_thread(
            owner=request.user, title=body.validated_data["title"], metadata=body.validated_data["metadata"]
        )
        thread.run_count = 0
        return Response(ThreadSerializer(thread).data, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance) -> None:
        submit.delete_thread(thread=instance, actor=self.request.user)
