"""MCP tool calls carry their idempotency key (agents/tools/mcp/, docs/configuration.md "MCP servers"): every call of a
run sends `params._meta["io.reactsite/idempotency-key"]` = "<run id>:<step>:<call id>", the same when a resumed run
repeats a call that was in flight when its worker died; a server not configured `"idempotent": true` is
at-least-once, and the call's tool step says so (`"delivery": "at-least-once"`).

The server is tests/support/mcp_server.py: its `meta` tool answers with the `_meta` of the request that carried it.
"""

from __future__ import annotations

import json

import pytest

from agents.engine import execute
from agents.engine.dispatch import Toolset, run_tool
from agents.runs import drive, runtime, submit
from agents.tools import mcp
from agents.tools.mcp.config import IDEMPOTENCY_META_KEY, McpConfigError, parse_servers
from agents.tools.registry import ToolContext
from tests.conftest import make_user
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import OPENAI_PATH
from tests.support.mcp_fixtures import http_server, stdio_server

__all__ = ["http_server"]  # a fixture

# One object per configuration: the process keeps its sessions while the setting is the same object.
PLAIN = [stdio_server("t", sensitive=False)]
KEYED = [stdio_server("k", sensitive=False, idempotent=True)]


@pytest.fixture(scope="module", autouse=True)
def _stop_servers_after_the_module():
    yield
    mcp.shutdown()


def received_meta(output: str) -> dict:
    """The `_meta` the server received, from the `meta` tool's output."""
    return json.loads(output)


def call_meta(name: str, context: ToolContext) -> dict:
    """One call of the server's `meta` tool as the engine makes it; the `_meta` the server received."""
    toolset = Toolset(runtime.run_tools([name]), context)
    result = run_tool(toolset, name, {}, 30.0)
    assert not result.is_error, result.output
    return received_meta(result.output)


# --- configuration -----------------------------------------------------------------------------------------


def test_idempotent_is_an_optional_boolean_of_either_transport():
    plain, stdio, http = parse_servers(
        [
            {"name": "a", "command": "a-mcp"},
            {"name": "b", "command": "b-mcp", "idempotent": True},
            {"name": "c", "url": "https://c.example/mcp", "idempotent": True},
        ]
    )
    assert (plain.idempotent, stdio.idempotent, http.idempotent) == (False, True, True)
    assert (plain.delivery, stdio.delivery, http.delivery) == ("at-least-once", None, None)


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_idempotent_that_is_not_a_boolean_is_a_named_error(value):
    with pytest.raises(McpConfigError, match=r"AGENT_MCP_SERVERS\[0\] \('a'\): 'idempotent' must be true or false"):
        parse_servers([{"name": "a", "command": "a-mcp", "idempotent": value}])


def test_the_key_follows_the_specifications_rules_for_a_meta_key():
    """A reverse-DNS prefix, a "/", a name; a prefix whose second label is `modelcontextprotocol` or `mcp` is MCP's."""
    prefix, slash, name = IDEMPOTENCY_META_KEY.partition("/")
    labels = prefix.split(".")
    assert slash and name and len(labels) >= 2 and labels[1] not in ("modelcontextprotocol", "mcp")
    assert IDEMPOTENCY_META_KEY == "io.reactsite/idempotency-key"


def test_the_listed_tools_and_stand_ins_of_a_server_carry_its_delivery(settings):
    """A listed tool and the stand-in for one not listed now (agents/tools/mcp placeholder) say the same."""
    settings.AGENT_MCP_SERVERS = PLAIN
    assert runtime.run_tools(["t.meta", "t.unlisted"])["t.meta"].delivery == "at-least-once"
    assert mcp.placeholder("t.unlisted").delivery == "at-least-once"
    assert mcp.placeholder("nowhere.tool").delivery == "at-least-once"  # a server not configured: nothing known
    settings.AGENT_MCP_SERVERS = KEYED
    assert runtime.run_tools(["k.meta"])["k.meta"].delivery is None
    assert mcp.placeholder("k.unlisted").delivery is None


# --- the key on the wire ---------------------------------------------------------------------------------------


def test_a_run_call_sends_run_id_colon_call_id_in_meta_over_stdio(settings):
    settings.AGENT_MCP_SERVERS = PLAIN
    meta = call_meta("t.meta", ToolContext(user_id=1, run_id="run-7").for_call(3, "call_abc"))

    assert meta[IDEMPOTENCY_META_KEY] == "run-7:3:call_abc"


def test_a_run_call_sends_the_key_over_http_too(settings, http_server):
    settings.AGENT_MCP_SERVERS = [http_server.entry("h", sensitive=False)]
    meta = call_meta("h.meta", ToolContext(user_id=1, run_id="run-8").for_call(0, "toolu_1"))

    assert meta[IDEMPOTENCY_META_KEY] == "run-8:0:toolu_1"


def test_each_call_has_its_own_key_and_a_call_outside_a_run_has_none(settings):
    settings.AGENT_MCP_SERVERS = PLAIN
    run = ToolContext(user_id=1, run_id="run-9")

    first = call_meta("t.meta", run.for_call(1, "c1"))
    second = call_meta("t.meta", run.for_call(2, "c2"))
    direct = call_meta("t.meta", ToolContext(user_id=1))  # the invoke route: no run, no call

    assert (first[IDEMPOTENCY_META_KEY], second[IDEMPOTENCY_META_KEY]) == ("run-9:1:c1", "run-9:2:c2")
    assert IDEMPOTENCY_META_KEY not in direct


