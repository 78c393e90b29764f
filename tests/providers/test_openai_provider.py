"""OpenAI-compatible providers against the HTTP stub, through the real openai SDK."""

from __future__ import annotations

import email.utils
import time
from types import SimpleNamespace

import pytest

from agents.engine.types import ModelError, ToolCall, Usage
from agents.providers import _common
from agents.providers.openai_compat import HuggingFaceProvider, OpenAIProvider, OpenRouterProvider, XAIProvider
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import OPENAI_PATH

KEY = llm.fake_key()


@pytest.fixture
def openai_env(settings, stub):
    """OpenAI pointed at the stub, 5 s per attempt, 2 retries."""
    settings.OPENAI_API_KEY = KEY
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    settings.AGENT_LLM_TIMEOUT_S = 5.0
    settings.AGENT_LLM_MAX_RETRIES = 2
    return stub


def sent(stub, index: int = -1) -> dict:
    """The JSON body of a recorded request."""
    return stub.requests[index].json()


# --- replies ---------------------------------------------------------------------------------------------------


def test_plain_answer(openai_env):
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("Hello!", llm.openai_usage(12, 3)))
    reply = OpenAIProvider().complete(llm.request())
    assert reply.text == "Hello!"
    assert reply.tool_calls == ()
    assert reply.usage == Usage(prompt_tokens=12, completion_tokens=3)
    assert reply.reasoning is None
    assert sent(openai_env)["model"] == "gpt-4.1-mini"


def test_one_tool_call(openai_env):
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([("call_1", "weather", {"city": "Oslo"})]))
    reply = OpenAIProvider().complete(llm.request())
    assert reply.tool_calls == (ToolCall(id="call_1", name="weather", arguments={"city": "Oslo"}),)
    assert reply.text == ""


def test_two_tool_calls_keep_order_and_ids(openai_env):
    calls = [("call_b", "calc", {"expr": "2+2"}), ("call_a", "weather", {"city": "Oslo"})]
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_tool_calls(calls, text="Checking."))
    reply = OpenAIProvider().complete(llm.request())
    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == calls
    assert reply.text == "Checking."


@pytest.mark.parametrize("raw", ['{"city": "Oslo"', "[1, 2]", '"Oslo"'])
def test_arguments_not_a_json_object_are_passed_raw(openai_env, raw):
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([("call_1", "weather", raw)]))
    reply = OpenAIProvider().complete(llm.request())
    assert reply.tool_calls[0].arguments == {"__raw__": raw}


def test_usage_absent_is_zero(openai_env):
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("ok"))
    assert OpenAIProvider().complete(llm.request()).usage == Usage(0, 0)


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_reasoning_field_goes_to_reasoning_not_text(openai_env, field):
    body = llm.openai_text("<think>kept</think>The answer is 4.", **{field: "2+2 is 4"})
    openai_env.add("POST", OPENAI_PATH, json=body)
    reply = OpenAIProvider().complete(llm.request())
    assert reply.reasoning == "2+2 is 4"
    assert reply.text == "<think>kept</think>The answer is 4."


# --- what is sent ----------------------------------------------------------------------------------------------


def test_tools_protocol_sends_function_tools(openai_env):
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("ok"))
    OpenAIProvider().complete(llm.request(protocol="tools"))
    tools = sent(openai_env)["tools"]
    assert [t["type"] for t in tools] == ["function", "function"]
    assert tools[0]["function"] == {
        "name": "weather",
        "description": llm.WEATHER.description,
        "parameters": llm.WEATHER.parameters,
    }
    assert tools[1]["function"]["name"] == "calc"


def test_react_protocol_sends_no_tools(openai_env):
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("ok"))
    OpenAIProvider().complete(llm.request(protocol="react"))
    body = sent(openai_env)
    assert "tools" not in body
    assert "tool_choice" not in body
    assert body["messages"] == [{"role": "user", "content": "Hi"}]


