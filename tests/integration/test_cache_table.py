"""The database cache's table cannot be forgotten (issue 47, item 3): `migrate` creates it, and a server whose table
is missing all the same answers a JSON 503 naming the step, with health saying the same, on SQLite and PostgreSQL
(with REDIS_URL too: the test points CACHES at the database cache). No HTML under /api/."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.db import connection
from django.http import HttpResponse
from django.test import Client
from django.urls import path

from agents.models import Run
from tests.api.conftest import ARITHMETIC, HEALTH, RUNS
from tests.conftest import client_for

TABLE = "reactsite_cache"
DATABASE_CACHE = {"BACKEND": "reactsite.serving.cache.AtomicDatabaseCache", "LOCATION": TABLE}


def _tables() -> set[str]:
    return set(connection.introspection.table_names())


def _drop() -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {connection.ops.quote_name(TABLE)}")
    assert TABLE not in _tables()


@pytest.fixture
def database_cache(settings, transactional_db):
    """The database cache as the default; its table made again after the test, whatever the test did to it."""
    settings.CACHES = {"default": DATABASE_CACHE}
    yield
    call_command("createcachetable", verbosity=0)
    cache.clear()


def test_migrate_creates_the_cache_table(database_cache):
    _drop()
    call_command("migrate", "--noinput", verbosity=0)
    assert TABLE in _tables()
    cache.set("k", "v", 30)
    assert cache.get("k") == "v"


def test_migrate_with_redis_as_the_cache_creates_no_table(settings, transactional_db):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    _drop()
    call_command("migrate", "--noinput", verbosity=0)
    assert TABLE not in _tables()
    call_command("createcachetable", verbosity=0)  # nothing to make: the cache is not the database
    assert TABLE not in _tables()
    settings.CACHES = {"default": DATABASE_CACHE}
    call_command("createcachetable", verbosity=0)  # as the other tests expect it


def test_a_missing_cache_table_is_a_json_503_naming_the_step_and_nothing_is_stored(database_cache, alice):
    _drop()
    api = client_for(alice)
    api.raise_request_exception = False
    response = api.post(RUNS, {"input": ARITHMETIC}, format="json")
    assert response.status_code == 503, response.content[:300]
    assert response["Content-Type"].startswith("application/json")
    detail = response.json()["detail"]
    assert TABLE in detail and "createcachetable" in detail and "migrate" in detail
    assert not Run.objects.exists()
    health = api.get(HEALTH)
    assert health.status_code == 503
    assert health.json()["database"] == "ok"
    assert TABLE in health.json()["cache"] and "createcachetable" in health.json()["cache"]
    call_command("migrate", "--noinput", verbosity=0)  # the fix the message names
    assert api.get(HEALTH).status_code == 200
    assert api.post(RUNS, {"input": ARITHMETIC}, format="json").status_code == 201


def _reads_the_cache(request):
    return HttpResponse(str(cache.get("anything")))


urlpatterns = [path("api/v1/plain-view", _reads_the_cache)]


@pytest.mark.parametrize("debug", [False, True])
def test_an_uncaught_cache_table_error_outside_drf_is_a_json_503(database_cache, settings, debug):
    """A plain Django view (no DRF exception handler) whose cache read fails: the middleware names the step too."""
    settings.ROOT_URLCONF, settings.DEBUG = __name__, debug
    _drop()
    response = Client(raise_request_exception=False).get("/api/v1/plain-view", HTTP_ACCEPT="text/html")
    assert response.status_code == 503
    assert response["Content-Type"] == "application/json"
    assert TABLE in response.json()["detail"] and "createcachetable" in response.json()["detail"]
