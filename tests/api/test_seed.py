"""The seed-compatible one-shot POST /v1/agent/runs."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agents.models import Run
from tests.api.conftest import ARITHMETIC, SEED, SEED_KEYS, run_count, run_url

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("path", [SEED, SEED + "/"])
def test_seed_run_answers_in_the_seed_shape(api, alice, path):
    response = api.post(path, {"input": ARITHMETIC}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == SEED_KEYS
    assert (body["output"], body["stop_reason"], body["turns"], body["ok"]) == ("85", "final_answer", 3, True)
    run = Run.objects.get(pk=body["run_id"])
    assert (run.owner, run.mode, run.protocol) == (alice, "sync", "tools")
    assert api.get(run_url(body["run_id"])).status_code == 200


def test_seed_run_passes_max_turns_and_timeout(api):
    body = api.post(SEED, {"input": ARITHMETIC, "max_turns": 1, "timeout_s": 5}, format="json").json()
    assert (body["ok"], body["output"], body["stop_reason"], body["turns"]) == (False, None, "max_turns", 1)
    run = Run.objects.get(pk=body["run_id"])
    assert (run.max_turns, run.timeout_s) == (1, 5.0)


def test_seed_run_is_always_a_sync_tools_run(api):
    body = api.post(SEED, {"input": ARITHMETIC}, format="json").json()
    run = Run.objects.get(pk=body["run_id"])
    assert (run.mode, run.protocol, run.status) == ("sync", "tools", "done")


def test_a_run_option_the_seed_route_does_not_take_is_a_400_naming_it(api):
    response = api.post(SEED, {"input": ARITHMETIC, "mode": "step", "protocol": "react"}, format="json")
    assert response.status_code == 400
    assert sorted(response.json()) == ["mode", "protocol"]
    assert not Run.objects.exists()


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "input"),
        ({"input": ""}, "input"),
        ({"input": ARITHMETIC, "max_turns": 51}, "max_turns"),
        ({"input": ARITHMETIC, "max_turns": 0}, "max_turns"),
        ({"input": ARITHMETIC, "timeout_s": 601}, "timeout_s"),
    ],
)
def test_seed_validation(api, payload, field):
    before = run_count()
    response = api.post(SEED, payload, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert run_count() == before


def test_seed_input_bound(api, settings):
    settings.AGENT_MAX_INPUT_CHARS = 10
    before = run_count()
    response = api.post(SEED, {"input": "x" * 11}, format="json")
    assert response.status_code == 400
    assert "input" in response.json()
    assert run_count() == before


def test_seed_non_object_body_is_400(api):
    before = run_count()
    assert api.post(SEED, data="[1]", content_type="application/json").status_code == 400
    assert api.post(SEED, data="{oops", content_type="application/json").status_code == 400
    assert run_count() == before


def test_seed_needs_auth(db):
    response = APIClient().post(SEED, {"input": ARITHMETIC}, format="json")
    assert response.status_code == 401
    assert response.headers.get("WWW-Authenticate")
    assert run_count() == 0


def test_seed_sensitive_call_pauses(api, no_search_network):
    body = api.post(SEED, {"input": "search python"}, format="json").json()
    assert (body["ok"], body["output"], body["stop_reason"]) == (False, None, None)
    assert Run.objects.get(pk=body["run_id"]).status == "awaiting_approval"
    assert no_search_network.requests == []
