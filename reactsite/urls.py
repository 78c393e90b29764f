"""URL routes."""

from django.contrib import admin
from django.http import JsonResponse
from django.urls import include, path, re_path
from django.views import defaults

from agents.api.views.runs import SeedRunView
from agents.views import playground

urlpatterns = [
    path("", playground, name="playground"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", include("agents.api.urls")),
    path("api/v1/memory/", include("memory.api.urls")),
    re_path(r"^v1/agent/runs/?$", SeedRunView.as_view(), name="seed-run"),
]


def not_found(request, exception=None):
    """An unknown API address is a JSON 404 like every other API error; pages keep Django's HTML page."""
    if request.path.startswith(("/api/", "/v1/")):
        return JsonResponse({"detail": "Not found."}, status=404)
    return defaults.page_not_found(request, exception)


handler404 = not_found
