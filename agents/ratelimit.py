"""Rate-limit counters, one round trip per check: a pipelined INCR + EXPIRE in Redis, else one SQL upsert.

Windows are django-ratelimit's (which this replaced), so a client's edges did not move: a window of `period` seconds
whose edge is shifted per client by crc32(value) % period, so clients do not all roll over at the same second.
"""

from __future__ import annotations

import functools
import ipaddress
import math
import re
import time
import zlib
from dataclasses import dataclass

import redis
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, router
from django.db.backends.base.base import BaseDatabaseWrapper
from django.http import HttpRequest

from agents.models import RateCounter

PERIODS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# "30/m", django-ratelimit's multiplier form "10/5m", and DRF's spelled-out units ("30/minute").
_RATE = re.compile(r"(\d+)/(\d*)([smhd])[a-z]*", re.IGNORECASE)
IPV6_MASK = 64  # one IPv6 client usually holds a whole /64: counting per address would let it rotate freely
REDIS_PREFIX = "ratelimit:"


@dataclass(frozen=True)
class Usage:
    """One check's outcome: the count including this hit, the limit, and when the window closes."""

    count: int
    limit: int
    window_end: int  # epoch second at which the window closes and counting starts again
    retry_after: int  # whole seconds until then, at least 1

    @property
    def allowed(self) -> bool:
        """Whether this hit is within the limit."""
        return self.count <= self.limit


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


def window_end(value: str, period: int, now: float) -> int:
    """The epoch second at which the window holding `now` closes for this client (django-ratelimit's edge + 1)."""
    ts = int(now)
    edge = ts - ts % period + zlib.crc32(value.encode()) % period
    if edge < ts:
        edge += period
    # django-ratelimit counted second `edge` into the window ending there: the count restarts one second later.
    return edge + 1


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


def hit(group: str, value: str, rate: str, now: float | None = None) -> Usage:
    """Count one hit by `value` in `group` at `rate`; the counters are Redis's when REDIS_URL is set."""
    limit, period = parse_rate(rate)
    now = time.time() if now is None else now
    end = window_end(value, period, now)
    key = f"{group}:{value}"
    url = settings.REDIS_URL  # read per check, like the rate
    count = _redis_hit(url, key, end, now) if url else _database_hit(key, end)
    return Usage(count=count, limit=limit, window_end=end, retry_after=max(1, math.ceil(end - now)))


@functools.cache
def redis_client(url: str) -> redis.Redis:
    """One client (and connection pool) per Redis URL for the life of the process."""
    return redis.Redis.from_url(url)


def _redis_hit(url: str, key: str, end: int, now: float) -> int:
    """INCR and EXPIRE NX in one pipelined round trip; the window is in the key, so a key never spans two."""
    name = f"{REDIS_PREFIX}{key}:{end}"
    pipe = redis_client(url).pipeline(transaction=False)
    pipe.incr(name)
    # A relative TTL with a second to spare, so a Redis clock behind ours cannot drop a key while its window runs.
    pipe.expire(name, math.ceil(end - now) + 1, nx=True)
    count, _ = pipe.execute()
    return int(count)


def _database_hit(key: str, end: int) -> int:
    """One atomic upsert: a new window starts at 1, the same window adds 1; returns the count."""
    connection = connections[router.db_for_write(RateCounter)]
    with connection.cursor() as cursor:
        cursor.execute(_upsert_sql(connection), [key, end])
        return int(cursor.fetchone()[0])


def _upsert_sql(connection: BaseDatabaseWrapper) -> str:
    """INSERT … ON CONFLICT … RETURNING, valid on PostgreSQL and on SQLite ≥ 3.35."""
    meta = RateCounter._meta
    table = connection.ops.quote_name(meta.db_table)
    key, end, count = (connection.ops.quote_name(meta.get_field(f).column) for f in ("key", "window_end", "count"))
    # SET reads the row as it was, so the CASE compares against the stored window, not the new one.
    return (
        f"INSERT INTO {table} AS t ({key}, {end}, {count}) VALUES (%s, %s, 1) "  # noqa: S608 - our table and columns
        f"ON CONFLICT ({key}) DO UPDATE SET "
        f"{count} = CASE WHEN t.{end} = excluded.{end} THEN t.{count} + 1 ELSE 1 END, {end} = excluded.{end} "
        f"RETURNING {count}"
    )
