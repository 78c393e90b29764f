"""Input and output that the database cannot store as-is must never turn into a 500 (PostgreSQL: no NUL)."""

from __future__ import annotations

import pytest

from agents.models import IdempotencyKey, Run, Step
from agents.runs import store
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


@pytest.mark.django_db
@pytest.mark.parametrize(("table", "column"), [("agents_step", "run_id"), ("agents_run", "owner_id")])
def test_each_foreign_key_leads_exactly_one_index(table, column):
    """A run's steps and a user's runs are found through a composite index that starts with the key (the unique
    (run_id, index); run_owner_created); no index of the key alone doubles its writes (migration 0013)."""
    from django.db import connection

    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    indexed = {name: c["columns"] for name, c in constraints.items() if c["index"] or c["unique"]}
    leading = {name: columns for name, columns in indexed.items() if columns[:1] == [column]}
    assert len(leading) == 1, leading
    assert len(next(iter(leading.values()))) == 2  # (run_id, index) / (owner_id, created_at)


@pytest.mark.django_db(transaction=True)
def test_the_usage_trigger_outlives_the_index_migration():
    """Migration 0013 drops indexes only: a table rebuild on SQLite would have dropped 0010's usage trigger."""
    from django.core.management import call_command
    from django.db import connection

    call_command("migrate", "agents", "0012", verbosity=0)
    call_command("migrate", "agents", verbosity=0)
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'agents_run'")
        else:
            cursor.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = 'agents_run'::regclass AND NOT tgisinternal")
        triggers = {row[0] for row in cursor.fetchall()}
        constraints = connection.introspection.get_constraints(cursor, "agents_step")
    assert any("usage" in name for name in triggers), triggers
    assert not any(c["columns"] == ["run_id"] and (c["index"] or c["unique"]) for c in constraints.values())


def test_a_nul_anywhere_in_a_units_values_is_replaced():
    value = {"output": "a\x00b", "data": {"k\x00": ["x", ("y\x00",)], "n": 1}}
    assert store._storable(value) == {"output": "a\ufffdb", "data": {"k\ufffd": ["x", ["y\ufffd"]], "n": 1}}


def test_values_without_a_nul_are_stored_as_they_are():
    value = {"output": "85", "data": {"arguments": {"expression": "12*7"}, "turns": [1, 2]}}
    assert store._storable(value) is value  # not walked: nothing to replace
    spelt = {"output": "\\x00 is four characters"}  # its repr looks like a NUL's: walked, and kept
    assert store._storable(spelt) == {"output": "\\x00 is four characters"}
