"""Prompt caching (issue 51, `prompt_cache`; docs/cost.md#prompt-caching), through the API, the real SDKs and the
stub: Anthropic's cache_control breakpoints on the system prompt and the last tool (the same bytes every turn), on
by default for Anthropic and off for OpenAI (which caches a stable prefix by itself: no marker is sent), an agent's
setting inherited by its runs, and the cache writes and reads Anthropic reports in each step's usage and cost."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agents.engine.prompts import TOOLS_PROMPT
from agents.engine.types import Usage
from agents.models import Agent
from agents.providers.anthropic_provider import AnthropicProvider
from tests.api.conftest import create_run, run_url
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH, OPENAI_PATH

pytestmark = pytest.mark.django_db

EPHEMERAL = {"type": "ephemeral"}
CALL = ("tu_1", "calculator", {"expression": "12*7+1"})


@pytest.fixture
def providers(settings, stub):
    settings.AGENT_RATE_LIMIT = "100000/m"
    settings.AGENT_PRICES = {"anthropic/claude-sonnet-4-6": {"input": "3", "cached_input": "0.30", "output": "15"}}
    return llm.point_sdks_at(settings, stub, timeout_s=None, retries=0)


def anthropic_turns(stub, first: dict | None = None, second: dict | None = None) -> None:
    """A calculator call, then the answer."""
    stub.add("POST", ANTHROPIC_PATH, json=llm.anthropic_tool_use([CALL], usage=first))
    stub.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("85", second))


def openai_turns(stub) -> None:
    stub.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([("c1", "calculator", {"expression": "12*7+1"})]))
    stub.add("POST", OPENAI_PATH, json=llm.openai_text("85"))


def bodies(stub, path: str) -> list[dict]:
    return [r.json() for r in stub.requests if r.path == path]


def run_with(api, **fields) -> dict:
    response = create_run(api, tools=["calculator", "search"], **fields)
    assert response.status_code == 201, response.json()
    run = api.get(run_url(response.json()["id"])).json()
    assert (run["stop_reason"], run["output"]) == ("final_answer", "85")
    return run


def assert_breakpoints(body: dict) -> None:
    """cache_control on the system prompt (one text block) and on the last tool; nowhere else."""
    (system,) = body["system"]
    assert system["type"] == "text" and system["text"].startswith(TOOLS_PROMPT)
    assert system["cache_control"] == EPHEMERAL
    assert [t["name"] for t in body["tools"]] == ["calculator", "search"]
    assert [t.get("cache_control") for t in body["tools"]] == [None, EPHEMERAL]
    assert "cache_control" not in json.dumps(body["messages"])


def assert_no_breakpoint(body: dict) -> None:
    assert "cache_control" not in json.dumps(body)


# --- the request ----------------------------------------------------------------------------------------------


def test_an_anthropic_run_marks_its_prefix_by_default_the_same_bytes_every_turn(api, providers):
    anthropic_turns(providers)
    run = run_with(api, provider="anthropic")

    assert run["prompt_cache"] is True
    first, second = bodies(providers, ANTHROPIC_PATH)
    assert_breakpoints(first)
    assert_breakpoints(second)
    prefix = lambda body: json.dumps([body["tools"], body["system"]])  # noqa: E731
    assert prefix(first) == prefix(second)  # byte-stable: turn 2 reads what turn 1 wrote
    assert len(second["messages"]) == 3  # the transcript grew after the prefix, unmarked


def test_prompt_cache_false_sends_no_breakpoint(api, providers):
    anthropic_turns(providers)
    run = run_with(api, provider="anthropic", prompt_cache=False)

    assert run["prompt_cache"] is False
    for body in bodies(providers, ANTHROPIC_PATH):
        assert_no_breakpoint(body)
        assert isinstance(body["system"], str) and body["system"].startswith(TOOLS_PROMPT)
        assert [t["name"] for t in body["tools"]] == ["calculator", "search"]


def test_the_react_protocol_marks_the_system_prompt_its_tools_are_in(api, providers):
    providers.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("Thought: I know the answer\nFinal Answer: 85"))
    run_with(api, provider="anthropic", protocol="react")

    (body,) = bodies(providers, ANTHROPIC_PATH)
    assert "tools" not in body  # the react protocol sends no tool specs: they are in the system prompt
    assert [b["cache_control"] for b in body["system"]] == [EPHEMERAL]
    assert "calculator" in body["system"][0]["text"]


def test_openai_is_off_by_default_and_never_gets_a_marker(api, providers):
    openai_turns(providers)
    run = run_with(api, provider="openai")

    assert run["prompt_cache"] is False
    for body in bodies(providers, OPENAI_PATH):
        assert_no_breakpoint(body)


def test_openai_with_prompt_cache_on_still_gets_no_marker_only_a_stable_prefix(api, providers):
    """OpenAI caches a prompt's prefix by itself: the system prompt and the tools come first, the same each turn."""
    openai_turns(providers)
    run = run_with(api, provider="openai", prompt_cache=True)

    assert run["prompt_cache"] is True
    first, second = bodies(providers, OPENAI_PATH)
    assert_no_breakpoint(first)
    assert_no_breakpoint(second)
    assert first["messages"][0]["role"] == "system"
    assert json.dumps([first["tools"], first["messages"][:2]]) == json.dumps([second["tools"], second["messages"][:2]])


