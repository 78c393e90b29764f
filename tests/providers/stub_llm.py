"""Scripted OpenAI Chat Completions and Anthropic Messages replies for the generic HTTP stub."""

from __future__ import annotations

import json
from typing import Any

from agents.engine.types import ModelRequest, ToolSpec

OPENAI_PATH = "/v1/chat/completions"
COMPAT_PATH = "/api/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"

WEATHER = ToolSpec(
    name="weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CALC = ToolSpec(
    name="calc",
    description="Evaluate an arithmetic expression.",
    parameters={"type": "object", "properties": {"expr": {"type": "string"}}, "required": ["expr"]},
)


def fake_key(prefix: str = "sk-test-") -> str:
    """A fake key built at runtime (never a real one)."""
    return prefix + "x" * 8


def request(
    messages: list[dict[str, Any]] | None = None,
    *,
    protocol: str = "tools",
    tools: list[ToolSpec] | None = None,
    timeout_s: float = 60.0,
) -> ModelRequest:
    """A ModelRequest with a default one-line conversation and the two test tools."""
    msgs = messages if messages is not None else [{"role": "user", "content": "Hi"}]
    return ModelRequest(
        messages=msgs, tools=[WEATHER, CALC] if tools is None else tools, protocol=protocol, timeout_s=timeout_s
    )


def tool_turn_messages() -> list[dict[str, Any]]:
    """system, user, an assistant turn with two tool calls, their two results, then a user nudge."""
    return [
        {"role": "system", "content": "You are terse."},
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather in Oslo and 2+2?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {"id": "call_a", "name": "weather", "arguments": {"city": "Oslo"}},
                {"id": "call_b", "name": "calc", "arguments": {"expr": "2+2"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "name": "weather", "content": "rain, 8C"},
        {"role": "tool", "tool_call_id": "call_b", "name": "calc", "content": "4"},
        {"role": "user", "content": "Now answer."},
    ]


# --- OpenAI Chat Completions -----------------------------------------------------------------------------------


def openai_usage(prompt: int, completion: int) -> dict[str, int]:
    """A Chat Completions usage object."""
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def openai_message(
    message: dict[str, Any], usage: dict[str, int] | None = None, finish: str = "stop"
) -> dict[str, Any]:
    """A Chat Completions body around one assistant message."""
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "gpt-test",
        "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
    }
    if usage is not None:
        body["usage"] = usage
    return body


def openai_text(text: str, usage: dict[str, int] | None = None, **extra: Any) -> dict[str, Any]:
    """A plain answer; `extra` adds message fields such as reasoning_content."""
    return openai_message({"content": text, **extra}, usage)


def openai_tool_calls(
    calls: list[tuple[str, str, dict[str, Any] | str]], text: str | None = None, usage: dict[str, int] | None = None
) -> dict[str, Any]:
    """Tool calls as (id, name, arguments); dict arguments are JSON-encoded, strings are sent as they are."""
    wired = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
        }
        for call_id, name, args in calls
    ]
    return openai_message({"content": text, "tool_calls": wired}, usage, finish="tool_calls")


def openai_error(message: str = "error", kind: str = "server_error") -> dict[str, Any]:
    """An OpenAI error body."""
    return {"error": {"message": message, "type": kind, "code": None}}


# --- Anthropic Messages ----------------------------------------------------------------------------------------


def anthropic_usage(inp: int, out: int, cache_creation: int = 0, cache_read: int = 0) -> dict[str, int]:
    """A Messages usage object."""
    return {
        "input_tokens": inp,
        "output_tokens": out,
        "cache_creation_input_tokens": cache_creation,
        "cache_read_input_tokens": cache_read,
    }


def anthropic_message(
    blocks: list[dict[str, Any]], usage: dict[str, int] | None = None, stop: str = "end_turn"
) -> dict[str, Any]:
    """A Messages body around content blocks."""
    body: dict[str, Any] = {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
    }
    if usage is not None:
        body["usage"] = usage
    return body


def anthropic_text(text: str, usage: dict[str, int] | None = None, thinking: str | None = None) -> dict[str, Any]:
    """A plain answer, optionally after a thinking block."""
    blocks: list[dict[str, Any]] = []
    if thinking is not None:
        blocks.append({"type": "thinking", "thinking": thinking, "signature": "sig"})
    blocks.append({"type": "text", "text": text})
    return anthropic_message(blocks, usage)


def anthropic_tool_use(
    calls: list[tuple[str, str, dict[str, Any]]], text: str | None = None, usage: dict[str, int] | None = None
) -> dict[str, Any]:
    """tool_use blocks as (id, name, input), optionally after a text block."""
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [{"type": "tool_use", "id": i, "name": n, "input": args} for i, n, args in calls]
    return anthropic_message(blocks, usage, stop="tool_use")


def anthropic_error(kind: str = "api_error", message: str = "error") -> dict[str, Any]:
    """An Anthropic error body."""
    return {"type": "error", "error": {"type": kind, "message": message}}


# --- streaming, as the API references document it ------------------------------------------------------------


def sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def pieces(text: str, size: int = 3) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or []