def test_tool_results_become_tool_messages(openai_env):
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("Rainy; 4."))
    OpenAIProvider(model="gpt-4.1").complete(llm.request(llm.tool_turn_messages()))
    body = sent(openai_env)
    assert body["model"] == "gpt-4.1"
    roles = [m["role"] for m in body["messages"]]
    assert roles == ["system", "system", "user", "assistant", "tool", "tool", "user"]
    assistant = body["messages"][3]
    assert assistant["content"] == "Let me check."
    assert [c["id"] for c in assistant["tool_calls"]] == ["call_a", "call_b"]
    assert assistant["tool_calls"][0]["type"] == "function"
    assert assistant["tool_calls"][0]["function"] == {"name": "weather", "arguments": '{"city": "Oslo"}'}
    assert body["messages"][4] == {"role": "tool", "tool_call_id": "call_a", "content": "rain, 8C"}
    assert body["messages"][5] == {"role": "tool", "tool_call_id": "call_b", "content": "4"}


def test_key_is_sent_as_bearer_token(openai_env):
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("ok"))
    OpenAIProvider().complete(llm.request())
    assert openai_env.requests[-1].headers["authorization"] == f"Bearer {KEY}"


def test_the_hosts_platform_is_not_described_to_the_provider(openai_env):
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("ok"))
    OpenAIProvider().complete(llm.request())
    headers = {name.lower() for name in openai_env.requests[-1].headers}
    assert not headers & {name.lower() for name in _common.PLATFORM_HEADERS}  # no OS, arch, runtime, versions
    assert {"authorization", "user-agent", "content-type", "x-stainless-retry-count"} <= headers  # what the API uses


# --- retries, timeouts, errors ---------------------------------------------------------------------------------


def test_429_then_success_is_retried(openai_env):
    openai_env.add(
        "POST", OPENAI_PATH, status=429, json=llm.openai_error("slow down"), headers={"retry-after-ms": "10"}
    )
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("ok"))
    assert OpenAIProvider().complete(llm.request()).text == "ok"
    assert openai_env.count("POST", OPENAI_PATH) == 2


def test_500_every_time_gives_up_after_all_retries(openai_env):
    openai_env.add(
        "POST", OPENAI_PATH, status=500, json=llm.openai_error(), headers={"retry-after-ms": "10"}, repeat=True
    )
    with pytest.raises(ModelError) as err:
        OpenAIProvider().complete(llm.request())
    assert openai_env.count("POST", OPENAI_PATH) == 3
    assert str(err.value) == "openai: server error after 3 attempts (HTTP 500)"


def test_huge_retry_after_does_not_outlive_the_deadline(openai_env, settings):
    settings.AGENT_LLM_TIMEOUT_S = 0.5  # leaves room for retries within the 2 s budget
    openai_env.add(
        "POST", OPENAI_PATH, status=429, json=llm.openai_error(), headers={"retry-after": "500"}, repeat=True
    )
    started = time.monotonic()
    with pytest.raises(ModelError) as err:
        OpenAIProvider().complete(llm.request(timeout_s=2.0))
    assert time.monotonic() - started < 30
    assert openai_env.count("POST", OPENAI_PATH) == 1  # the wait cannot fit the budget: no retry at all
    assert "rate limited" in str(err.value)
    assert "HTTP 429" in str(err.value)


def test_retry_after_is_capped(openai_env, monkeypatch):
    monkeypatch.setattr(_common, "RETRY_AFTER_CAP_S", 0.05)
    openai_env.add("POST", OPENAI_PATH, status=429, json=llm.openai_error(), headers={"retry-after": "60"})
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("ok"))
    started = time.monotonic()
    assert OpenAIProvider().complete(llm.request(timeout_s=120.0)).text == "ok"
    assert time.monotonic() - started < 30
    assert openai_env.count("POST", OPENAI_PATH) == 2


def test_slow_reply_times_out(openai_env, settings):
    settings.AGENT_LLM_TIMEOUT_S = 0.5
    settings.AGENT_LLM_MAX_RETRIES = 0
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("late"), delay_s=3)
    with pytest.raises(ModelError, match="timed out"):
        OpenAIProvider().complete(llm.request())
    assert openai_env.count("POST", OPENAI_PATH) == 1


