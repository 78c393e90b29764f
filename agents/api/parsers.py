"""A request body's bound, per route: a run's creation takes AGENT_MAX_RUN_BODY_BYTES (its input may carry documents
and images, docs/documents.md), every other route DATA_UPLOAD_MAX_MEMORY_SIZE. Larger is `413` JSON either way
(agents/api/exceptions.py), before the body is read.

Django bounds a body it reads by DATA_UPLOAD_MAX_MEMORY_SIZE alone (`HttpRequest.body`), and DRF's JSONParser goes
through that. The run-creating views parse JSON with `RunBodyParser` instead, which reads the stream itself within
the larger bound; every other view keeps DRF's JSONParser and Django's bound.
"""

from __future__ import annotations

import io

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from rest_framework.parsers import BaseParser, JSONParser


class BodyTooLarge(RequestDataTooBig):
    """A body over its route's bound (`limit` bytes)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"Request body exceeded {limit} bytes.")
        self.limit = limit


def run_body_limit() -> int:
    """The bound of a run-creating body (a setting: read per request)."""
    return int(settings.AGENT_MAX_RUN_BODY_BYTES)


class RunBodyParser(BaseParser):
    """JSON, within `run_body_limit()`: a declared length over it is refused before a byte is read, and the read
    stops one byte past it (a body longer than it said)."""

    media_type = "application/json"

    def parse(self, stream, media_type=None, parser_context=None):
        limit = run_body_limit()
        request = (parser_context or {}).get("request")
        meta = getattr(request, "META", {}) if request is not None else {}
        declared = meta.get("CONTENT_LENGTH") or meta.get("HTTP_CONTENT_LENGTH") or "0"
        if str(declared).isdigit() and int(declared) > limit:
            raise BodyTooLarge(limit)
        body = stream.read(limit + 1) if stream is not None else b""
        if len(body) > limit:
            raise BodyTooLarge(limit)
        return JSONParser().parse(io.BytesIO(body), media_type, parser_context)
