"""Routes of API.md under /api/v1/; a trailing slash is optional everywhere."""

from django.urls import re_path
from drf_spectacular.views import SpectacularAPIView, SpectacularJSONAPIView, SpectacularSwaggerView
from rest_framework.routers import SimpleRouter

from agents.api.views.agents import AgentViewSet
from agents.api.views.evals import EvalRunViewSet
from agents.api.views.health import HealthView
from agents.api.views.keys import ApiKeyViewSet
from agents.api.views.prices import PriceViewSet
from agents.api.views.runs import RunViewSet
from agents.api.views.schedules import ScheduleViewSet
from agents.api.views.threads import ThreadViewSet
from agents.api.views.tools import ToolViewSet
from agents.api.views.usage import UsageView
from agents.api.views.webhooks import WebhookViewSet


class OptionalSlashRouter(SimpleRouter):
    """`/runs` and `/runs/` both route (no redirect, so POST bodies survive)."""

    def __init__(self) -> None:
        super().__init__()
        self.trailing_slash = "/?"


router = OptionalSlashRouter()
router.register("agents", AgentViewSet, basename="agent")
router.register("runs", RunViewSet, basename="run")
router.register("threads", ThreadViewSet, basename="thread")
router.register("tools", ToolViewSet, basename="tool")
router.register("evals/runs", EvalRunViewSet, basename="evalrun")
router.register("webhooks", WebhookViewSet, basename="webhook")
router.register("schedules", ScheduleViewSet, basename="schedule")
router.register("keys", ApiKeyViewSet, basename="key")
router.register("prices", PriceViewSet, basename="price")

urlpatterns = [
    re_path(r"^health/?$", HealthView.as_view(), name="health"),
    re_path(r"^usage/?$", UsageView.as_view(), name="usage"),
    re_path(r"^schema/?$", SpectacularAPIView.as_view(), name="schema"),
    re_path(r"^schema\.json/?$", SpectacularJSONAPIView.as_view(), name="schema-json"),  # the same document, as JSON
    re_path(r"^docs/?$", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
    *router.urls,
]
