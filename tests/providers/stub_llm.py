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
