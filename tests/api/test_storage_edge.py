"""Input and output that the database cannot store as-is must never turn into a 500 (PostgreSQL: no NUL)."""

from __future__ import annotations

import pytest

from agents.models import IdempotencyKey, Run, Step
from tests.api.conftest import ARITHMETIC, RUNS, create_run, run_count, run_url

pytestmark = pytest.mark.django_db


def test_nul_in_input_is_400(api):
    response = api.post(RUNS, data='{"input": "a\\u0000b"}', content_type="application/json")
    assert response.status_code == 400
    assert "input" in response.json()
    assert run_count() == 0


def test_nul_in_tool_names_is_400(api):
    response = api.post(RUNS, data='{"input": "hi", "tools": ["calculator\\u0000"]}', content_type="application/json")
    assert response.status_code == 400
    assert run_count() == 0


def test_nul_in_an_idempotency_key_is_400(api):
    response = api.post(RUNS, {"input": ARITHMETIC}, format="json", HTTP_IDEMPOTENCY_KEY="a\x00b")
    assert response.status_code == 400
    assert run_count() == 0
    assert IdempotencyKey.objects.count() == 0


@pytest.mark.parametrize("key", ["é" * 255, "k\u2028k", " "])
def test_unusual_but_storable_keys_work(api, key):
    first = api.post(RUNS, {"input": ARITHMETIC}, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert first.status_code == 201
    again = api.post(RUNS, {"input": ARITHMETIC}, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert again.json()["id"] == first.json()["id"]
    assert run_count() == 1


@pytest.mark.parametrize(
    "raw",
    [
        '{"approval": true, "arguments": {"query": "a\\u0000b"}}',
        '{"approval": true, "arguments": {"q\\u0000": "x"}}',
        '{"approval": true, "arguments": {"query": ["\\u0000"]}}',
        '{"approval": false, "reason": "no\\u0000"}',
    ],
)
def test_nul_in_a_decision_is_400_and_nothing_runs(api, reviewer_api, no_search_network, raw):
    run_id = create_run(api, input="search python").json()["id"]
    response = reviewer_api.post(run_url(run_id, "advance"), data=raw, content_type="application/json")
    assert response.status_code == 400
    assert no_search_network.requests == []
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.lease_owner) == ("awaiting_approval", "")
    assert not Step.objects.filter(run_id=run_id, kind="approval").exists()


def test_backslash_u_text_in_arguments_is_not_mistaken_for_nul(api, reviewer_api, search_stub):
    run_id = create_run(api, input="search python").json()["id"]
    response = reviewer_api.post(
        run_url(run_id, "advance"), {"approval": True, "arguments": {"query": "\\u0000"}}, format="json"
    )
    assert response.status_code == 200
    tool = Step.objects.get(run_id=run_id, kind="tool")
    assert tool.data["arguments"] == {"query": "\\u0000"}


def test_tool_output_with_a_nul_byte_is_stored_not_a_500(api, reviewer_api, stub, settings):
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"
    stub.add("GET", "/", json={"AbstractText": "before\u0000after"}, repeat=True)
    run_id = create_run(api, input="search python").json()["id"]
    response = reviewer_api.post(run_url(run_id, "advance"), {"approval": True}, format="json")
    assert response.status_code == 200
    body = response.json()
    assert (body["status"], body["stop_reason"]) == ("done", "final_answer")
    assert "before" in body["output"] and "after" in body["output"]
    assert "\x00" not in body["output"]
    steps = api.get(run_url(run_id)).json()["steps"]
    tool = next(s for s in steps if s["kind"] == "tool")
    assert "before" in tool["output"] and "\x00" not in tool["output"]
    assert stub.count("GET", "/") == 1
