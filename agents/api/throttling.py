"""The agent rate limit: django-ratelimit counters in the shared cache, answered the DRF way (429 + Retry-After)."""

from __future__ import annotations

from django.conf import settings
from django_ratelimit.core import get_usage
from rest_framework.throttling import BaseThrottle

GROUP = "agents.calls"  # one budget for every route that can cause a model or tool call


def _rate(group, request) -> str:
    return settings.AGENT_RATE_LIMIT  # read per request, so a settings change applies at once


class AgentRateThrottle(BaseThrottle):
    """AGENT_RATE_LIMIT per user (per IP when anonymous), shared by all processes through the cache."""

    def allow_request(self, request, view) -> bool:
        usage = get_usage(request, group=GROUP, key="user_or_ip", rate=_rate, method="POST", increment=True)
        self._wait = None
        if usage is None or not usage["should_limit"]:
            return True
        self._wait = max(1, int(usage["time_left"]))
        return False

    def wait(self) -> float | None:
        return self._wait
