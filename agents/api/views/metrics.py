"""GET /metrics: Prometheus metrics in its text format (docs/observability.md, "Metrics").

A plain Django view, outside the REST API (no /api/v1 prefix, no DRF): drf-spectacular documents DRF views only, so it
is not in the OpenAPI document. Off (`AGENT_METRICS`), it is the 404 of any unknown address; with
`AGENT_METRICS_TOKEN`, a scrape without `Authorization: Bearer <that token>` is a 401.
"""

from __future__ import annotations

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.views.decorators.csrf import csrf_exempt

from agents.runs import selectors


@csrf_exempt  # off, a POST is the 404 of an unknown address; on, a 405 (never the CSRF page)
def metrics_view(request: HttpRequest) -> HttpResponse:
    if not settings.AGENT_METRICS:
        raise Http404
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    from reactsite.observability import metrics  # imported only with metrics on

    if not metrics.authorised(request.headers.get("Authorization", ""), settings.AGENT_METRICS_TOKEN):
        response = HttpResponse(metrics.UNAUTHORISED, status=401, content_type="text/plain")
        response["WWW-Authenticate"] = metrics.CHALLENGE
        return response
    body, content_type = metrics.exposition(
        settings.AGENT_METRICS_DIR, selectors.waiting_counts, request.headers.get("Accept", "")
    )
    return HttpResponse(body, content_type=content_type, headers={"Cache-Control": "no-store"})
