"""Whole runs that call an MCP tool: both providers' SDKs against the stub LLM × both protocols, the test MCP server
over stdio and over streamable HTTP. On the providers' wire `<server>.<tool>` is `<server>__<tool>`."""

from __future__ import annotations

import json

import pytest

from agents.models import Run
from agents.runs import drive, review, selectors, submit
from agents.tools import mcp
from tests.conftest import make_user
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH, OPENAI_PATH
from tests.support.mcp_fixtures import http_server, stdio_server

__all__ = ["http_server"]  # a fixture

pytestmark = pytest.mark.django_db
QUESTION = "What is 40 plus 2? Use the add tool."
OPEN = [stdio_server("t", sensitive=False)]  # one object: the process keeps its session between tests
GUARDED = [stdio_server("t")]  # sensitive by default


@pytest.fixture(scope="module", autouse=True)
def _stop_servers_after_the_module():
    yield
    mcp.shutdown()


@pytest.fixture
def providers(settings, stub):
    return llm.point_sdks_at(settings, stub)


def script(stub, provider: str, protocol: str, tool: str = "t.add") -> str:
    """Two replies: a call of `tool` with a=40, b=2 (by its wire name), then the answer 42. Returns the path."""
    wire, arguments = tool.replace(".", "__"), {"a": 40, "b": 2}
    react = [
        f"Thought: I add.\nAction: {tool}\nAction Input: {json.dumps(arguments)}",
        "Thought: done\nFinal Answer: 42",
    ]
    if provider == "openai":
        path = OPENAI_PATH
        first = llm.openai_tool_calls([("c1", wire, arguments)]) if protocol == "tools" else llm.openai_text(react[0])
        last = llm.openai_text("42" if protocol == "tools" else react[1])
    else:
        path = ANTHROPIC_PATH
        first = (
            llm.anthropic_tool_use([("t1", wire, arguments)]) if protocol == "tools" else llm.anthropic_text(react[0])
        )
        last = llm.anthropic_text("42" if protocol == "tools" else react[1])
    stub.add("POST", path, json=first)
    stub.add("POST", path, json=last)
    return path


def start(owner, provider: str, protocol: str, tool: str = "t.add") -> Run:
    options = submit.RunOptions(input=QUESTION, provider=provider, protocol=protocol, tools=["calculator", tool])
    return drive.execute(run_id=submit.start_run(owner=owner, options=options).pk)


def tool_names_sent(body: dict, provider: str) -> list[str]:
    if provider == "openai":
        return [t["function"]["name"] for t in body.get("tools", [])]
    return [t["name"] for t in body.get("tools", [])]


def calls_sent_back(body: dict, provider: str) -> list[str]:
    """The names of the earlier turns' tool calls, as the second request carries them."""
    if provider == "openai":
        return [c["function"]["name"] for m in body["messages"] for c in m.get("tool_calls") or []]
    return [b["name"] for m in body["messages"] for b in m["content"] if b.get("type") == "tool_use"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_a_run_calls_an_mcp_tool(providers, settings, provider, protocol):
    settings.AGENT_MCP_SERVERS = OPEN
    path = script(providers, provider, protocol)
    run = start(make_user("ann"), provider, protocol)

    assert (run.status, run.stop_reason, run.output) == ("done", "final_answer", "42")
    (step,) = [s.data for s in run.steps.filter(kind="tool")]
    assert (step["name"], step["arguments"], step["output"]) == ("t.add", {"a": 40, "b": 2}, "42")
    first, second = (r.json() for r in providers.requests if r.path == path)
    if protocol == "tools":
        assert tool_names_sent(first, provider) == ["calculator", "t__add"]  # "." is not allowed on the wire
        assert calls_sent_back(second, provider) == ["t__add"]
    else:
        assert "tools" not in first and "t.add" in json.dumps(first)  # react: the registry's own name, in the prompt
    wrapped = json.dumps("<<<TOOL_OUTPUT_START>>>\n42\n<<<TOOL_OUTPUT_END>>>")[1:-1]
    assert wrapped in json.dumps(second)  # the output went back, wrapped


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_run_calls_an_mcp_tool_over_http(providers, settings, http_server, provider):
    settings.AGENT_MCP_SERVERS = [http_server.entry("web", sensitive=False)]
    script(providers, provider, "tools", tool="web.add")
    run = start(make_user("ann"), provider, "tools", tool="web.add")

    assert (run.status, run.output) == ("done", "42")
    assert [s.data["output"] for s in run.steps.filter(kind="tool")] == ["42"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_mcp_tool_is_sensitive_by_default_the_run_pauses_for_approval(providers, settings, provider):
    settings.AGENT_MCP_SERVERS = GUARDED
    script(providers, provider, "tools")
    owner, reviewer = make_user("ann"), make_user("rev", reviewer=True)
    run = start(owner, provider, "tools")

    assert run.status == "awaiting_approval" and "t.add" in run.sensitive_tools
    assert [a["tool"] for a in selectors.pending_actions(run)] == ["t.add"]
    assert not run.steps.filter(kind="tool").exists()  # nothing reached the server yet
    run = review.advance_run(run_id=run.pk, actor=reviewer, approval=True)
    assert (run.status, run.output) == ("done", "42")


def test_a_failing_mcp_tool_is_an_error_step_the_model_reads(providers, settings):
    settings.AGENT_MCP_SERVERS = OPEN
    providers.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([("c1", "t__boom", {})]))
    providers.add("POST", OPENAI_PATH, json=llm.openai_text("the tool failed"))
    run = start(make_user("ann"), "openai", "tools", tool="t.boom")

    assert (run.status, run.output) == ("done", "the tool failed")
    (step,) = [s.data for s in run.steps.filter(kind="tool")]
    assert step["is_error"] is True and "failed on purpose" in step["output"]
    assert "failed on purpose" in json.dumps(providers.requests[-1].json()["messages"])
