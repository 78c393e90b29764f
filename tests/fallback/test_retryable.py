"""Which failures of a model call are `retryable` (a fallback model is then tried), through the real SDKs against the
stub: timeouts, lost connections, 408/409/429 and 5xx (529 too) after the SDK's own retries; never a refused key,
a rejected request or a malformed reply."""

from __future__ import annotations

import json
import socket
from dataclasses import replace
from types import SimpleNamespace

import pytest

from agents.engine.types import ModelError
from agents.providers.anthropic_provider import AnthropicProvider
from agents.providers.openai_compat import OpenAIProvider
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH, OPENAI_PATH

PATHS = {"openai": OPENAI_PATH, "anthropic": ANTHROPIC_PATH}
STREAM = {"Content-Type": "text/event-stream"}
FAST_RETRY = {"retry-after-ms": "1"}


def provider(kind: str):
    return OpenAIProvider("gpt-test") if kind == "openai" else AnthropicProvider("claude-test")


def error_body(kind: str) -> dict:
    return llm.openai_error() if kind == "openai" else llm.anthropic_error()


def failure(kind: str, request=None) -> ModelError:
    with pytest.raises(ModelError) as err:
        provider(kind).complete(request or llm.request())
    return err.value


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize(
    ("status", "retryable"),
    [(408, True), (409, True), (429, True), (500, True), (503, True), (529, True)]
    + [(400, False), (401, False), (403, False), (404, False), (422, False)],
)
def test_a_status_is_retryable_when_another_model_may_not_meet_it(sdks, kind, status, retryable):
    sdks.add("POST", PATHS[kind], status=status, json=error_body(kind), headers=FAST_RETRY, repeat=True)

    error = failure(kind)

    assert error.retryable is retryable
    assert str(error).endswith(f"(HTTP {status})")
    assert sdks.count("POST", PATHS[kind]) == (2 if retryable else 1)  # judged after the SDK's own retry, as before


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_timeout_is_retryable(settings, sdks, kind):
    settings.AGENT_LLM_TIMEOUT_S, settings.AGENT_LLM_MAX_RETRIES = 0.2, 0
    sdks.add("POST", PATHS[kind], json=error_body(kind), delay_s=1.0)

    error = failure(kind)

    assert "timed out" in str(error) and error.retryable is True


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_refused_connection_is_retryable(settings, kind):
    with socket.socket() as sock:  # a port nothing listens on once it is closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    llm.point_sdks_at(settings, SimpleNamespace(url=f"http://127.0.0.1:{port}"), retries=0)

    error = failure(kind)

    assert "connection failed" in str(error) and error.retryable is True


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_malformed_reply_is_not_retryable(sdks, kind):
    sdks.add("POST", PATHS[kind], body="{not json", headers={"Content-Type": "application/json"})

    error = failure(kind)

    assert "malformed" in str(error) and error.retryable is False


def test_a_reply_of_the_wrong_shape_is_not_retryable(sdks):
    sdks.add("POST", OPENAI_PATH, json={"choices": []})
    assert failure("openai").retryable is False


@pytest.mark.parametrize(("code", "retryable"), [(429, True), (502, True), ("503", True), (400, False), ("x", False)])
def test_an_error_a_compatible_api_answers_with_200_is_judged_by_its_code(sdks, code, retryable):
    """OpenRouter reports an upstream's rate limit or failure as a 200 whose body is an error with the status as its
    code."""
    sdks.add("POST", OPENAI_PATH, json={"error": {"message": "upstream", "code": code}})

    error = failure("openai")

    assert "the provider returned an error" in str(error) and error.retryable is retryable


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_stream_that_keeps_breaking_is_retryable(sdks, kind):
    body = llm.openai_text("The answer is 42.") if kind == "openai" else llm.anthropic_text("The answer is 42.")
    events = llm.as_stream(json.dumps(body).encode())
    sdks.add("POST", PATHS[kind], body=b"".join(events[:3]), headers=STREAM, repeat=True)

    error = failure(kind, replace(llm.request(), on_text=lambda text: None))

    assert "stream ended early" in str(error) and error.retryable is True
    assert sdks.count("POST", PATHS[kind]) == 2


@pytest.mark.parametrize(("kind", "retryable"), [("overloaded_error", True), ("invalid_request_error", False)])
def test_an_anthropic_error_event_mid_stream_is_judged_by_its_type(sdks, kind, retryable):
    events = llm.anthropic_stream(llm.anthropic_text("The answer is 42."))[:3]
    error_event = llm.sse({"type": "error", "error": {"type": kind, "message": "..."}}, "error")
    sdks.add("POST", ANTHROPIC_PATH, body=b"".join([*events, error_event]), headers=STREAM)

    error = failure("anthropic", replace(llm.request(), on_text=lambda text: None))

    assert "error mid-stream" in str(error) and error.retryable is retryable


def test_an_openai_error_chunk_mid_stream_is_judged_by_its_code(sdks):
    events = llm.openai_stream(llm.openai_text("The answer is 42."))[:3]
    chunk = llm.sse({"error": {"message": "upstream overloaded", "code": 502}})
    sdks.add("POST", OPENAI_PATH, body=b"".join([*events, chunk]), headers=STREAM)

    error = failure("openai", replace(llm.request(), on_text=lambda text: None))

    assert "(code 502)" in str(error) and error.retryable is True


def test_a_key_gone_missing_is_not_retryable(settings, sdks):
    settings.OPENAI_API_KEY = ""
    assert failure("openai").retryable is False