# --- an agent's setting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("agent", "request_value", "expected"),
    [
        (False, None, False),  # the agent's off, though Anthropic's default is on
        (None, None, True),  # the agent says nothing: Anthropic's default
        (False, True, True),  # the request over the agent
        (True, False, False),
    ],
)
def test_a_run_inherits_its_agents_prompt_cache(api, providers, agent, request_value, expected):
    Agent.objects.create(name="support", provider="anthropic", prompt_cache=agent)
    anthropic_turns(providers)
    fields = {} if request_value is None else {"prompt_cache": request_value}
    run = run_with(api, agent="support", **fields)

    assert run["prompt_cache"] is expected
    for body in bodies(providers, ANTHROPIC_PATH):
        assert_breakpoints(body) if expected else assert_no_breakpoint(body)


def test_an_agent_reads_back_its_prompt_cache(api):
    Agent.objects.create(name="support", provider="anthropic", prompt_cache=False)
    assert api.get("/api/v1/agents/support").json()["prompt_cache"] is False


# --- usage and cost -------------------------------------------------------------------------------------------


def test_cache_writes_and_reads_show_in_each_steps_usage_and_cost(api, providers):
    # Turn 1 writes the 2000-token prefix; turn 2 reads it.
    anthropic_turns(
        providers,
        llm.anthropic_usage(10, 20, cache_creation=2000),
        llm.anthropic_usage(30, 5, cache_read=2000),
    )
    run = run_with(api, provider="anthropic")

    first, second = [s for s in run["steps"] if s["kind"] == "model"]
    assert first["usage"] == {
        "prompt_tokens": 2010,
        "completion_tokens": 20,
        "total_tokens": 2030,
        "cache_write_tokens": 2000,
    }
    assert second["usage"] == {
        "prompt_tokens": 2030,
        "completion_tokens": 5,
        "total_tokens": 2035,
        "cached_tokens": 2000,
    }
    # Per million tokens: input $3, cache writes 1.25 × $3 = $3.75, cache reads $0.30, output $15.
    assert first["cost"] == "0.00783"  # 10 × 3 + 2000 × 3.75 + 20 × 15 = 7830 millionths
    assert second["cost"] == "0.000765"  # 30 × 3 + 2000 × 0.30 + 5 × 15 = 765 millionths
    assert run["cost"] == "0.008595"
    assert run["usage"] == {"prompt_tokens": 4040, "completion_tokens": 25, "total_tokens": 4065}


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_the_provider_marks_and_reads_the_cache_plain_and_streamed(providers, streamed):
    usage = llm.anthropic_usage(7, 3, cache_creation=1500, cache_read=600)
    providers.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("ok", usage))
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}]
    request = replace(llm.request(messages), prompt_cache=True)
    if streamed:
        request = replace(request, on_text=lambda text: None)

    reply = AnthropicProvider().complete(request)

    assert reply.usage == Usage(2107, 3, cached_tokens=600, cache_write_tokens=1500)
    body = providers.requests[-1].json()
    assert body.get("stream", False) is streamed
    assert body["system"] == [{"type": "text", "text": "You are terse.", "cache_control": EPHEMERAL}]
    assert [t.get("cache_control") for t in body["tools"]] == [None, EPHEMERAL]


def test_a_request_without_prompt_cache_keeps_the_plain_system_string(providers):
    providers.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("ok"))
    AnthropicProvider().complete(
        llm.request([{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Hi"}])
    )

    body = providers.requests[-1].json()
    assert body["system"] == "You are terse."
    assert_no_breakpoint(body)
