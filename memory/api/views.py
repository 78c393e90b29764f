"""Memory API: the authenticated user's own facts, nothing else."""

from __future__ import annotations

import json
import re

from django.http import StreamingHttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.exceptions import APIException, NotFound, ValidationError
from rest_framework.renderers import BaseRenderer, JSONRenderer
from rest_framework.response import Response

from agents.api.bodies import BodySerializer
from agents.api.fields import StrictCharField
from agents.api.pagination import Pagination
from agents.api.schema import NON_BLANK
from memory import services
from memory.models import MAX_FACT_CHARS, Fact

MAX_QUERY = 500
QUERY_SCHEMA = {"type": "string", "maxLength": MAX_QUERY}
_DIGITS = re.compile(r"[0-9]+")
EDIT_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string", "minLength": 1, "maxLength": MAX_FACT_CHARS, "pattern": NON_BLANK}},
    "required": ["text"],
    "additionalProperties": False,  # FactCreateSerializer's: another field is a 400 naming it
}


class FactSerializer(serializers.ModelSerializer):
    class Meta:
        model = Fact
        fields = ["id", "text", "created_at"]
        read_only_fields = fields


class RankedFactSerializer(FactSerializer):
    """A fact found for `q`: how it matched."""

    similarity = serializers.FloatField(
        allow_null=True, read_only=True, help_text="Cosine similarity of meaning to q (null in text mode)."
    )
    words = serializers.ListField(
        child=serializers.CharField(), read_only=True, help_text="The words of q that the fact contains."
    )

    class Meta(FactSerializer.Meta):
        fields = [*FactSerializer.Meta.fields, "similarity", "words"]
        read_only_fields = fields


RANKED_ONLY = ("similarity", "words")


class FactCreateSerializer(BodySerializer):
    """The body of `POST /facts` and `PATCH /facts/{id}`: its own shape, so the schema's input rules stay off the
    stored fact."""

    text = StrictCharField(max_length=MAX_FACT_CHARS)


class JSONLinesRenderer(BaseRenderer):
    """`?format=jsonl`: one JSON object per line (the export streams its own lines; errors are JSON)."""

    media_type = "application/x-ndjson"
    format = "jsonl"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return (json.dumps(data, ensure_ascii=False) + "\n").encode()


class Conflict(APIException):
    status_code = status.HTTP_409_CONFLICT
    default_code = "conflict"


class _RankedPage(list):
    """A slice of ranked results that knows the total (for the paginator's count)."""

    def __init__(self, user, query: str, mode: str) -> None:
        super().__init__()
        self.ranked = services.Ranked(user, query, mode)

    def count(self) -> int:  # type: ignore[override]  # called by LimitOffsetPagination, not list.count
        return self.ranked.count()

    def __getitem__(self, item):
        if isinstance(item, slice):
            return self.ranked.page(limit=item.stop - item.start, offset=item.start)
        raise TypeError("ranked results are read in pages")

    def __len__(self) -> int:
        return self.count()


