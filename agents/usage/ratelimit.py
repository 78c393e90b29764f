"""Rate limits declared and checked with django-ratelimit, counted in the shared cache (RATELIMIT_USE_CACHE).

A client is the user's pk when authenticated, else its IP address (an IPv6 address by its /64). Windows are
django-ratelimit's: `period` seconds whose edge is shifted per client by crc32(value) % period, so clients do not all
roll over at the same second; the edge second still counts into the closing window. Counts are exact only on a cache
whose `incr` is atomic across processes: Redis's, or reactsite.serving.cache.AtomicDatabaseCache (the embedded default).
"""

from __future__ import annotations

import ipaddress
import math
import re
import time
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest
from django_ratelimit import ALL
from django_ratelimit.core import get_usage

PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# "30/m", django-ratelimit's multiplier form "10/5m", and DRF's spelled-out units ("30/minute").
_RATE = re.compile(r"(\d+)/(\d*)([smhd])[a-z]*", re.IGNORECASE)
IPV6_MASK = 64  # one IPv6 client usually holds a whole /64: counting per address would let it rotate freely


@dataclass(frozen=True)
class Usage:
    """One check's outcome: the count including this hit, the limit, and when the window closes."""

    count: int
    limit: int
    window_end: int  # epoch second at which the window closes and counting starts again
    retry_after: int  # whole seconds until then, at least 1
    allowed: bool  # False past the limit, and when the cache could not count (django-ratelimit fails closed)


def parse_rate(rate: str) -> tuple[int, int]:
    """(limit, period in seconds) of a rate such as "30/m", "5/h", "100/s", "1000/d" or "10/5m"."""
    match = _RATE.fullmatch(rate.strip()) if isinstance(rate, str) else None
    if match is None:
        raise ImproperlyConfigured(f"Rate {rate!r} is not of the form N/s, N/m, N/h, N/d (or N/Xm).")
    limit, multiplier, unit = match.groups()
    period = int(multiplier or 1) * PERIODS[unit.lower()]
    if period <= 0:
        raise ImproperlyConfigured(f"Rate {rate!r} has an empty period.")
    return int(limit), period


def client_value(request: HttpRequest) -> str:
    """The user's pk when authenticated, else the client's IP address (an IPv6 address by its /64)."""
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return str(user.pk)
    ip = request.META.get("REMOTE_ADDR") or ""
    try:
        mask = IPV6_MASK if ":" in ip else 32
        return str(ipaddress.ip_network(f"{ip}/{mask}", strict=False).network_address)
    except ValueError as exc:
        raise ImproperlyConfigured(f"REMOTE_ADDR {ip!r} is not an IP address (a proxy on a Unix socket?).") from exc


def client_key(group: str, request: HttpRequest) -> str:
    """django-ratelimit's `key=` callable: the request's client (client_value)."""
    return client_value(request)


def hit(request: HttpRequest, *, group: str, rate: str, method: str | list[str] = ALL) -> Usage | None:
    """Count one hit by the request's client in `group` at `rate`; None when not counted (another method, or
    RATELIMIT_ENABLE off)."""
    limit, period = parse_rate(rate)  # stricter than django-ratelimit, which reads "30/x" as 30 per second
    now = time.time()
    usage = get_usage(request, group=group, key=client_key, rate=f"{limit}/{period}s", method=method, increment=True)
    if usage is None:
        return None
    # time_left runs to the window's edge second, which still counts into the window: it closes a second later.
    end = int(now) + usage["time_left"] + 1
    return Usage(
        count=usage["count"],
        limit=usage["limit"],
        window_end=end,
        retry_after=max(1, math.ceil(end - now)),
        allowed=not usage["should_limit"],
    )
