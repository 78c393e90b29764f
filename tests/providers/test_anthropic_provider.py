"""The Anthropic provider against the HTTP stub, through the real anthropic SDK."""

from __future__ import annotations

import time

import pytest

from agents.engine.types import ModelError, ToolCall, Usage
from agents.providers import _common
from agents.providers.anthropic_provider import AnthropicProvider
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH

KEY = llm.fake_key("sk-ant-test-")


@pytest.fixture
def anthropic_env(settings, stub):
    """Anthropic pointed at the stub, 5 s per attempt, 2 retries."""
    settings.ANTHROPIC_API_KEY = KEY
    settings.ANTHROPIC_BASE_URL = stub.url
    settings.AGENT_LLM_TIMEOUT_S = 5.0
    settings.AGENT_LLM_MAX_RETRIES = 2
    return stub


def sent(stub, index: int = -1) -> dict:
    """The JSON body of a recorded request."""
    return stub.requests[index].json()


# --- replies ---------------------------------------------------------------------------------------------------


def test_plain_answer(anthropic_env):
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("Hello!", llm.anthropic_usage(10, 4)))
    reply = AnthropicProvider().complete(llm.request())
    assert reply.text == "Hello!"
    assert reply.tool_calls == ()
    assert reply.usage == Usage(prompt_tokens=10, completion_tokens=4)
    assert reply.reasoning is None
    body = sent(anthropic_env)
    assert body["model"] == "claude-sonnet-4-6"
    assert body["max_tokens"] == 2048


def test_one_tool_use(anthropic_env):
    body = llm.anthropic_tool_use([("toolu_1", "weather", {"city": "Oslo"})], text="Checking.")
    anthropic_env.add("POST", ANTHROPIC_PATH, json=body)
    reply = AnthropicProvider().complete(llm.request())
    assert reply.tool_calls == (ToolCall(id="toolu_1", name="weather", arguments={"city": "Oslo"}),)
    assert reply.text == "Checking."


def test_two_tool_uses_keep_order_and_ids(anthropic_env):
    calls = [("toolu_b", "calc", {"expr": "2+2"}), ("toolu_a", "weather", {"city": "Oslo"})]
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_tool_use(calls))
    reply = AnthropicProvider().complete(llm.request())
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == calls
    assert reply.text == ""


def test_usage_adds_cache_tokens(anthropic_env):
    usage = llm.anthropic_usage(10, 7, cache_creation=100, cache_read=1000)
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("ok", usage))
    # Prompt: input + cache writes + cache reads; the cache reads are also `cached_tokens` (priced lower), the cache
    # writes `cache_write_tokens` (priced higher).
    assert AnthropicProvider().complete(llm.request()).usage == Usage(
        1110, 7, cached_tokens=1000, cache_write_tokens=100
    )


def test_usage_absent_is_zero(anthropic_env):
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("ok"))
    assert AnthropicProvider().complete(llm.request()).usage == Usage(0, 0)


def test_thinking_block_goes_to_reasoning_not_text(anthropic_env):
    body = llm.anthropic_text("<think>kept</think>It is 4.", thinking="2+2 is 4")
    anthropic_env.add("POST", ANTHROPIC_PATH, json=body)
    reply = AnthropicProvider().complete(llm.request())
    assert reply.reasoning == "2+2 is 4"
    assert reply.text == "<think>kept</think>It is 4."


# --- what is sent ----------------------------------------------------------------------------------------------


def test_tools_protocol_sends_tools_with_input_schema(anthropic_env):
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("ok"))
    AnthropicProvider().complete(llm.request(protocol="tools"))
    tools = sent(anthropic_env)["tools"]
    assert tools == [
        {"name": "weather", "description": llm.WEATHER.description, "input_schema": llm.WEATHER.parameters},
        {"name": "calc", "description": llm.CALC.description, "input_schema": llm.CALC.parameters},
    ]


def test_react_protocol_sends_no_tools(anthropic_env):
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("ok"))
    AnthropicProvider().complete(llm.request(protocol="react"))
    body = sent(anthropic_env)
    assert "tools" not in body
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]