class FactViewSet(viewsets.GenericViewSet):
    serializer_class = FactSerializer
    renderer_classes = [JSONRenderer, JSONLinesRenderer]
    pagination_class = Pagination
    lookup_value_regex = "[^/]+"  # any id routes here, so a malformed one is this API's JSON 404, not Django's page

    def perform_content_negotiation(self, request, force=False):
        """A `format` other than json or jsonl is a 400 that names it (DRF would answer 404)."""
        wanted = request.query_params.get("format")
        if not force and wanted is not None and wanted not in ("json", "jsonl"):
            raise ValidationError({"format": ["format must be json or jsonl."]})
        return super().perform_content_negotiation(request, force)

    def handle_exception(self, exc):
        """Errors are JSON, `format=jsonl` or not (the export's lines are the only JSON Lines answer)."""
        response = super().handle_exception(exc)
        self.request.accepted_renderer, self.request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        return response

    def get_queryset(self):
        if getattr(self, "swagger_fake_view", False):  # schema generation has no user
            return Fact.objects.none()
        return Fact.objects.filter(owner=self.request.user).order_by("-created_at", "-id")

    @extend_schema(
        parameters=[
            OpenApiParameter("q", QUERY_SCHEMA, description="rank by relevance to this text (1 to 500 characters)"),
            OpenApiParameter(
                "mode",
                {"type": "string", "enum": list(services.MODES)},
                description="how `q` ranks: text (words), semantic (meaning), hybrid (both fused; the default once "
                "the server has a vector index, otherwise text)",
            ),
            OpenApiParameter(
                "format",
                {"type": "string", "enum": ["json", "jsonl"]},
                description="jsonl: every fact (with q, every fact q ranks) as one JSON object per line "
                "(application/x-ndjson), not paginated",
            ),
        ],
        responses={
            (200, "application/json"): RankedFactSerializer(many=True),
            (200, "application/x-ndjson"): OpenApiTypes.STR,
        },
    )
    def list(self, request):
        params = request.query_params
        query = params.get("q")
        if query is not None and not query.strip():
            raise ValidationError({"q": ["q needs some text (leave it out to list the facts newest first)."]})
        if query is not None and len(query) > MAX_QUERY:
            raise ValidationError({"q": [f"Ensure this parameter has no more than {MAX_QUERY} characters."]})
        mode = params.get("mode")
        if mode is not None or query is not None:  # a plain list needs no look at the vector index
            try:
                mode = services.check_mode(mode)
            except services.MemoryError_ as exc:
                raise ValidationError({"mode": [str(exc)]}) from None
        if request.accepted_renderer.format == "jsonl":
            self.paginator.get_limit(request)  # checked as for a page (a bad one is a 400), though the export is whole
            self.paginator.get_offset(request)
            response = self._export(request.user, query, mode)
        elif query is None:
            page = self.paginate_queryset(self.get_queryset())
            response = self.get_paginated_response(FactSerializer(page, many=True).data)
        else:
            page = self.paginate_queryset(_RankedPage(request.user, query, mode))
            response = self.get_paginated_response(RankedFactSerializer(page, many=True).data)
        if query is not None:
            response["X-Recall-Mode"] = mode  # the mode used: text where vectors were asked of a server without them
        return response

    def _export(self, user, query: str | None, mode: str) -> StreamingHttpResponse:
        """Every fact of the caller, newest first, or with `q` every fact it ranks, best first: one JSON object per
        line, in the JSON answers' shapes."""
        when = serializers.DateTimeField()  # the same form as the JSON answers

        def lines():
            if query is not None:
                ranked = services.Ranked(user, query, mode)
                for fact in ranked.page(limit=max(ranked.count(), 1)):
                    yield json.dumps(RankedFactSerializer(fact).data, ensure_ascii=False) + "\n"
                return
            facts = self.get_queryset().values_list("id", "text", "created_at")
            for fact_id, text, created_at in facts.iterator(chunk_size=1000):
                row = {"id": fact_id, "text": text, "created_at": when.to_representation(created_at)}
                yield json.dumps(row, ensure_ascii=False) + "\n"

        response = StreamingHttpResponse(lines(), content_type="application/x-ndjson; charset=utf-8")
        response["Content-Disposition"] = 'attachment; filename="facts.jsonl"'
        return response

    @extend_schema(request=FactCreateSerializer, responses={201: FactSerializer})
    def create(self, request):
        body = FactCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            fact, _ = services.remember(request.user, body.validated_data["text"])
        except services.MemoryError_ as exc:
            raise ValidationError({"text": [str(exc)]}) from None
        return Response(FactSerializer(fact).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        parameters=[OpenApiParameter("id", int, OpenApiParameter.PATH)],
        # the fact's one field is required here too (a PATCH component would make it optional)
        request={"application/json": EDIT_SCHEMA},
        responses={200: FactSerializer, 409: OpenApiResponse(description="another of your facts has this text")},
    )
    def partial_update(self, request, pk=None):
        if not _DIGITS.fullmatch(pk):
            raise NotFound()
        body = FactCreateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            fact = services.edit(request.user, int(pk), body.validated_data["text"])
        except Fact.DoesNotExist:
            raise NotFound() from None
        except services.Conflict as exc:
            raise Conflict(str(exc)) from None
        except services.MemoryError_ as exc:
            raise ValidationError({"text": [str(exc)]}) from None
        return Response(FactSerializer(fact).data)

    @extend_schema(parameters=[OpenApiParameter("id", int, OpenApiParameter.PATH)])
    def destroy(self, request, pk=None):
        if not _DIGITS.fullmatch(pk):
            raise NotFound()
        get_object_or_404(self.get_queryset(), pk=pk).delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


def schema_postprocess(result, generator, request, public):
    """drf-spectacular hook: a fact's PATCH needs its body (`text` is its one field, and required); the list's facts
    carry `similarity` and `words` only when ranked by `q` (a plain list, `mode` alone included, has neither)."""
    ranked = result.get("components", {}).get("schemas", {}).get("RankedFact")
    if ranked is not None:
        ranked["required"] = [name for name in ranked.get("required", []) if name not in RANKED_ONLY]
        for name in RANKED_ONLY:
            ranked["properties"][name]["description"] += " Present only when the list is ranked by `q`."
    for path, item in result.get("paths", {}).items():
        if path.startswith("/api/v1/memory/facts/{id}") and "patch" in item:
            body = item["patch"].get("requestBody")
            if body is not None:
                body["required"] = True
    return result
