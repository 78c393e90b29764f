"""agents.usage.ratelimit: django-ratelimit's protocol over the shared cache, exact across connections, with bounded
state.

The database cache (reactsite.serving.cache.AtomicDatabaseCache) runs on this run's database (SQLite or PostgreSQL)
even when REDIS_URL is set (the test points CACHES at it); Django's Redis cache runs when this run has a REDIS_URL.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
import zlib
from datetime import timedelta
from types import SimpleNamespace
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.cache import cache, caches
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.usage import ratelimit
from reactsite.serving.cache import CAS_TRIES
from tests.api.conftest import create_run
from tests.integration._support import in_threads, window_left

REDIS_URL = os.environ.get("REDIS_URL", "")
needs_redis = pytest.mark.skipif(not REDIS_URL, reason="this run has no REDIS_URL")
DATABASE_CACHE = {"BACKEND": "reactsite.serving.cache.AtomicDatabaseCache", "LOCATION": "reactsite_cache"}
REDIS_CACHE = {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
TABLE = DATABASE_CACHE["LOCATION"]


@pytest.fixture(params=["database", pytest.param("redis", marks=needs_redis)])
def store(request, settings) -> str:
    """Each shared cache in turn as django-ratelimit's: the database's, then Redis when this run has one."""
    settings.CACHES = {"default": DATABASE_CACHE if request.param == "database" else REDIS_CACHE}
    if request.param == "database":
        call_command("createcachetable", verbosity=0)  # a REDIS_URL run's settings created none
    return request.param


@pytest.fixture
def database_cache(settings, db) -> None:
    """The database cache as the default, its table created if this run's settings had none (a REDIS_URL run)."""
    settings.CACHES = {"default": DATABASE_CACHE}
    call_command("createcachetable", verbosity=0)
    cache.clear()  # entries that transactional tests committed are not flushed with the models' tables


@pytest.fixture
def group() -> str:
    """A group of this test's own, so Redis counters of other tests (or runs) never add to ours."""
    return f"test.{uuid.uuid4().hex}"


@pytest.fixture
def clock(monkeypatch) -> SimpleNamespace:
    """The clock django-ratelimit (and agents.usage.ratelimit) read, time.time, stopped at `clock.now` until moved."""
    stopped = SimpleNamespace(now=time.time())
    monkeypatch.setattr(time, "time", lambda: stopped.now)
    return stopped


def hit(group: str, value: str, rate: str, now: float | None = None, clock: SimpleNamespace | None = None):
    """One check by the client `value` (a user pk), at `now` on the stopped clock when given."""
    if now is not None:
        assert clock is not None
        clock.now = now
    request = RequestFactory().post("/")
    request.user = SimpleNamespace(pk=value, is_authenticated=True)
    usage = ratelimit.hit(request, group=group, rate=rate)
    assert usage is not None
    return usage


# --- rates, windows, clients ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rate", "expected"),
    [("30/m", (30, 60)), ("5/h", (5, 3600)), ("100/s", (100, 1)), ("1000/d", (1000, 86400)), ("10/5m", (10, 300))]
    + [("30/minute", (30, 60)), (" 7/H ", (7, 3600))],
)
def test_parse_rate(rate, expected):
    assert ratelimit.parse_rate(rate) == expected


@pytest.mark.parametrize("rate", ["30", "30/", "/m", "30/x", "m/30", "30/0m", "-1/m", "", None])
def test_a_malformed_rate_is_a_configuration_error(rate):
    with pytest.raises(ImproperlyConfigured):
        ratelimit.parse_rate(rate)


def window_end(value: str, period: int, now: float) -> int:
    """Where a client's window closes, by django-ratelimit's formula: its jittered edge, plus the edge second."""
    ts = int(now)
    edge = ts - ts % period + zlib.crc32(value.encode()) % period
    return (edge + period if edge < ts else edge) + 1


@pytest.mark.django_db
def test_the_window_is_django_ratelimits_jittered_window(clock, group):
    # crc32(b"7") % 60 == 6 and 1_700_000_000 % 60 == 20: the edge 1_699_999_986 is past, so it is a period later.
    assert hit(group, "7", "9/m", 1_700_000_000.25, clock).window_end == 1_700_000_046 + 1
    assert hit(group, "7", "9/m", 1_700_000_046.99, clock).window_end == 1_700_000_047  # the edge second is inside
    assert hit(group, "7", "9/m", 1_700_000_047.0, clock).window_end == 1_700_000_047 + 60
    assert hit(group, "8", "9/m", 1_700_000_000.25, clock).window_end != 1_700_000_047  # another client, another edge
    assert window_end("7", 60, 1_700_000_000.25) == 1_700_000_046 + 1  # the tests' formula agrees