def test_system_is_top_level_and_turns_alternate(anthropic_env):
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("Rainy; 4."))
    AnthropicProvider(model="claude-haiku-4-5").complete(llm.request(llm.tool_turn_messages()))
    body = sent(anthropic_env)
    assert body["model"] == "claude-haiku-4-5"
    assert body["system"] == "You are terse.\n\nUse tools."
    messages = body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"] == [
        {"type": "text", "text": "Let me check."},
        {"type": "tool_use", "id": "call_a", "name": "weather", "input": {"city": "Oslo"}},
        {"type": "tool_use", "id": "call_b", "name": "calc", "input": {"expr": "2+2"}},
    ]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "call_a", "content": "rain, 8C"},
        {"type": "tool_result", "tool_use_id": "call_b", "content": "4"},
        {"type": "text", "text": "Now answer."},
    ]


def test_consecutive_same_role_messages_are_merged(anthropic_env):
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("ok"))
    messages = [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "three"},
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "assistant", "content": "four"},
        {"role": "user", "content": "five"},
    ]
    AnthropicProvider().complete(llm.request(messages, protocol="react"))
    body = sent(anthropic_env)
    assert "system" not in body
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert [b["text"] for b in body["messages"][0]["content"]] == ["one", "two"]
    assert [b["text"] for b in body["messages"][1]["content"]] == ["three", "four"]


def test_key_is_sent(anthropic_env):
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("ok"))
    AnthropicProvider().complete(llm.request())
    headers = anthropic_env.requests[-1].headers
    # anthropic 2.14 sends the key as a bearer token; older versions used x-api-key.
    assert KEY in (headers.get("x-api-key"), headers.get("authorization", "").removeprefix("Bearer "))


def test_the_hosts_platform_is_not_described_to_the_provider(anthropic_env):
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("ok"))
    AnthropicProvider().complete(llm.request())
    headers = {name.lower() for name in anthropic_env.requests[-1].headers}
    assert not headers & {name.lower() for name in _common.PLATFORM_HEADERS}  # no OS, arch, runtime, versions
    assert {"anthropic-version", "user-agent", "content-type"} <= headers  # what the API uses


# --- retries, timeouts, errors ---------------------------------------------------------------------------------


def test_429_then_success_is_retried(anthropic_env):
    error = llm.anthropic_error("rate_limit_error")
    anthropic_env.add("POST", ANTHROPIC_PATH, status=429, json=error, headers={"retry-after": "0"})
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("ok"))
    assert AnthropicProvider().complete(llm.request()).text == "ok"
    assert anthropic_env.count("POST", ANTHROPIC_PATH) == 2


def test_500_every_time_gives_up_after_all_retries(anthropic_env):
    error = llm.anthropic_error("api_error")
    anthropic_env.add("POST", ANTHROPIC_PATH, status=500, json=error, headers={"retry-after-ms": "10"}, repeat=True)
    with pytest.raises(ModelError) as err:
        AnthropicProvider().complete(llm.request())
    assert anthropic_env.count("POST", ANTHROPIC_PATH) == 3
    assert str(err.value) == "anthropic: server error after 3 attempts (HTTP 500)"


def test_529_overloaded(anthropic_env, settings):
    settings.AGENT_LLM_MAX_RETRIES = 0
    anthropic_env.add("POST", ANTHROPIC_PATH, status=529, json=llm.anthropic_error("overloaded_error"))
    with pytest.raises(ModelError, match=r"anthropic: overloaded \(HTTP 529\)"):
        AnthropicProvider().complete(llm.request())


def test_huge_retry_after_does_not_outlive_the_deadline(anthropic_env, settings):
    settings.AGENT_LLM_TIMEOUT_S = 0.5  # leaves room for retries within the 2 s budget
    error = llm.anthropic_error("rate_limit_error")
    anthropic_env.add("POST", ANTHROPIC_PATH, status=429, json=error, headers={"retry-after": "500"}, repeat=True)
    started = time.monotonic()
    with pytest.raises(ModelError) as err:
        AnthropicProvider().complete(llm.request(timeout_s=2.0))
    assert time.monotonic() - started < 30
    assert anthropic_env.count("POST", ANTHROPIC_PATH) == 1  # the wait cannot fit the budget: no retry at all
    assert "rate limited" in str(err.value)
    assert "HTTP 429" in str(err.value)