# --- whole runs: the key of a resumed call, and the trace -----------------------------------------------------


@pytest.fixture
def providers(settings, stub):
    return llm.point_sdks_at(settings, stub)


def script_meta_call(stub, wire_name: str, call_id: str = "c1") -> None:
    """The model calls the `meta` tool once, then answers "done"."""
    stub.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([(call_id, wire_name, {})]))
    stub.add("POST", OPENAI_PATH, json=llm.openai_text("done"))


def start(tool: str):
    options = submit.RunOptions(input="What reached the server?", provider="openai", protocol="tools", tools=[tool])
    return submit.start_run(owner=make_user("ann"), options=options)


def crash_after_the_first_call(monkeypatch) -> list[str]:
    """The first tool call reaches the server and returns; then the worker "dies" before its step is committed (the
    exception leaves the unit, the lease is let go, the run stays running). Returns the outputs of the lost calls."""
    real, lost = execute.run_tool, []

    def dies_after(*args, **kwargs):
        result = real(*args, **kwargs)
        if not lost:
            lost.append(result.output)
            raise RuntimeError("the worker died")
        return result

    monkeypatch.setattr(execute, "run_tool", dies_after)
    return lost


@pytest.mark.django_db
def test_a_call_resumed_after_a_crash_sends_the_same_key_and_is_marked_at_least_once(providers, settings, monkeypatch):
    settings.AGENT_MCP_SERVERS = PLAIN
    script_meta_call(providers, "t__meta", call_id="call_42")
    lost = crash_after_the_first_call(monkeypatch)
    run = start("t.meta")

    with pytest.raises(RuntimeError, match="the worker died"):
        drive.execute(run_id=run.pk)
    assert len(lost) == 1 and not run.steps.filter(kind="tool").exists()  # the server ran it; the trace lost it
    run = drive.execute(run_id=run.pk)  # another worker takes the run up from its last commit

    assert (run.status, run.output) == ("done", "done")
    (row,) = run.steps.filter(kind="tool")
    step, key = row.data, f"{run.pk}:{row.index}:call_42"
    assert received_meta(lost[0])[IDEMPOTENCY_META_KEY] == key  # the call in flight when the worker died
    assert received_meta(step["output"])[IDEMPOTENCY_META_KEY] == key  # its repeat: the same key
    assert step["delivery"] == "at-least-once"  # the server may have run it twice
    assert len(providers.requests) == 2  # the committed reply was not asked for again


@pytest.mark.django_db
def test_the_calls_of_a_server_that_honours_the_key_are_not_marked(providers, settings):
    settings.AGENT_MCP_SERVERS = KEYED
    script_meta_call(providers, "k__meta")
    run = drive.execute(run_id=start("k.meta").pk)

    assert (run.status, run.output) == ("done", "done")
    (row,) = run.steps.filter(kind="tool")
    step = row.data
    assert received_meta(step["output"])[IDEMPOTENCY_META_KEY] == f"{run.pk}:{row.index}:c1"
    assert "delivery" not in step


@pytest.mark.django_db
def test_a_failed_call_of_an_at_least_once_server_is_marked_too(providers, settings):
    """A call that timed out or failed may still have run on the server: its step is marked as well."""
    settings.AGENT_MCP_SERVERS = PLAIN
    providers.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([("c1", "t__boom", {})]))
    providers.add("POST", OPENAI_PATH, json=llm.openai_text("it failed"))
    run = drive.execute(run_id=start("t.boom").pk)

    (step,) = [s.data for s in run.steps.filter(kind="tool")]
    assert (step["is_error"], step["delivery"]) == (True, "at-least-once")


@pytest.mark.django_db
def test_built_in_tools_are_not_marked(providers, settings):
    settings.AGENT_MCP_SERVERS = PLAIN
    providers.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([("c1", "calculator", {"expression": "6*7"})]))
    providers.add("POST", OPENAI_PATH, json=llm.openai_text("42"))
    run = drive.execute(run_id=start("calculator").pk)

    (step,) = [s.data for s in run.steps.filter(kind="tool")]
    assert step["output"] == "42" and "delivery" not in step


@pytest.mark.django_db
def test_two_turns_with_the_same_made_up_call_id_send_different_keys(providers, settings):
    """A provider that sends no call id gets `call_0` made up on every turn: the step keeps each key unique, so a
    server that honours keys never answers the second call with the first one's result."""
    settings.AGENT_MCP_SERVERS = KEYED
    providers.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([("call_0", "k__meta", {})]))
    providers.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([("call_0", "k__meta", {})]))
    providers.add("POST", OPENAI_PATH, json=llm.openai_text("done"))
    run = drive.execute(run_id=start("k.meta").pk)

    rows = list(run.steps.filter(kind="tool").order_by("index"))
    keys = [received_meta(row.data["output"])[IDEMPOTENCY_META_KEY] for row in rows]
    assert run.status == "done" and len(rows) == 2
    assert keys == [f"{run.pk}:{row.index}:call_0" for row in rows]
    assert keys[0] != keys[1]
