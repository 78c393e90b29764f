"""URL routes."""

from functools import cache
from pathlib import Path

from django.contrib import admin
from django.contrib.staticfiles import finders
from django.http import HttpResponse, JsonResponse
from django.urls import include, path, re_path
from django.views import defaults
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

from agents.api.exceptions import NOT_FOUND
from agents.api.mcp_server import McpView
from agents.api.views.metrics import metrics_view
from agents.api.views.runs import SeedRunView
from agents.views import playground
from reactsite.serving.errors import API_PREFIXES


@require_safe
def favicon(request):
    """Browsers ask every site for /favicon.ico; the pages also link the SVG (templates/base.html)."""
    return HttpResponse(_favicon(), content_type="image/x-icon", headers={"Cache-Control": "public, max-age=86400"})


@cache
def _favicon() -> bytes:
    return Path(finders.find("agents/favicon.ico")).read_bytes()


@csrf_exempt  # a POST to an unknown address is a 404, not the CSRF page
def api_not_found(request, exception=None):
    """An unknown API address is a JSON 404 like every other API error, with DEBUG on too (Django would answer its
    HTML page); pages keep Django's."""
    if request.path.startswith(API_PREFIXES):
        return JsonResponse({"detail": NOT_FOUND}, status=404)
    return defaults.page_not_found(request, exception)


urlpatterns = [
    path("", playground, name="playground"),
    path("favicon.ico", favicon, name="favicon"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", include("agents.api.urls")),
    path("api/v1/memory/", include("memory.api.urls")),
    re_path(r"^v1/agent/runs/?$", SeedRunView.as_view(), name="seed-run"),
    re_path(r"^mcp/?$", McpView.as_view(), name="mcp"),  # the agents as MCP tools (docs/mcp-server.md)
    re_path(r"^metrics/?$", metrics_view, name="metrics"),  # Prometheus, with AGENT_METRICS (docs/observability.md)
    # Last: whatever no route above matched under the API's prefixes.
    re_path(r"^(?:api|v1)/", api_not_found, name="api-not-found"),
]

handler404 = api_not_found
