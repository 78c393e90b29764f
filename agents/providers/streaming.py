"""Streamed replies, assembled into the body a non-streamed call would have returned.

Chat Completions with `stream=True` sends `data:` lines of `chat.completion.chunk` objects (text in
`choices[0].delta.content`, a refusal in `delta.refusal`, tool calls as fragments keyed by `index`, the usage in a
last chunk with empty `choices` when `stream_options.include_usage` is set) and ends with `data: [DONE]`. The Messages
API sends `event:`/`data:` pairs: `message_start` (with the input usage), `content_block_start`/`_delta`/`_stop`
(text, `input_json_delta` pieces of a tool call's input, thinking and its `signature_delta`), `message_delta` (stop
reason, output usage) and `message_stop`.

Each assembler turns those into the same JSON body as the non-streamed reply, so the providers' own `parse_reply`
reads both: a streamed call commits exactly the step, usage and trace a non-streamed one does. No SDK is imported.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from agents.engine.types import CallStopped, ModelError, StopReason, Usage
from agents.providers import _common
from agents.providers._common import as_int

log = logging.getLogger(__name__)

# How often, at most, a streamed call asks the host whether it should stop (a cancellation check may be a query).
INTERRUPT_CHECK_S = 0.25

TextSink = Callable[[str], None]

# The Messages API's error types (in an `error` event of a stream that had begun) that a fallback model may not meet:
# its 429, 500, 504 and 529 (overloaded) as the stream reports them.
RETRYABLE_ERRORS = frozenset({"rate_limit_error", "api_error", "timeout_error", "overloaded_error"})


class StreamCut(Exception):
    """The stream ended before the provider said it was complete (no `[DONE]` / `message_stop`): retryable."""


def sse_events(lines: Iterable[str]) -> Iterator[tuple[str, str]]:
    """(event, data) pairs of a text/event-stream, as the SSE specification frames them (comments skipped,
    multi-line data joined with newlines, `event` defaulting to "message")."""
    event, data = "", list[str]()
    for line in lines:
        if not line:
            if data:
                yield event or "message", "\n".join(data)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    if data:
        yield event or "message", "\n".join(data)


def _json(name: str, data: str) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except ValueError:
        raise ModelError(f"{name}: malformed stream chunk (not JSON)") from None
    if not isinstance(value, dict):
        raise ModelError(f"{name}: malformed stream chunk (not a JSON object)")
    return value


class OpenAIStream:
    """Chat Completions chunks, folded into one `chat.completion` body."""

    def __init__(self, name: str, on_text: TextSink | None = None) -> None:
        self.name, self.on_text = name, on_text
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.refusal: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        self.finish: str | None = None
        self.done = False
        self.emitted = False

    def feed(self, event: str, data: str) -> None:
        if data.strip() == "[DONE]":
            self.done = True
            return
        chunk = _json(self.name, data)
        if isinstance(chunk.get("error"), dict):
            code = chunk["error"].get("code")
            suffix = f" (code {code})" if isinstance(code, int | str) and len(str(code)) < 20 else ""
            raise ModelError(
                f"{self.name}: the provider returned an error{suffix}", retryable=_common.status_retryable(code)
            )
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if isinstance(choice.get("finish_reason"), str):
                self.finish = choice["finish_reason"]
            delta = choice.get("delta")
            if isinstance(delta, dict):
                self._delta(delta)

    def _delta(self, delta: dict[str, Any]) -> None:
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.text.append(content)
            if self.on_text is not None:
                self.emitted = True
                self.on_text(content)
        for key in ("reasoning_content", "reasoning"):
            if isinstance(delta.get(key), str):
                self.reasoning.append(delta[key])
        if isinstance(delta.get("refusal"), str):  # a refusal comes instead of content, in pieces as content does
            self.refusal.append(delta["refusal"])
        for piece in delta.get("tool_calls") or []:
            if not isinstance(piece, dict):
                continue
            index = piece.get("index", len(self.calls))
            call = self.calls.setdefault(index if isinstance(index, int) else len(self.calls), {"arguments": []})
            if isinstance(piece.get("id"), str) and piece["id"]:
                call["id"] = piece["id"]
            function = piece.get("function")
            if isinstance(function, dict):
                if isinstance(function.get("name"), str) and function["name"]:
                    call["name"] = call.get("name", "") + function["name"]
                if isinstance(function.get("arguments"), str):
                    call["arguments"].append(function["arguments"])

    def complete(self) -> bool:
        return self.done or self.finish is not None

    def partial_usage(self) -> Usage:
        """As openai_compat.parse_usage reads it (the usage chunk comes last: a stream stopped before has none)."""
        raw = self.usage or {}
        prompt, details = as_int(raw.get("prompt_tokens")), raw.get("prompt_tokens_details")
        cached = as_int(details.get("cached_tokens")) if isinstance(details, dict) else 0
        return Usage(prompt, as_int(raw.get("completion_tokens")), min(cached, prompt))

    def body(self) -> dict[str, Any]:
        """The body a non-streamed call would have returned."""
        if not self.complete():
            raise StreamCut
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.text) if self.text else None}
        if self.reasoning and "".join(self.reasoning).strip():
            message["reasoning_content"] = "".join(self.reasoning)
        if self.refusal and "".join(self.refusal):
            message["refusal"] = "".join(self.refusal)
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": call.get("id", ""),
                    "type": "function",
                    "function": {"name": call.get("name"), "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self.calls.items())
            ]
        body: dict[str, Any] = {"choices": [{"index": 0, "message": message, "finish_reason": self.finish}]}
        if self.usage is not None:
            body["usage"] = self.usage
        return body


class AnthropicStream:
    """Messages stream events, folded into one `message` body."""

    def __init__(self, name: str, on_text: TextSink | None = None) -> None:
        self.name, self.on_text = name, on_text
        self.blocks: dict[int, dict[str, Any]] = {}
        self.json: dict[int, list[str]] = {}
        self.usage: dict[str, Any] = {}
        self.stop: str | None = None
        self.done = False
        self.emitted = False

    def feed(self, event: str, data: str) -> None:
        if event == "ping":
            return
        value = _json(self.name, data)
        kind = value.get("type", event)
        if kind == "error":
            error = value.get("error")
            retryable = isinstance(error, dict) and error.get("type") in RETRYABLE_ERRORS
            raise ModelError(f"{self.name}: the provider returned an error mid-stream", retryable=retryable)
        if kind == "message_start":
            message = value.get("message")
            if isinstance(message, dict) and isinstance(message.get("usage"), dict):
                self.usage.update(message["usage"])
        elif kind == "content_block_start":
            block = value.get("content_block")
            if isinstance(block, dict):
                self.blocks[int(value.get("index", len(self.blocks)))] = dict(block)
        elif kind == "content_block_delta":
            self._delta(int(value.get("index", 0)), value.get("delta"))
        elif kind == "message_delta":
            delta = value.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self.stop = delta["stop_reason"]
            if isinstance(value.get("usage"), dict):
                self.usage.update({k: v for k, v in value["usage"].items() if v is not None})
        elif kind == "message_stop":
            self.done = True

    def _delta(self, index: int, delta: Any) -> None:
        if not isinstance(delta, dict):
            return
        block = self.blocks.setdefault(index, {"type": "text", "text": ""})
        match delta.get("type"):
            case "text_delta" if isinstance(delta.get("text"), str):
                block["text"] = block.get("text", "") + delta["text"]
                if self.on_text is not None and delta["text"]:
                    self.emitted = True
                    self.on_text(delta["text"])
            case "input_json_delta" if isinstance(delta.get("partial_json"), str):
                self.json.setdefault(index, []).append(delta["partial_json"])
            case "thinking_delta" if isinstance(delta.get("thinking"), str):
                block["thinking"] = block.get("thinking", "") + delta["thinking"]
            case "signature_delta" if isinstance(delta.get("signature"), str):  # once, just before the block's stop
                block["signature"] = delta["signature"]
            case "citations_delta" if isinstance(delta.get("citation"), dict):
                block.setdefault("citations", []).append(delta["citation"])

    def complete(self) -> bool:
        return self.done

    def partial_usage(self) -> Usage:
        """As anthropic_provider.parse_usage reads it: the input (cache reads included) is known from message_start."""
        u = self.usage
        cached, written = as_int(u.get("cache_read_input_tokens")), as_int(u.get("cache_creation_input_tokens"))
        prompt = as_int(u.get("input_tokens")) + written + cached
        return Usage(prompt, as_int(u.get("output_tokens")), cached, written)

    def body(self) -> dict[str, Any]:
        if not self.complete():
            raise StreamCut
        content = []
        for index, block in sorted(self.blocks.items()):
            if block.get("type") in ("tool_use", "server_tool_use"):
                block = dict(block)
                text = "".join(self.json.get(index, []))
                if text.strip():
                    try:
                        block["input"] = json.loads(text)
                    except ValueError:
                        block["input"] = {"__raw__": text}
                    if not isinstance(block["input"], dict):
                        block["input"] = {"__raw__": text}
                elif not isinstance(block.get("input"), dict):
                    block["input"] = {}
            content.append(block)
        return {"type": "message", "content": content, "usage": self.usage, "stop_reason": self.stop}


def stream_call(
    name: str,
    errors: _common.SdkErrors,
    budget: _common.Budget,
    request: Any,
    open_response: Callable[[], Any],
    assembler: Callable[[], Any],
) -> dict[str, Any]:
    """One streamed call under the deadline: the assembled body (as a non-streamed call returns it).

    The SDK retries the request itself (a status, a refused connection) as it does for a plain call. A stream that
    breaks off after it began (a transport error, or an end before the provider said it was complete) is retried
    here within the same budget of attempts, after `request.on_retry()` when some text had gone out. Between chunks
    the deadline is checked and, every INTERRUPT_CHECK_S, `request.interrupted()`: CallStopped with the usage
    reported so far. Every other failure is a safe ModelError, as for a plain call.
    """
    with _common.deadline_scope(budget) as state:
        retries = 0
        while True:
            folded = assembler()
            response = _open(name, open_response, errors, budget, state)
            try:
                return _read(name, response, folded, budget, request)
            except (StreamCut, errors.base, *errors.transport) as exc:  # type: ignore[misc]
                _raise_unless_retrying(name, exc, errors, budget, state, retries)
                retries += 1
                if folded.emitted and request.on_retry is not None:
                    request.on_retry()
            finally:
                response.close()


def _open(
    name: str,
    open_response: Callable[[], Any],
    errors: _common.SdkErrors,
    budget: _common.Budget,
    state: _common.CallState,
) -> Any:
    """The response of one attempt; the SDK has already retried what it retries, so a failure here is final."""
    try:
        return open_response()
    except (errors.base, ValueError, *errors.transport) as exc:  # type: ignore[misc]
        raise _common.failed(name, exc, errors, budget, state.attempts) from None


def _read(name: str, response: Any, folded: Any, budget: _common.Budget, request: Any) -> dict[str, Any]:
    """One opened response, read to its end: the assembled body. Between chunks the deadline is checked and, every
    INTERRUPT_CHECK_S, `request.interrupted()` (CallStopped with the usage reported so far)."""
    checked = time.monotonic()
    if "json" in response.headers.get("content-type", ""):
        return _whole(name, response, request)
    lines = response.iter_lines()
    for event, data in sse_events(lines):
        folded.feed(event, data)
        now = time.monotonic()
        if now >= budget.deadline:
            raise CallStopped(StopReason.TIMEOUT, folded.partial_usage())
        if request.interrupted is not None and now - checked >= INTERRUPT_CHECK_S:
            checked = now
            if request.interrupted():
                raise CallStopped(StopReason.CANCELLED, folded.partial_usage())
        if folded.complete() and data.strip() == "[DONE]":
            for _ in lines:  # the body's end, as the SDK's own Stream reads it: the connection is kept
                pass
            break
    body: dict[str, Any] = folded.body()
    return body


def _raise_unless_retrying(
    name: str, exc: Exception, errors: _common.SdkErrors, budget: _common.Budget, state: _common.CallState, retries: int
) -> None:
    """A broken stream is tried again while attempts and time are left; else the safe ModelError for it."""
    if retries < budget.max_retries and state.left() >= _common.MIN_RETRY_WINDOW_S:
        return
    if isinstance(exc, StreamCut):
        log.warning("LLM call failed: %s: the stream ended early", name)
        raise ModelError(f"{name}: the reply stream ended early", retryable=True) from None
    raise _common.failed(name, exc, errors, budget, state.attempts) from None


def _whole(name: str, response: Any, request: Any) -> dict[str, Any]:
    """A server that answered a streaming request with the whole reply (some OpenAI-compatible servers ignore
    `stream`): that body, as a plain call reads it, its text handed on in one piece."""
    try:
        body = json.loads(response.read())
    except ValueError:
        raise ModelError(f"{name}: malformed response (not JSON)") from None
    if not isinstance(body, dict):
        raise ModelError(f"{name}: malformed response (not a JSON object)")
    if request.on_text is not None:
        choices = body.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            text = (choices[0].get("message") or {}).get("content")
        else:
            content = body.get("content")
            blocks: list[Any] = content if isinstance(content, list) else []
            text = "".join(b.get("text") or "" for b in blocks if isinstance(b, dict) and b.get("type") == "text")
        if isinstance(text, str) and text:
            request.on_text(text)
    return body
