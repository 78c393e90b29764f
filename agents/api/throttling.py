"""The agent rate limit, answered the DRF way (429 + Retry-After); django-ratelimit counts (agents.usage.ratelimit)."""

from __future__ import annotations

from django.conf import settings
from rest_framework.request import Request
from rest_framework.throttling import BaseThrottle
from rest_framework.views import APIView

from agents.usage import ratelimit

GROUP = "agents.calls"  # one budget for every route that can cause a model or tool call


class AgentRateThrottle(BaseThrottle):
    """AGENT_RATE_LIMIT per user (per IP when anonymous), shared by all processes through the shared cache."""

    def allow_request(self, request: Request, view: APIView) -> bool:
        """Count a POST against the budget; refuse it once the budget of the current window is spent."""
        self._wait: int | None = None
        # Only POSTs can cause a model or tool call (OPTIONS, say, costs nothing); the setting is read per request,
        # so a settings change applies at once.
        usage = ratelimit.hit(request, group=GROUP, rate=settings.AGENT_RATE_LIMIT, method="POST")
        if usage is None or usage.allowed:
            return True
        self._wait = usage.retry_after
        return False

    def wait(self) -> float | None:
        """Seconds until the window closes (the Retry-After header)."""
        return self._wait