def test_no_time_left_makes_no_call(openai_env):
    with pytest.raises(ModelError, match="timed out"):
        OpenAIProvider().complete(llm.request(timeout_s=0))
    assert openai_env.count("POST", OPENAI_PATH) == 0


def test_malformed_json_is_a_model_error(openai_env):
    openai_env.add("POST", OPENAI_PATH, body='{"choices": [', headers={"Content-Type": "application/json"})
    with pytest.raises(ModelError, match="malformed"):
        OpenAIProvider().complete(llm.request())


@pytest.mark.parametrize(
    "body",
    [
        {"choices": None},
        {"choices": []},
        {"choices": [{"message": None}]},
        {"choices": [{"message": {"role": "assistant", "content": None}}]},
        {"choices": [{"message": {"content": None, "tool_calls": [{"id": "x", "function": None}]}}]},
        {"error": {"message": "upstream failed", "code": 502}},
    ],
)
def test_wrong_shape_is_a_model_error(openai_env, body):
    openai_env.add("POST", OPENAI_PATH, json=body)
    with pytest.raises(ModelError, match="openai: "):
        OpenAIProvider().complete(llm.request())


def test_html_body_is_a_model_error(openai_env):
    openai_env.add(
        "POST", OPENAI_PATH, body="<html><body>Bad gateway</body></html>", headers={"Content-Type": "text/html"}
    )
    with pytest.raises(ModelError) as err:
        OpenAIProvider().complete(llm.request())
    assert "html" not in str(err.value).lower()


def test_401_is_not_retried_and_hides_the_key(openai_env):
    openai_env.add("POST", OPENAI_PATH, status=401, json=llm.openai_error(f"Incorrect API key {KEY}"), repeat=True)
    with pytest.raises(ModelError) as err:
        OpenAIProvider().complete(llm.request())
    assert str(err.value) == "openai: authentication failed (HTTP 401)"
    assert KEY not in str(err.value)
    assert openai_env.count("POST", OPENAI_PATH) == 1


def test_connection_refused_is_a_model_error(settings):
    settings.OPENAI_API_KEY = KEY
    settings.OPENAI_BASE_URL = "http://127.0.0.1:9/v1"  # discard port: nothing listens
    settings.AGENT_LLM_MAX_RETRIES = 0
    with pytest.raises(ModelError, match="openai: connection failed"):
        OpenAIProvider().complete(llm.request())


# --- clients ---------------------------------------------------------------------------------------------------


def test_client_is_reused_per_configuration(openai_env, settings):
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("one"))
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("two"))
    first = OpenAIProvider().client()
    assert OpenAIProvider().complete(llm.request()).text == "one"
    assert OpenAIProvider(model="gpt-4.1").complete(llm.request()).text == "two"
    assert OpenAIProvider().client() is first
    settings.OPENAI_BASE_URL = openai_env.url + "/other/v1"
    assert OpenAIProvider().client() is not first


def test_budget_limits_retries_to_the_remaining_time(settings):
    settings.AGENT_LLM_TIMEOUT_S = 30.0
    settings.AGENT_LLM_MAX_RETRIES = 2
    assert (_common.call_budget("x", 2.0).timeout_s, _common.call_budget("x", 2.0).max_retries) == (2.0, 0)
    assert _common.call_budget("x", 45.0).max_retries == 1
    assert _common.call_budget("x", 300.0).max_retries == 2
    assert _common.call_budget("x", 300.0).timeout_s == 30.0


def test_request_hook_counts_attempts_and_shrinks_timeouts_to_the_deadline():
    budget = _common.Budget(timeout_s=30.0, max_retries=0, deadline=time.monotonic() + 1.0)
    request = SimpleNamespace(extensions={"timeout": {"connect": 5.0, "read": 30.0, "write": 30.0, "pool": None}})
    with _common.deadline_scope(budget) as state:
        _common.on_request(request)
    assert state.attempts == 1
    assert all(0 < value <= 1.0 for value in request.extensions["timeout"].values())


def _response(status: int, **headers: str) -> SimpleNamespace:
    return SimpleNamespace(status_code=status, headers={k.replace("_", "-"): v for k, v in headers.items()})