@pytest.mark.django_db
def test_the_integration_helper_window_left_agrees(clock, group):
    now = clock.now
    left = window_left(7)
    assert abs((hit(group, "7", "9/m").window_end - 1 - now) - left) < 0.5


def _request(remote_addr: str, user=None):
    request = RequestFactory().post("/", REMOTE_ADDR=remote_addr)
    request.user = user or AnonymousUser()
    return request


def test_clients_are_users_by_pk_else_ip_addresses(alice):
    assert ratelimit.client_value(_request("10.0.0.1", alice)) == str(alice.pk)
    assert ratelimit.client_value(_request("10.0.0.1")) == "10.0.0.1"
    # An IPv6 client is its /64: rotating addresses within it does not buy a new budget.
    assert ratelimit.client_value(_request("2001:db8::1")) == ratelimit.client_value(_request("2001:db8::ffff"))
    assert ratelimit.client_value(_request("2001:db8::1")) == "2001:db8::"
    with pytest.raises(ImproperlyConfigured):
        ratelimit.client_value(_request(""))


# --- counting -----------------------------------------------------------------------------------------------------


def test_a_check_on_the_database_cache_is_its_add_then_an_atomic_incr(database_cache, group):
    """django-ratelimit's protocol, pinned: cache.add, which for the window's first hit looks the key up and runs
    Django's add (count the table, look up, insert), and for later hits only looks it up; then an incr that locks and
    Django's add (count the table, look up, insert), and for later hits only looks it up; then an incr that writes the
    value that look-up read, plus one, if the entry still holds it (no second read, no transaction). Only the cache
    table is touched, and the entry keeps its expiry."""
    expected = [["SELECT", "SELECT", "SELECT", "INSERT"], ["SELECT", "UPDATE"]]
    for count, verbs in enumerate(expected, start=1):
        with CaptureQueriesContext(connection) as captured:
            usage = hit(group, "7", "5/m")
        sql = [q["sql"] for q in captured.captured_queries if not q["sql"].startswith(TRANSACTION_CONTROL)]
        assert usage.count == count
        assert [s.split()[0] for s in sql] == verbs, sql
        assert all(TABLE in s for s in sql), sql
    assert _cache_rows(expiring_within_s=60 + 5 + 1) == 1  # the window's period, plus django-ratelimit's 5 s


TRANSACTION_CONTROL = ("SAVEPOINT", "RELEASE", "ROLLBACK", "BEGIN", "COMMIT")


def _cache_rows(expiring_within_s: float | None = None) -> int:
    """Entries of the cache table (those expiring within `expiring_within_s` from now, when given)."""
    if expiring_within_s is None:
        until = "9999-12-31 00:00:00" if connection.vendor == "sqlite" else "infinity"
    else:
        until = connection.ops.adapt_datetimefield_value(timezone.now() + timedelta(seconds=expiring_within_s))
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {TABLE} WHERE expires <= %s", [until])  # noqa: S608 - our table
        return cursor.fetchone()[0]


@needs_redis
def test_a_check_on_redis_is_set_nx_then_exists_and_incr(settings, group):
    with RoundTrips(REDIS_URL) as relay:
        settings.CACHES = {"default": {**REDIS_CACHE, "LOCATION": relay.url}}
        hit(group, "warm-up", "5/m")  # opens the connection (its handshake is not a check's)
        relay.sends = 0
        assert (hit(group, "7", "5/m").count, relay.sends) == (1, 1)  # SET NX EX: the window's first hit
        assert (hit(group, "7", "5/m").count, relay.sends) == (2, 4)  # SET NX EX refused, then EXISTS and INCR
        (name,) = [k for k in caches["default"]._cache.get_client().scan_iter("*rl:*") if _holds(k, 2)]
        ttl = caches["default"]._cache.get_client().ttl(name)
    assert 1 <= ttl <= 60 + 5, ttl  # the key goes when its window does (django-ratelimit adds 5 s)


def _holds(name: bytes, count: int) -> bool:
    return caches["default"]._cache.get_client().get(name) == str(count).encode()


