"""Routes of the HTTP API under /api/v1/ (docs/api.md#conventions); a trailing slash is optional everywhere."""

from django.urls import re_path, register_converter
from django.urls.converters import UUIDConverter, get_converters
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


class AnyUUIDConverter(UUIDConverter):
    """An id in any spelling Python's `uuid.UUID` reads (upper or lower case, with or without hyphens or braces), as
    the API has always taken; Django's own `uuid` converter takes only the lower-case, hyphenated one."""

    regex = r"\{?[0-9a-fA-F]{8}(?:-?[0-9a-fA-F]{4}){3}-?[0-9a-fA-F]{12}\}?"

    def to_python(self, value: str) -> str:
        return value


register_converter(AnyUUIDConverter, "anyuuid")


class OptionalSlashRouter(SimpleRouter):
    """`/runs` and `/runs/` both route (no redirect, so POST bodies survive).

    A viewset's `lookup_value_converter` names the Django path converter its ids match (`"anyuuid"`), so an id of any
    other shape matches no route and gets the API's JSON 404 (reactsite/urls.py) before a view runs. DRF reads that
    attribute only for `path()` routes, which cannot make the slash optional, so this router keeps regex routes and
    matches the lookup with the converter's own regex.
    """

    def __init__(self) -> None:
        super().__init__()
        self.trailing_slash = "/?"

    def get_lookup_regex(self, viewset: type, lookup_prefix: str = "") -> str:
        converter = getattr(viewset, "lookup_value_converter", None)
        if converter is None:
            return str(super().get_lookup_regex(viewset, lookup_prefix))
        kwarg = getattr(viewset, "lookup_url_kwarg", None) or getattr(viewset, "lookup_field", "pk")
        return f"(?P<{lookup_prefix}{kwarg}>{get_converters()[converter].regex})"


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