def test_retry_after_is_capped(anthropic_env, monkeypatch):
    monkeypatch.setattr(_common, "RETRY_AFTER_CAP_S", 0.05)
    error = llm.anthropic_error("rate_limit_error")
    anthropic_env.add("POST", ANTHROPIC_PATH, status=429, json=error, headers={"retry-after": "60"})
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("ok"))
    started = time.monotonic()
    assert AnthropicProvider().complete(llm.request(timeout_s=120.0)).text == "ok"
    assert time.monotonic() - started < 30
    assert anthropic_env.count("POST", ANTHROPIC_PATH) == 2


def test_slow_reply_times_out(anthropic_env, settings):
    settings.AGENT_LLM_TIMEOUT_S = 0.5
    settings.AGENT_LLM_MAX_RETRIES = 0
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("late"), delay_s=3)
    with pytest.raises(ModelError, match="timed out"):
        AnthropicProvider().complete(llm.request())
    assert anthropic_env.count("POST", ANTHROPIC_PATH) == 1


def test_malformed_json_is_a_model_error(anthropic_env):
    anthropic_env.add("POST", ANTHROPIC_PATH, body='{"content": [', headers={"Content-Type": "application/json"})
    with pytest.raises(ModelError, match="malformed"):
        AnthropicProvider().complete(llm.request())


@pytest.mark.parametrize(
    "body",
    [
        {"content": None},
        {"type": "message"},
        {"content": ["text"]},
        {"content": [{"type": "tool_use", "id": "", "name": "weather", "input": {}}]},
        llm.anthropic_error("api_error"),
        [1, 2, 3],
    ],
)
def test_wrong_shape_is_a_model_error(anthropic_env, body):
    anthropic_env.add("POST", ANTHROPIC_PATH, json=body)
    with pytest.raises(ModelError, match="anthropic: "):
        AnthropicProvider().complete(llm.request())


def test_html_body_is_a_model_error(anthropic_env):
    anthropic_env.add("POST", ANTHROPIC_PATH, body="<html>Bad gateway</html>", headers={"Content-Type": "text/html"})
    with pytest.raises(ModelError, match="anthropic: "):
        AnthropicProvider().complete(llm.request())


def test_401_is_not_retried_and_hides_the_key(anthropic_env):
    error = llm.anthropic_error("authentication_error", f"invalid x-api-key {KEY}")
    anthropic_env.add("POST", ANTHROPIC_PATH, status=401, json=error, repeat=True)
    with pytest.raises(ModelError) as err:
        AnthropicProvider().complete(llm.request())
    assert str(err.value) == "anthropic: authentication failed (HTTP 401)"
    assert KEY not in str(err.value)
    assert anthropic_env.count("POST", ANTHROPIC_PATH) == 1


def test_403_is_not_retried(anthropic_env):
    anthropic_env.add("POST", ANTHROPIC_PATH, status=403, json=llm.anthropic_error("permission_error"), repeat=True)
    with pytest.raises(ModelError, match=r"permission denied \(HTTP 403\)"):
        AnthropicProvider().complete(llm.request())
    assert anthropic_env.count("POST", ANTHROPIC_PATH) == 1


# --- clients ---------------------------------------------------------------------------------------------------


def test_client_is_reused_per_configuration(anthropic_env, settings):
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("one"))
    anthropic_env.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("two"))
    first = AnthropicProvider().client()
    assert AnthropicProvider().complete(llm.request()).text == "one"
    assert AnthropicProvider().complete(llm.request()).text == "two"
    assert AnthropicProvider().client() is first
    settings.ANTHROPIC_API_KEY = KEY + "-other"
    assert AnthropicProvider().client() is not first
