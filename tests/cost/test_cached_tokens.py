"""Cached prompt tokens as each provider reports them, read through the real SDKs against the stub, plain and
streamed: OpenAI's `prompt_tokens_details.cached_tokens`, Anthropic's `cache_read_input_tokens` (its prompt being
input + cache creation + cache read)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agents.engine.types import CallStopped, Usage
from agents.providers.anthropic_provider import AnthropicProvider
from agents.providers.openai_compat import OpenAIProvider
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH, OPENAI_PATH

OPENAI_USAGE = {
    "prompt_tokens": 2006,
    "completion_tokens": 300,
    "total_tokens": 2306,
    "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0},
}
ANTHROPIC_USAGE = llm.anthropic_usage(6, 300, cache_creation=80, cache_read=1920)


@pytest.fixture
def sdks(settings, stub):
    return llm.point_sdks_at(settings, stub, timeout_s=5.0, retries=0)


def call(kind: str, streamed: bool, **request_fields):
    provider = OpenAIProvider("gpt-4o-mini") if kind == "openai" else AnthropicProvider("claude-sonnet-4-6")
    request = llm.request()
    if streamed:
        request = replace(request, on_text=lambda text: None, **request_fields)
    return provider.complete(request)


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_openai_cached_tokens(sdks, streamed):
    sdks.add("POST", OPENAI_PATH, json=llm.openai_text("Hello.", OPENAI_USAGE))
    assert call("openai", streamed).usage == Usage(prompt_tokens=2006, completion_tokens=300, cached_tokens=1920)
    assert sdks.requests[-1].json().get("stream", False) is streamed


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
def test_anthropic_cache_reads_are_the_cached_part_of_the_prompt(sdks, streamed):
    sdks.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("Hello.", ANTHROPIC_USAGE))
    reply = call("anthropic", streamed)
    assert reply.usage == Usage(
        prompt_tokens=6 + 80 + 1920, completion_tokens=300, cached_tokens=1920, cache_write_tokens=80
    )
    assert sdks.requests[-1].json().get("stream", False) is streamed


@pytest.mark.parametrize(
    ("kind", "usage"),
    [
        ("openai", llm.openai_usage(50, 5)),
        ("openai", {**llm.openai_usage(50, 5), "prompt_tokens_details": None}),  # some compatible servers send null
        ("anthropic", llm.anthropic_usage(50, 5)),
    ],
)
def test_no_cache_reads_are_zero_cached_tokens(sdks, kind, usage):
    body = llm.openai_text("ok", usage) if kind == "openai" else llm.anthropic_text("ok", usage)
    sdks.add("POST", OPENAI_PATH if kind == "openai" else ANTHROPIC_PATH, json=body)
    assert call(kind, streamed=False).usage == Usage(50, 5, cached_tokens=0)


def test_an_openai_compatible_server_reporting_more_cached_than_prompt_tokens_is_held_to_the_prompt(sdks):
    usage = {**llm.openai_usage(100, 5), "prompt_tokens_details": {"cached_tokens": 500}}
    sdks.add("POST", OPENAI_PATH, json=llm.openai_text("ok", usage))
    assert call("openai", streamed=False).usage == Usage(100, 5, cached_tokens=100)


def test_an_anthropic_stream_stopped_early_counts_its_cache_reads_from_message_start(sdks):
    """The input usage (cache reads included) comes with message_start: a stream stopped after it knows them."""
    events = llm.as_stream(json.dumps(llm.anthropic_text("A long answer, cut off.", ANTHROPIC_USAGE)).encode())

    def slow(request):
        return 200, {"Content-Type": "text/event-stream"}, [piece for event in events for piece in (event, 0.05)]

    sdks.add("POST", ANTHROPIC_PATH, handler=slow)
    with pytest.raises(CallStopped) as stopped:
        call("anthropic", streamed=True, interrupted=lambda: True)
    assert stopped.value.usage == Usage(
        prompt_tokens=2006, completion_tokens=1, cached_tokens=1920, cache_write_tokens=80
    )
