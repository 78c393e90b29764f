"""AGENT_RATE_LIMIT: one per-user budget over every route that can cause a model or tool call."""

from __future__ import annotations

import time

import pytest

from tests.api.conftest import ARITHMETIC, RUNS, SEED, TOOLS, create_run, run_count, run_url
from tests.conftest import client_for
from tests.integration._support import window_left

pytestmark = pytest.mark.django_db


def _assert_429(response, max_wait: int = 3600) -> None:
    assert response.status_code == 429, response.status_code
    retry_after = response.headers.get("Retry-After")
    assert retry_after is not None and retry_after.isdigit(), retry_after
    assert 1 <= int(retry_after) <= max_wait
    assert "detail" in response.json()


def _in_one_window(user, margin: float = 5.0) -> None:
    """Wait for the next per-minute window if the user's closes within `margin` s (a burst must not straddle two)."""
    left = window_left(user.pk)
    if left < margin:
        time.sleep(left + 1.05)  # the edge second still counts into the old window


def _invoke(client):
    return client.post(f"{TOOLS}/calculator/invoke", {"arguments": {"expression": "1+1"}}, format="json")


def test_fourth_post_runs_is_429_with_retry_after(api, alice, settings):
    settings.AGENT_RATE_LIMIT = "3/m"
    _in_one_window(alice)
    for _ in range(3):
        assert create_run(api).status_code == 201
    _assert_429(create_run(api), max_wait=60)
    assert run_count() == 3


def test_limit_is_per_user(api, bob, settings):
    settings.AGENT_RATE_LIMIT = "3/h"
    for _ in range(3):
        assert create_run(api).status_code == 201
    _assert_429(create_run(api))
    assert create_run(client_for(bob)).status_code == 201


def test_budget_is_shared_by_advance_invoke_and_seed(api, settings):
    settings.AGENT_RATE_LIMIT = "3/h"
    run_id = create_run(api, mode="step").json()["id"]
    assert api.post(run_url(run_id, "advance"), {}, format="json").status_code == 200
    assert _invoke(api).status_code == 200
    _assert_429(api.post(SEED, {"input": ARITHMETIC}, format="json"))
    _assert_429(api.post(run_url(run_id, "advance"), {}, format="json"))
    _assert_429(_invoke(api))
    _assert_429(create_run(api))
    assert run_count() == 1


@pytest.mark.parametrize("route", ["runs", "advance", "invoke", "seed"])
def test_each_costly_route_is_limited(api, alice, settings, route):
    from tests.api.conftest import make_runs

    settings.AGENT_RATE_LIMIT = "2/h"
    runs = make_runs(alice, 1, status="running", stop_reason=None, output=None)
    calls = {
        "runs": lambda: create_run(api),
        "advance": lambda: api.post(run_url(runs[0].pk, "advance"), {}, format="json"),
        "invoke": lambda: _invoke(api),
        "seed": lambda: api.post(SEED, {"input": ARITHMETIC}, format="json"),
    }
    call = calls[route]
    for _ in range(2):
        assert call().status_code != 429
    _assert_429(call())


def test_read_routes_and_cancel_are_not_limited(api, settings):
    settings.AGENT_RATE_LIMIT = "1/h"
    run_id = create_run(api, mode="step").json()["id"]
    _assert_429(create_run(api))
    for _ in range(5):
        assert api.get(RUNS).status_code == 200
        assert api.get(run_url(run_id)).status_code == 200
        assert api.get(TOOLS).status_code == 200
    assert api.post(run_url(run_id, "cancel")).status_code == 200
    assert api.delete(run_url(run_id)).status_code == 204


def test_default_limit_is_30_per_minute(api, alice, settings):
    assert settings.AGENT_RATE_LIMIT == "30/m"
    _in_one_window(alice)
    for _ in range(30):
        assert _invoke(api).status_code == 200
    _assert_429(_invoke(api), max_wait=60)


def test_anonymous_requests_do_not_use_a_users_budget(api, settings):
    from rest_framework.test import APIClient

    settings.AGENT_RATE_LIMIT = "1/h"
    for _ in range(3):
        assert APIClient().post(RUNS, {"input": ARITHMETIC}, format="json").status_code == 401
    assert create_run(api).status_code == 201


def _clear_shared_counters() -> None:
    """Empty the store every process counts in: the shared cache (django-ratelimit's counters)."""
    from django.core.cache import cache

    cache.clear()


def test_counters_live_in_the_shared_store(api, settings):
    settings.AGENT_RATE_LIMIT = "1/h"
    assert create_run(api).status_code == 201
    _assert_429(create_run(api))
    _clear_shared_counters()  # a counter kept in process memory would survive this
    assert create_run(api).status_code == 201


def test_idempotent_replays_are_counted_too(api, settings):
    settings.AGENT_RATE_LIMIT = "2/h"
    first = api.post(RUNS, {"input": ARITHMETIC}, format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert api.post(RUNS, {"input": ARITHMETIC}, format="json", HTTP_IDEMPOTENCY_KEY="k").json() == first.json()
    _assert_429(api.post(RUNS, {"input": ARITHMETIC}, format="json", HTTP_IDEMPOTENCY_KEY="k"))
    assert run_count() == 1