def openai_stream(body: dict[str, Any], size: int = 3, interleave: bool = True) -> list[bytes]:
    """A Chat Completions body as `chat.completion.chunk` events: the content (or refusal) in pieces of `size`
    characters, each tool call's arguments split across chunks (several calls interleaved by index), the finish
    reason, then a usage chunk with empty `choices` (stream_options.include_usage), then `[DONE]`."""
    choice = body["choices"][0]
    message, head = choice["message"], {"id": body.get("id", "chatcmpl-test"), "object": "chat.completion.chunk",
                                        "created": 1700000000, "model": body.get("model", "gpt-test")}  # fmt: skip

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        return sse({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    out = [chunk({"role": "assistant", "content": ""})]
    for key in ("reasoning_content", "reasoning"):
        if isinstance(message.get(key), str):
            out += [chunk({key: piece}) for piece in pieces(message[key], size)]
    out += [chunk({"content": piece}) for piece in pieces(message.get("content") or "", size)]
    out += [chunk({"refusal": piece}) for piece in pieces(message.get("refusal") or "", size)]
    calls = message.get("tool_calls") or []
    for index, call in enumerate(calls):  # the opening piece of each call: id, name, no arguments yet
        function = {"name": call["function"]["name"], "arguments": ""}
        out.append(
            chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function", "function": function}]})
        )
    split = [pieces(call["function"]["arguments"], size) for call in calls]
    rounds = max((len(p) for p in split), default=0)
    order = (
        [(i, r) for r in range(rounds) for i in range(len(calls))]
        if interleave
        else [(i, r) for i in range(len(calls)) for r in range(rounds)]
    )
    for index, r in order:
        if r < len(split[index]):
            out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": split[index][r]}}]}))
    out.append(chunk({}, choice.get("finish_reason") or "stop"))
    if body.get("usage") is not None:
        out.append(sse({**head, "choices": [], "usage": body["usage"]}))
    return [*out, sse("[DONE]")]


def anthropic_stream(body: dict[str, Any], size: int = 3) -> list[bytes]:
    """A Messages body as its stream: message_start (with the input usage), each block's start, deltas (text_delta,
    input_json_delta pieces, thinking_delta then signature_delta) and stop, message_delta (stop reason, output
    usage), message_stop. A tool_use block whose `input` is a string streams that text (a call cut off)."""
    usage = dict(body.get("usage") or {})
    start_usage = {k: v for k, v in usage.items() if k != "output_tokens"} | {"output_tokens": 1}
    message = {k: v for k, v in body.items() if k not in ("content", "usage", "stop_reason")}
    out = [sse({"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                    "usage": start_usage}}, "message_start")]  # fmt: skip
    out.append(sse({"type": "ping"}, "ping"))
    for index, block in enumerate(body["content"]):
        kind = block["type"]
        if kind == "text":
            opening, deltas = (
                {"type": "text", "text": ""},
                [{"type": "text_delta", "text": p} for p in pieces(block["text"], size)],
            )
        elif kind == "thinking":
            opening = {"type": "thinking", "thinking": ""}
            deltas = [{"type": "thinking_delta", "thinking": p} for p in pieces(block["thinking"], size)]
            deltas.append({"type": "signature_delta", "signature": block.get("signature", "sig")})
        elif kind in ("tool_use", "server_tool_use"):
            opening = {"type": kind, "id": block["id"], "name": block["name"], "input": {}}
            text = block["input"] if isinstance(block["input"], str) else json.dumps(block["input"])  # str: cut off
            deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces(text, size)]
        else:  # redacted_thinking, a server tool's result: whole in the block's start event
            opening, deltas = block, []
        out.append(
            sse({"type": "content_block_start", "index": index, "content_block": opening}, "content_block_start")
        )
        out += [sse({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta") for d in deltas]
        out.append(sse({"type": "content_block_stop", "index": index}, "content_block_stop"))
    delta = {"type": "message_delta", "delta": {"stop_reason": body.get("stop_reason"), "stop_sequence": None},
             "usage": {"output_tokens": usage.get("output_tokens", 0)}}  # fmt: skip
    out.append(sse(delta, "message_delta"))
    return [*out, sse({"type": "message_stop"}, "message_stop")]


def as_stream(payload: bytes) -> list[bytes]:
    """A scripted non-streamed reply body as the stream its API would have sent instead."""
    body = json.loads(payload)
    if body.get("type") == "message":
        return anthropic_stream(body)
    return openai_stream(body)


def burst(provider: Any, calls: int) -> None:
    """`calls` concurrent model calls through one provider (its one SDK client), waited for."""
    import threading

    threads = [threading.Thread(target=provider.complete, args=(request(),)) for _ in range(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)


def point_sdks_at(settings, stub, *, timeout_s: float | None = 5.0, retries: int | None = None):
    """Both SDK providers (openai, anthropic) pointed at the local stub with test keys; returns the stub."""
    settings.OPENAI_API_KEY = fake_key()
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    settings.ANTHROPIC_API_KEY = fake_key("sk-ant-test-")
    settings.ANTHROPIC_BASE_URL = stub.url
    if timeout_s is not None:
        settings.AGENT_LLM_TIMEOUT_S = timeout_s
    if retries is not None:
        settings.AGENT_LLM_MAX_RETRIES = retries
    return stub
