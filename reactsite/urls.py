"""URL routes."""

from django.contrib import admin
from django.urls import include, path, re_path

from agents.api.views import SeedRunView
from agents.views import playground

urlpatterns = [
    path("", playground, name="playground"),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("api/v1/", include("agents.api.urls")),
    path("api/v1/memory/", include("memory.api.urls")),
    re_path(r"^v1/agent/runs/?$", SeedRunView.as_view(), name="seed-run"),
]
