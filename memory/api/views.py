"""Memory API: the authenticated user's own facts, nothing else."""

from __future__ import annotations

import re

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response

from agents.api.pagination import Pagination
from agents.api.serializers import StrictCharField
from memory import services
from memory.models import MAX_FACT_CHARS, Fact

MAX_QUERY = 500
QUERY_SCHEMA = {"type": "string", "maxLength": MAX_QUERY}
_DIGITS = re.compile(r"[0-9]+")


class FactSerializer(serializers.ModelSerializer):
    class Meta:
        model = Fact
        fields = ["id", "text", "created_at"]
        read_only_fields = fields


class FactCreateSerializer(serializers.Serializer):
    """The body of `POST /facts`: its own shape, so the schema's input rules stay off the stored fact."""

    text = StrictCharField(max_length=MAX_FACT_CHARS)


class _RankedPage(list):
    """A slice of ranked results that knows the total (for the paginator's count)."""

    def __init__(self, user, query: str) -> None:
        super().__init__()
        self.user, self.query = user, query

    def count(self) -> int:  # called by LimitOffsetPagination
        return services.count_matches(self.user, self.query)

    def __getitem__(self, item):
        if isinstance(item, slice):
            return services.recall(self.user, self.query, limit=item.stop - item.start, offset=item.start)
        raise TypeError("ranked results are read in pages")

    def __len__(self) -> int:
        return self.count()


class FactViewSet(viewsets.GenericViewSet):
    serializer_class = FactSerializer
    pagination_class = Pagination
    lookup_value_regex = "[^/]+"  # any id routes here, so a malformed one is this API's JSON 404, not Django's page

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return Fact.objects.none()
        return Fact.objects.filter(owner=self.request.user).order_by("-created_at", "-id")

    @extend_schema(parameters=[OpenApiParameter("q", QUERY_SCHEMA, description="rank by relevance to this text")])
    def list(self, request):
        query = request.query_params.get("q", "")
        if len(query) > MAX_QUERY:
            raise ValidationError({"q": [f"Ensure this parameter has no more than {MAX_QUERY} characters."]})
        source = _RankedPage(request.user, query) if query.strip() else self.get_queryset()
        page = self.paginate_queryset(source)
        return self.get_paginated_response(FactSerializer(page, many=True).data)

    @extend_schema(request=FactCreateSerializer, responses={201: FactSerializer})
    def create(self, request):
        body = FactCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            fact, _ = services.remember(request.user, body.validated_data["text"])
        except services.MemoryError_ as exc:
            raise ValidationError({"text": [str(exc)]}) from None
        return Response(FactSerializer(fact).data, status=status.HTTP_201_CREATED)

    @extend_schema(parameters=[OpenApiParameter("id", int, OpenApiParameter.PATH)])
    def destroy(self, request, pk=None):
        if not _DIGITS.fullmatch(pk):
            raise NotFound()
        get_object_or_404(self.get_queryset(), pk=pk).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)