@pytest.mark.django_db
def test_the_count_restarts_when_the_window_closes(store, group, clock):
    now = clock.now
    end = window_end("7", 60, now)
    assert [hit(group, "7", "3/m").count for _ in range(4)] == [1, 2, 3, 4]
    last = hit(group, "7", "3/m", end - 0.5, clock)
    assert (last.count, last.allowed, last.retry_after) == (5, False, 1)
    fresh = hit(group, "7", "3/m", end, clock)
    assert (fresh.count, fresh.allowed, fresh.window_end) == (1, True, end + 60)
    assert hit(group, "8", "3/m", now, clock).count == 1  # another client has its own count


@pytest.mark.django_db
def test_retry_after_is_the_rest_of_the_window(store, group, clock):
    now = clock.now
    usage = hit(group, "7", "3/h")
    assert usage.window_end == window_end("7", 3600, now)
    assert 1 <= usage.retry_after <= 3600
    assert usage.retry_after - 1 < usage.window_end - now <= usage.retry_after


def test_database_cache_entries_go_when_their_window_does(database_cache, group, clock):
    """One entry per client and window, expiring with it (the prune deletes expired entries: tests/retention)."""
    now = clock.now
    for n in range(3):
        hit(group, "7", "3/m", now + 60 * n, clock)
        hit(group, "7", "3/m", now + 60 * n, clock)
    hit(group, "8", "3/m", now, clock)

    assert _cache_rows() == 4
    assert _cache_rows(expiring_within_s=2 * 60 + 60 + 5 + 1) == 4


def test_concurrent_checks_count_exactly(transactional_db, store, group, clock):
    # The stopped clock is one instant for all: the burst cannot straddle two windows.

    counts = in_threads(40, lambda i: hit(group, "7", "20/m").count)

    assert sorted(counts) == list(range(1, 41)), counts


def test_an_incr_that_lost_a_race_reads_again(database_cache):
    """The value `add` read is only where the increment starts: another process counted since, so the
    compare-and-set changes nothing and the increment reads the entry again."""
    store = caches["default"]
    store.set("n", 1, 3600)
    assert store.add("n", 1, 3600) is False  # live: it read 1
    cache.set("n", 5, 3600)  # another process's increments meanwhile
    with CaptureQueriesContext(connection) as captured:
        assert store.incr("n") == 6
    verbs = [q["sql"].split()[0] for q in captured.captured_queries]
    assert verbs == ["UPDATE", "SELECT", "UPDATE"], verbs


def test_an_incr_that_keeps_losing_takes_the_rows_lock(database_cache, monkeypatch):
    store = caches["default"]
    store.set("n", 3, 3600)
    swaps = []
    monkeypatch.setattr(type(store), "_swapped", lambda self, *args: swaps.append(args) and False)

    assert store.incr("n") == 4

    assert len(swaps) == CAS_TRIES
    assert store.get("n") == 4
    monkeypatch.undo()
    cache.set("gone", 1, -1)
    with pytest.raises(ValueError):
        store.incr("gone")


def test_the_database_caches_incr_is_atomic_and_keeps_the_expiry(transactional_db, database_cache):
    """The property django-ratelimit's E003 asks of a cache: no increment is lost between connections."""
    cache.set("n", 0, 3600)

    in_threads(40, lambda i: caches["default"].incr("n"))

    assert cache.get("n") == 40
    assert _cache_rows(expiring_within_s=3000) == 0  # Django's own incr would have reset it to the default 300 s
    cache.set("gone", 1, -1)
    with pytest.raises(ValueError):
        cache.incr("gone")  # an expired entry is missing, as in cache.get


def test_post_runs_counts_in_the_cache(api, database_cache):
    """On the database cache the check reads and writes the cache table and nothing else of its own."""
    with CaptureQueriesContext(connection) as captured:
        assert create_run(api).status_code == 201
    sql = [query["sql"] for query in captured.captured_queries]
    assert len([s for s in sql if TABLE in s]) == 4, sql  # the window's first hit: look up, count, look up, insert


# --- a relay that counts round trips ------------------------------------------------------------------------------


class RoundTrips:
    """A loopback TCP relay to Redis that counts the client's sends: one per round trip on an open connection."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 6379)
        self._server = socket.create_server(("127.0.0.1", 0))
        port = self._server.getsockname()[1]
        self.url = urlunsplit(parts._replace(netloc=f"127.0.0.1:{port}"))
        self.sends = 0

    def __enter__(self) -> RoundTrips:
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        caches["default"].close()
        self._server.close()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self._server.accept()
                upstream = socket.create_connection(self._upstream, timeout=10)
                threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
                threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, counted: bool) -> None:
        with contextlib.suppress(OSError), source, target:
            while data := source.recv(65536):
                if counted:
                    self.sends += 1  # counted before it is forwarded, so before the reply can arrive
                target.sendall(data)
