"""Replies that do not end the ordinary way, as the real APIs send them (issue 33, item 2), read through the real SDKs
from the stub, plain and streamed: Chat Completions `finish_reason` `length` / `content_filter` and `message.refusal`;
Messages `stop_reason` `max_tokens` / `model_context_window_exceeded` / `refusal` / `pause_turn`; thinking and
redacted_thinking blocks kept exactly (with their signature) and sent back as they came."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from agents.engine.types import Finish, ToolCall, Usage
from agents.providers.anthropic_provider import AnthropicProvider
from agents.providers.openai_compat import OpenAIProvider
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH, OPENAI_PATH

PATHS = {"openai": OPENAI_PATH, "anthropic": ANTHROPIC_PATH}
REFUSAL = "I am sorry, but I cannot help with that request."
SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds" + "x" * 40
THINKING = {"type": "thinking", "thinking": "The user wants the weather in Oslo; I will call the tool.",
            "signature": SIGNATURE}  # fmt: skip
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}
SEARCH_USE = {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "oslo weather"}}
SEARCH_RESULT = {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01",
                 "content": [{"type": "web_search_result", "url": "https://example.com/oslo", "title": "Oslo",
                              "encrypted_content": "EqgfCioIARgBIiQ3YTA", "page_age": None}]}  # fmt: skip


@pytest.fixture
def sdks(settings, stub):
    return llm.point_sdks_at(settings, stub, timeout_s=5.0, retries=0)


def provider(kind: str):
    return OpenAIProvider("gpt-test") if kind == "openai" else AnthropicProvider("claude-test")


def both_ways(stub, kind: str, body: dict):
    """The same reply read from a plain call and from a streamed one (the stub streams it as the API would)."""
    stub.add("POST", PATHS[kind], json=body, repeat=True)
    plain = provider(kind).complete(llm.request())
    streamed = provider(kind).complete(replace(llm.request(), on_text=lambda text: None))
    assert stub.requests[-1].json()["stream"] is True
    return plain, streamed


def streamed_events(stub, kind: str, events: list[bytes]):
    stub.add("POST", PATHS[kind], body=b"".join(events), headers={"Content-Type": "text/event-stream"})
    return provider(kind).complete(replace(llm.request(), on_text=lambda text: None))


# --- OpenAI Chat Completions -----------------------------------------------------------------------------------


def test_an_ordinary_openai_reply_is_not_marked(sdks):
    plain, streamed = both_ways(sdks, "openai", llm.openai_message({"content": "Hi.", "refusal": None}))
    assert plain == streamed
    assert (plain.finish, plain.blocks, plain.text) == (None, (), "Hi.")


def test_an_openai_refusal_is_a_refused_reply_with_its_text(sdks):
    body = llm.openai_message({"content": None, "refusal": REFUSAL}, llm.openai_usage(9, 11))
    plain, streamed = both_ways(sdks, "openai", body)

    assert plain == streamed
    assert (plain.finish, plain.text, plain.tool_calls) == (Finish.REFUSED, REFUSAL, ())
    assert plain.usage == Usage(9, 11)


def test_an_openai_reply_cut_by_the_output_limit_is_truncated(sdks):
    body = llm.openai_message({"content": "The first three primes are 2, 3 and"}, finish="length")
    plain, streamed = both_ways(sdks, "openai", body)

    assert plain == streamed
    assert (plain.finish, plain.text) == (Finish.TRUNCATED, "The first three primes are 2, 3 and")


def test_openai_tool_calls_cut_by_the_output_limit_are_marked_truncated_with_their_raw_arguments(sdks):
    body = llm.openai_tool_calls([("call_1", "weather", '{"city": "Os')])
    body["choices"][0]["finish_reason"] = "length"
    plain, streamed = both_ways(sdks, "openai", body)

    assert plain == streamed
    assert plain.finish == Finish.TRUNCATED
    assert plain.tool_calls == (ToolCall("call_1", "weather", {"__raw__": '{"city": "Os'}),)


def test_an_openai_reply_stopped_by_the_content_filter_is_filtered(sdks):
    body = llm.openai_message({"content": None}, finish="content_filter")
    plain, streamed = both_ways(sdks, "openai", body)

    assert plain == streamed
    assert (plain.finish, plain.text) == (Finish.FILTERED, "")


@pytest.mark.parametrize("content", [None, ""])
def test_an_empty_openai_reply_is_an_empty_reply_not_a_shape_error(sdks, content):
    plain, streamed = both_ways(sdks, "openai", llm.openai_message({"content": content}))

    assert plain == streamed
    assert (plain.finish, plain.text, plain.tool_calls) == (None, "", ())


def test_streamed_openai_arguments_that_are_not_an_object_stay_raw(sdks):
    body = llm.openai_tool_calls([("call_1", "calc", '["2+2"]'), ("call_2", "weather", "{city: Oslo}")])
    plain, streamed = both_ways(sdks, "openai", body)

    assert plain == streamed
    assert [c.arguments for c in plain.tool_calls] == [{"__raw__": '["2+2"]'}, {"__raw__": "{city: Oslo}"}]
    assert plain.finish is None


# --- Anthropic Messages ----------------------------------------------------------------------------------------


def test_an_ordinary_anthropic_reply_is_not_marked(sdks):
    plain, streamed = both_ways(sdks, "anthropic", llm.anthropic_tool_use([("tu_1", "weather", {"city": "Oslo"})]))
    assert plain == streamed
    assert (plain.finish, plain.blocks) == (None, ())


@pytest.mark.parametrize("stop", ["max_tokens", "model_context_window_exceeded"])
def test_an_anthropic_reply_cut_by_the_output_limit_is_truncated(sdks, stop):
    body = llm.anthropic_message([{"type": "text", "text": "The first three primes are 2, 3 and"}], stop=stop)
    plain, streamed = both_ways(sdks, "anthropic", body)

    assert plain == streamed
    assert (plain.finish, plain.text) == (Finish.TRUNCATED, "The first three primes are 2, 3 and")


def test_an_anthropic_tool_use_cut_by_max_tokens_is_truncated(sdks):
    body = llm.anthropic_message(
        [{"type": "text", "text": "Checking."}, {"type": "tool_use", "id": "tu_1", "name": "weather", "input": {}}],
        stop="max_tokens",
    )
    plain = (sdks.add("POST", ANTHROPIC_PATH, json=body), provider("anthropic").complete(llm.request()))[1]
    assert plain.finish == Finish.TRUNCATED and [c.id for c in plain.tool_calls] == ["tu_1"]

    # Streamed, the block's input JSON stops mid-way: the call is kept raw, and marked cut off all the same.
    cut = {**body, "content": [body["content"][0], {**body["content"][1], "input": '{"city": "Os'}]}
    streamed = streamed_events(sdks, "anthropic", llm.anthropic_stream(cut))
    assert streamed.finish == Finish.TRUNCATED
    assert streamed.tool_calls == (ToolCall("tu_1", "weather", {"__raw__": '{"city": "Os'}),)


@pytest.mark.parametrize("said", ["I can't help with that.", ""])
def test_an_anthropic_refusal_is_a_refused_reply(sdks, said):
    blocks = [{"type": "text", "text": said}] if said else []
    plain, streamed = both_ways(sdks, "anthropic", llm.anthropic_message(blocks, stop="refusal"))

    assert plain == streamed
    assert (plain.finish, plain.text, plain.tool_calls) == (Finish.REFUSED, said, ())


def test_an_anthropic_paused_turn_keeps_its_blocks_as_they_came(sdks):
    content = [{"type": "text", "text": "Let me search."}, SEARCH_USE, SEARCH_RESULT]
    plain, streamed = both_ways(sdks, "anthropic", llm.anthropic_message(content, stop="pause_turn"))

    assert plain == streamed
    assert plain.finish == Finish.PAUSED
    assert list(plain.blocks) == content
    assert plain.tool_calls == ()  # a server tool is the API's to run, never ours


def test_thinking_blocks_are_kept_exactly_with_their_signature_plain_and_streamed(sdks):
    content = [THINKING, REDACTED, {"type": "text", "text": "Checking."},
               {"type": "tool_use", "id": "tu_1", "name": "weather", "input": {"city": "Oslo"}}]  # fmt: skip
    body = llm.anthropic_message(content, llm.anthropic_usage(20, 30), stop="tool_use")
    plain, streamed = both_ways(sdks, "anthropic", body)

    assert plain == streamed  # the stream's signature_delta is folded into its thinking block
    assert list(plain.blocks) == content
    assert plain.blocks[0]["signature"] == SIGNATURE
    assert plain.reasoning == THINKING["thinking"]
    assert plain.tool_calls == (ToolCall("tu_1", "weather", {"city": "Oslo"}),)
    assert plain.finish is None


def test_kept_blocks_go_back_unchanged_before_the_tool_results(sdks):
    """The assistant turn of a reply with thinking is sent as the API gave it: thinking (its signature intact) and
    redacted thinking first, then the tool_use block; an empty text block is left out (the API refuses one)."""
    content = [THINKING, REDACTED, {"type": "text", "text": ""},
               {"type": "tool_use", "id": "tu_1", "name": "weather", "input": {"city": "Oslo"}}]  # fmt: skip
    messages = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": "", "blocks": content,
         "tool_calls": [{"id": "tu_1", "name": "weather", "arguments": {"city": "Oslo"}}]},
        {"role": "tool", "tool_call_id": "tu_1", "name": "weather", "content": "rain, 8C"},
    ]  # fmt: skip
    sdks.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("Rain."))

    provider("anthropic").complete(llm.request(messages))

    sent = sdks.requests[-1].json()["messages"]
    assert sent[1] == {"role": "assistant", "content": [THINKING, REDACTED, content[3]]}
    assert sent[2]["content"][0] == {"type": "tool_result", "tool_use_id": "tu_1", "content": "rain, 8C"}


def test_blocks_are_not_sent_to_openai(sdks):
    """Only the Messages API takes blocks back; Chat Completions gets the text and tool calls as always."""
    messages = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello", "tool_calls": [], "blocks": [THINKING]},
        {"role": "user", "content": "Again"},
    ]
    sdks.add("POST", OPENAI_PATH, json=llm.openai_text("Hi again."))
    provider("openai").complete(llm.request(messages))
    assert json.dumps(sdks.requests[-1].json()).count("signature") == 0
