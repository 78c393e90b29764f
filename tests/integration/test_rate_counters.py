"""agents.ratelimit: one round trip per check (one SQL statement, or one Redis pipeline), exact, with bounded state.

The database store runs on this run's database (SQLite or PostgreSQL) even when REDIS_URL is set (the test clears it);
the Redis store runs when this run has a REDIS_URL.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from django.contrib.auth.models import AnonymousUser
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext

from agents import ratelimit
from agents.models import RateCounter
from tests.api.conftest import create_run
from tests.integration._support import in_threads, window_left

REDIS_URL = os.environ.get("REDIS_URL", "")
needs_redis = pytest.mark.skipif(not REDIS_URL, reason="this run has no REDIS_URL")
TABLE = RateCounter._meta.db_table


@pytest.fixture(params=["database", pytest.param("redis", marks=needs_redis)])
def store(request, settings) -> str:
    """Each counter store in turn: the table (REDIS_URL cleared), then Redis when this run has one."""
    settings.REDIS_URL = REDIS_URL if request.param == "redis" else ""
    return request.param


@pytest.fixture
def group() -> str:
    """A group of this test's own, so Redis counters of other tests (or runs) never add to ours."""
    return f"test.{uuid.uuid4().hex}"


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


def test_the_window_is_django_ratelimits_jittered_window():
    # crc32(b"7") % 60 == 6 and 1_700_000_000 % 60 == 20: the edge 1_699_999_986 is past, so it is a period later.
    assert ratelimit.window_end("7", 60, 1_700_000_000.25) == 1_700_000_046 + 1
    assert ratelimit.window_end("7", 60, 1_700_000_046.99) == 1_700_000_047  # the edge second is still inside
    assert ratelimit.window_end("7", 60, 1_700_000_047.0) == 1_700_000_047 + 60
    assert ratelimit.window_end("8", 60, 1_700_000_000.25) != 1_700_000_047  # another client, another edge


def test_the_integration_helper_window_left_agrees():
    now = time.time()
    left = window_left(7)
    assert abs((ratelimit.window_end("7", 60, now) - 1 - now) - left) < 0.5


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


@pytest.mark.django_db
def test_a_check_on_the_database_is_one_statement(settings, group, django_assert_num_queries):
    settings.REDIS_URL = ""
    for expected in (1, 2):
        with django_assert_num_queries(1) as captured:
            usage = ratelimit.hit(group, "7", "5/m")
        assert usage.count == expected
        assert "ON CONFLICT" in captured.captured_queries[0]["sql"]


@needs_redis
def test_a_check_on_redis_is_one_round_trip(settings, group):
    with RoundTrips(REDIS_URL) as relay:
        settings.REDIS_URL = relay.url
        ratelimit.hit(group, "warm-up", "5/m")  # opens the connection (its handshake is not a check's)
        relay.sends = 0
        usage = ratelimit.hit(group, "7", "5/m")
        assert (relay.sends, usage.count) == (1, 1)
        assert (ratelimit.hit(group, "7", "5/m").count, relay.sends) == (2, 2)
    ttl = ratelimit.redis_client(REDIS_URL).ttl(f"{ratelimit.REDIS_PREFIX}{group}:7:{usage.window_end}")
    assert 1 <= ttl <= 61, ttl  # the key goes when its window does


@pytest.mark.django_db
def test_the_count_restarts_when_the_window_closes(store, group):
    now = time.time()
    end = ratelimit.window_end("7", 60, now)
    assert [ratelimit.hit(group, "7", "3/m", now).count for _ in range(4)] == [1, 2, 3, 4]
    last = ratelimit.hit(group, "7", "3/m", end - 0.5)
    assert (last.count, last.allowed, last.retry_after) == (5, False, 1)
    fresh = ratelimit.hit(group, "7", "3/m", end)
    assert (fresh.count, fresh.allowed, fresh.window_end) == (1, True, end + 60)
    assert ratelimit.hit(group, "8", "3/m", now).count == 1  # another client has its own count


@pytest.mark.django_db
def test_retry_after_is_the_rest_of_the_window(store, group):
    now = time.time()
    usage = ratelimit.hit(group, "7", "3/h", now)
    assert usage.window_end == ratelimit.window_end("7", 3600, now)
    assert 1 <= usage.retry_after <= 3600
    assert usage.retry_after - 1 < usage.window_end - now <= usage.retry_after


@pytest.mark.django_db
def test_database_rows_stay_one_per_client(settings, group):
    settings.REDIS_URL = ""
    now = time.time()
    for n in range(10):
        ratelimit.hit(group, "7", "3/m", now + 60 * n)
        ratelimit.hit(group, "7", "3/m", now + 60 * n)
    ratelimit.hit(group, "7", "3/h", now + 600)  # another rate: still the same row
    ratelimit.hit(group, "8", "3/m", now)

    rows = RateCounter.objects.filter(key__startswith=group + ":")
    assert sorted(rows.values_list("key", "count")) == [(f"{group}:7", 1), (f"{group}:8", 1)]


def test_concurrent_checks_count_exactly(store, group, transactional_db):
    now = time.time()  # one instant for all: the burst cannot straddle two windows

    counts = in_threads(40, lambda i: ratelimit.hit(group, "7", "20/m", now).count)

    assert sorted(counts) == list(range(1, 41)), counts


def test_post_runs_does_not_touch_the_cache(api, settings):
    """On the default store the check is one statement on its own table; the cache table is not read or written."""
    settings.REDIS_URL = ""
    with CaptureQueriesContext(connection) as captured:
        assert create_run(api).status_code == 201
    sql = [query["sql"] for query in captured.captured_queries]
    assert not [s for s in sql if "reactsite_cache" in s]
    assert len([s for s in sql if TABLE in s]) == 1, sql


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
        ratelimit.redis_client(self.url).close()
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