def test_response_hook_caps_retry_after_without_a_deadline():
    response = _response(429, retry_after="500")
    _common.on_response(response)
    assert response.headers["retry-after-ms"] == str(int(_common.RETRY_AFTER_CAP_S * 1000))
    assert "x-should-retry" not in response.headers


def test_response_hook_vetoes_a_retry_the_deadline_cannot_fit():
    budget = _common.Budget(timeout_s=1.0, max_retries=2, deadline=time.monotonic() + 2.0)
    long_wait, short_wait, ok = _response(429, retry_after="500"), _response(503, retry_after_ms="10"), _response(200)
    with _common.deadline_scope(budget):
        for response in (long_wait, short_wait, ok):
            _common.on_response(response)
    assert long_wait.headers["x-should-retry"] == "false"
    assert "x-should-retry" not in short_wait.headers
    assert ok.headers == {}


def test_server_wait_reads_ms_seconds_and_dates():
    assert _common.server_wait({"retry-after-ms": "250"}) == 0.25
    assert _common.server_wait({"retry-after": "3"}) == 3.0
    assert _common.server_wait({"retry-after": "soon"}) is None
    later = email.utils.formatdate(time.time() + 100, usegmt=True)
    assert 90 < _common.server_wait({"retry-after": later}) <= 101


# --- OpenAI-compatible providers -------------------------------------------------------------------------------

COMPAT = [
    (XAIProvider, "XAI_API_KEY", "XAI_BASE_URL", "grok-4"),
    (HuggingFaceProvider, "HF_TOKEN", "HF_BASE_URL", "meta-llama/Llama-3.3-70B-Instruct"),
    (OpenRouterProvider, "OPENROUTER_API_KEY", "OPENROUTER_BASE_URL", "openai/gpt-4.1-mini"),
]


@pytest.mark.parametrize(("cls", "key_setting", "url_setting", "model"), COMPAT)
def test_compatible_provider_uses_its_base_url_and_key(settings, stub, cls, key_setting, url_setting, model):
    key = llm.fake_key(f"{cls.name}-test-")
    settings.OPENAI_API_KEY = KEY
    setattr(settings, key_setting, key)
    setattr(settings, url_setting, stub.url + "/api/v1")
    stub.add("POST", llm.COMPAT_PATH, json=llm.openai_tool_calls([("c1", "weather", {"city": "Rome"})]))
    reply = cls().complete(llm.request())
    assert reply.tool_calls == (ToolCall("c1", "weather", {"city": "Rome"}),)
    assert stub.count("POST", llm.COMPAT_PATH) == 1
    assert stub.requests[-1].headers["authorization"] == f"Bearer {key}"
    assert stub.requests[-1].json()["model"] == model
    assert cls().client() is not OpenAIProvider().client()


@pytest.mark.parametrize(
    ("base", "path", "url"),
    [
        ("http://h:81/v1", "/chat/completions", "http://h:81/v1/chat/completions"),
        ("http://h:81/v1/", "chat/completions", "http://h:81/v1/chat/completions"),
        ("https://api.anthropic.com", "/v1/messages", "https://api.anthropic.com/v1/messages"),
        ("http://127.0.0.1:9/a/b/v1", "/chat/completions", "http://127.0.0.1:9/a/b/v1/chat/completions"),
    ],
)
def test_the_endpoint_is_the_path_on_the_clients_base_url(base, path, url):
    from agents.providers.openai_compat import build_client

    client = build_client(base, KEY)
    assert _common.endpoint(client, path) == url
    assert _common.endpoint(client, path) is _common.endpoint(client, path)  # merged once per client
    other = build_client("http://other:82/v2", KEY)
    assert _common.endpoint(other, path).startswith("http://other:82/v2/")


def test_a_base_url_with_a_path_of_its_own_is_kept(openai_env, settings):
    settings.OPENAI_BASE_URL = openai_env.url + "/proxy/openai/v1"
    openai_env.add("POST", "/proxy/openai/v1/chat/completions", json=llm.openai_text("via the proxy"))
    assert OpenAIProvider().complete(llm.request()).text == "via the proxy"
    assert openai_env.requests[-1].path == "/proxy/openai/v1/chat/completions"
