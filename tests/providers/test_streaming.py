"""Streamed model calls (issue 32, item 1): both SDKs ask for a stream, the stub sends it as the API references
document it, and the reply assembled from it is exactly the reply of the same call made without streaming."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agents.engine.types import CallStopped, ModelError, StopReason, Usage
from agents.providers.anthropic_provider import AnthropicProvider
from agents.providers.openai_compat import OpenAIProvider
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH, OPENAI_PATH

OPENAI_REPLIES = {
    "text": llm.openai_text("The answer is 42, as computed.", llm.openai_usage(11, 7)),
    "reasoning": llm.openai_text("Yes.", llm.openai_usage(3, 2), reasoning_content="Thinking it over first."),
    "one call, arguments in pieces": llm.openai_tool_calls(
        [("call_1", "weather", {"city": "Oslo, Norway"})], usage=llm.openai_usage(20, 9)
    ),
    "two parallel calls": llm.openai_tool_calls(
        [("call_a", "weather", {"city": "Oslo"}), ("call_b", "calc", {"expr": "12*7+1"})],
        text="Checking both.",
        usage=llm.openai_usage(30, 12),
    ),
    "no usage": llm.openai_text("plain"),
}
ANTHROPIC_REPLIES = {
    "text": llm.anthropic_text("The answer is 42, as computed.", llm.anthropic_usage(11, 7, cache_read=4)),
    "thinking": llm.anthropic_text("Yes.", llm.anthropic_usage(3, 2), thinking="Let me think."),
    "one call": llm.anthropic_tool_use(
        [("tu_1", "weather", {"city": "Oslo, Norway"})], usage=llm.anthropic_usage(9, 4)
    ),
    "two parallel calls": llm.anthropic_tool_use(
        [("tu_a", "weather", {"city": "Oslo"}), ("tu_b", "calc", {"expr": "12*7+1"})],
        text="Checking both.",
        usage=llm.anthropic_usage(30, 12),
    ),
}
PATHS = {"openai": OPENAI_PATH, "anthropic": ANTHROPIC_PATH}


@pytest.fixture
def sdks(settings, stub):
    return llm.point_sdks_at(settings, stub, timeout_s=5.0, retries=2)


def provider(kind: str):
    return OpenAIProvider("gpt-test") if kind == "openai" else AnthropicProvider("claude-test")


def both_ways(stub, kind: str, body: dict):
    """The same call without and with streaming: (plain reply, streamed reply, the text pieces heard)."""
    stub.add("POST", PATHS[kind], body=json.dumps(body), headers={"Content-Type": "application/json"}, repeat=True)
    heard: list[str] = []
    plain = provider(kind).complete(llm.request())
    streamed = provider(kind).complete(replace(llm.request(), on_text=heard.append))
    return plain, streamed, heard


@pytest.mark.parametrize("case", list(OPENAI_REPLIES))
def test_an_openai_stream_gives_the_reply_a_plain_call_gives(sdks, case):
    plain, streamed, heard = both_ways(sdks, "openai", OPENAI_REPLIES[case])

    assert streamed == plain
    assert "".join(heard) == plain.text and (len(heard) > 1 or len(plain.text) <= 3)
    sent = sdks.requests[-1].json()
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert "stream" not in sdks.requests[-2].json()  # the plain call did not ask for one


@pytest.mark.parametrize("case", list(ANTHROPIC_REPLIES))
def test_an_anthropic_stream_gives_the_reply_a_plain_call_gives(sdks, case):
    plain, streamed, heard = both_ways(sdks, "anthropic", ANTHROPIC_REPLIES[case])

    assert streamed == plain
    assert "".join(heard) == plain.text
    assert sdks.requests[-1].json()["stream"] is True


def test_interleaved_tool_call_fragments_are_put_back_by_index(sdks):
    body = OPENAI_REPLIES["two parallel calls"]
    events = llm.openai_stream(body, size=2, interleave=True)
    sdks.add("POST", OPENAI_PATH, body=b"".join(events), headers={"Content-Type": "text/event-stream"})

    reply = provider("openai").complete(replace(llm.request(), on_text=lambda text: None))

    assert [(c.id, c.name, c.arguments) for c in reply.tool_calls] == [
        ("call_a", "weather", {"city": "Oslo"}),
        ("call_b", "calc", {"expr": "12*7+1"}),
    ]
    assert reply.usage == Usage(30, 12)


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_stream_cut_midway_is_retried_and_the_partial_text_voided(sdks, kind):
    body = OPENAI_REPLIES["text"] if kind == "openai" else ANTHROPIC_REPLIES["text"]
    events = llm.as_stream(json.dumps(body).encode())
    cut = events[: len(events) // 2]  # the connection ends before [DONE] / message_stop
    sdks.add("POST", PATHS[kind], body=b"".join(cut), headers={"Content-Type": "text/event-stream"})
    sdks.add("POST", PATHS[kind], body=b"".join(events), headers={"Content-Type": "text/event-stream"})
    heard: list[str] = []

    reply = provider(kind).complete(replace(llm.request(), on_text=heard.append, on_retry=lambda: heard.append("|")))

    assert reply.text == "The answer is 42, as computed."
    before, _, after = "".join(heard).partition("|")
    assert before and reply.text.startswith(before) and after == reply.text  # dropped, then the whole text again
    assert sdks.count("POST", PATHS[kind]) == 2


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_stream_that_keeps_breaking_is_a_model_error_after_the_retries(settings, sdks, kind):
    settings.AGENT_LLM_MAX_RETRIES = 1
    body = OPENAI_REPLIES["text"] if kind == "openai" else ANTHROPIC_REPLIES["text"]
    events = llm.as_stream(json.dumps(body).encode())
    sdks.add("POST", PATHS[kind], body=b"".join(events[:3]), headers={"Content-Type": "text/event-stream"}, repeat=True)

    with pytest.raises(ModelError, match="stream ended early"):
        provider(kind).complete(replace(llm.request(), on_text=lambda text: None))
    assert sdks.count("POST", PATHS[kind]) == 2


def slow(events: list[bytes], pause_s: float):
    def handler(request):
        return 200, {"Content-Type": "text/event-stream"}, [piece for event in events for piece in (event, pause_s)]

    return handler


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_an_interrupted_stream_stops_within_a_second_with_the_usage_so_far(sdks, kind):
    body = OPENAI_REPLIES["text"] if kind == "openai" else ANTHROPIC_REPLIES["text"]
    events = llm.as_stream(json.dumps(body).encode())
    sdks.add("POST", PATHS[kind], handler=slow(events, 0.1))
    heard: list[str] = []
    asked = []

    def interrupted() -> bool:
        asked.append(1)
        return len(heard) >= 2  # cancelled once two pieces went out

    with pytest.raises(CallStopped) as stopped:
        provider(kind).complete(replace(llm.request(), on_text=heard.append, interrupted=interrupted))

    assert stopped.value.reason == StopReason.CANCELLED
    assert 2 <= len(heard) <= 6  # checked every 0.25 s at most: stopped a few pieces later, not at the end
    # Anthropic reports the input tokens when the message starts (its cache reads among them); OpenAI only in its
    # last chunk.
    assert stopped.value.usage == (Usage(15, 1, cached_tokens=4) if kind == "anthropic" else Usage())


def test_a_stream_past_the_runs_deadline_stops_as_a_timeout(sdks):
    events = llm.openai_stream(OPENAI_REPLIES["text"], size=1)
    sdks.add("POST", OPENAI_PATH, handler=slow(events, 0.05))

    with pytest.raises(CallStopped) as stopped:
        provider("openai").complete(replace(llm.request(timeout_s=0.6), on_text=lambda text: None))
    assert stopped.value.reason == StopReason.TIMEOUT


def test_an_error_event_mid_stream_is_a_safe_model_error(sdks):
    events = llm.anthropic_stream(ANTHROPIC_REPLIES["text"])[:3]
    error = llm.sse({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error")
    sdks.add("POST", ANTHROPIC_PATH, body=b"".join([*events, error]), headers={"Content-Type": "text/event-stream"})

    with pytest.raises(ModelError, match="error mid-stream"):
        provider("anthropic").complete(replace(llm.request(), on_text=lambda text: None))


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_server_that_ignores_stream_and_answers_whole_is_read_as_a_plain_reply(sdks, kind):
    """Some OpenAI-compatible servers answer `stream: true` with the whole JSON reply: that reply is used (its text
    heard in one piece), not refused as a malformed stream."""
    body = OPENAI_REPLIES["two parallel calls"] if kind == "openai" else ANTHROPIC_REPLIES["two parallel calls"]
    whole = json.dumps(body).encode()
    answer = (200, {"Content-Type": "application/json"}, [whole])  # written as is (a list: not made a stream)
    sdks.add("POST", PATHS[kind], handler=lambda r: answer, repeat=True)
    heard: list[str] = []

    reply = provider(kind).complete(replace(llm.request(), on_text=heard.append))

    assert reply == provider(kind).complete(llm.request())
    assert heard == ["Checking both."] and sdks.requests[0].json()["stream"] is True
