"""Anthropic's Messages API: top-level system, tool_use/tool_result blocks, strict user/assistant alternation."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import anthropic
import httpx2
from django.conf import settings

from agents.engine import parts
from agents.engine.types import Finish, ModelError, ModelReply, ModelRequest, ToolCall, ToolSpec, Usage
from agents.providers import _common, streaming
from agents.providers.names import named_back, wire_name
from agents.providers.transport import Transport

ERRORS = _common.SdkErrors(
    base=anthropic.AnthropicError,
    status=anthropic.APIStatusError,
    timeout=anthropic.APITimeoutError,
    connection=anthropic.APIConnectionError,
    transport=(httpx2.HTTPError, httpx2.StreamError, httpx2.InvalidURL),
    transient=(httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError),
)
EMPTY_TEXT = "(empty)"


class AnthropicProvider(_common.KeyedProvider):
    """Claude models through the Messages API."""

    name = "anthropic"
    default_model = "claude-sonnet-4-6"  # claude-sonnet-4-5 is deprecated (EOL 2026-11-30) in anthropic 2.14
    vision = True
    documents = True  # PDFs and text as `document` blocks (AGENT_DOCUMENT_MODELS_ANTHROPIC narrows it)
    key_setting = "ANTHROPIC_API_KEY"
    base_url_setting = "ANTHROPIC_BASE_URL"
    default_base_url = "https://api.anthropic.com"
    max_tokens = 2048

    def client(self) -> anthropic.Anthropic:
        """The cached SDK client for the current (base URL, key)."""
        key, base_url = self.api_key(), self.base_url()
        client: anthropic.Anthropic = _common.cached_client(
            self.name, base_url, key, lambda: build_client(base_url, key)
        )
        return client

    def complete(self, request: ModelRequest) -> ModelReply:
        """One Messages call; ModelError with a safe message on any failure."""
        budget = _common.call_budget(self.name, request.timeout_s)
        client = self.client()
        kwargs = build_kwargs(self.model, self.max_tokens, request)
        if request.on_text is not None:
            payload = json.dumps({**kwargs, "stream": True}).encode()
            streamed = streaming.stream_call(
                self.name,
                ERRORS,
                budget,
                request,
                lambda: _common.post_stream(client, "/v1/messages", payload, budget, anthropic.Stream[Any]),
                lambda: streaming.AnthropicStream(self.name, request.on_text),
            )
            return named_back(parse_reply(self.name, streamed), request.tools)
        payload = json.dumps(kwargs).encode()

        def call() -> bytes:
            """The raw reply body (parsed and shape-checked by us, not by the SDK)."""
            return _common.post_json(client, "/v1/messages", payload, budget, httpx2.Response)

        body = _common.run_call(self.name, ERRORS, budget, call)
        return named_back(parse_reply(self.name, _common.parse_json_body(self.name, body)), request.tools)


def build_client(base_url: str, api_key: str) -> anthropic.Anthropic:
    """A new SDK client on our own http client (deadline-aware hooks), with explicit timeout and retries."""
    limits = _common.connection_limits(anthropic.DEFAULT_CONNECTION_LIMITS)
    transport = Transport(limits=limits)  # idle connections probed with poll(2), not a gevent round trip each
    http_client = anthropic.DefaultHttpxClient(event_hooks=_common.http_hooks(), limits=limits, transport=transport)
    return anthropic.Anthropic(
        api_key=api_key,
        base_url=base_url,
        http_client=http_client,
        default_headers=_common.unsent_platform_headers(anthropic.Omit),
        timeout=float(settings.AGENT_LLM_TIMEOUT_S),
        max_retries=int(settings.AGENT_LLM_MAX_RETRIES),
    )


# --- request ---------------------------------------------------------------------------------------------------


# A prompt-cache breakpoint (docs/cost.md#prompt-caching): the prefix up to and including the block that carries it
# is cached for 5 minutes (the default TTL), written at 1.25x the input price, read at 0.1x. Anthropic renders tools,
# then system, then messages: a breakpoint on the last tool caches the tools, one on the system prompt both.
CACHE_CONTROL = {"type": "ephemeral"}


def build_kwargs(model: str, max_tokens: int, request: ModelRequest) -> dict[str, Any]:
    """Arguments of messages.create: system top level, tools only in the tools protocol; with `prompt_cache`, the
    system prompt (as one text block) and the last tool carry a cache breakpoint. Both are the same bytes every turn
    of a run (the system prompt and the tool specs do not change), so every call after the first reads them."""
    system, messages = wire_messages(request.messages)
    limit = request.max_output_tokens if request.max_output_tokens is not None else max_tokens
    kwargs: dict[str, Any] = {"model": model, "max_tokens": limit, "messages": messages}
    if request.temperature is not None:  # the Messages API takes it (the SDK's create() no longer does)
        kwargs["temperature"] = request.temperature
    if system:
        kwargs["system"] = cached_system(system) if request.prompt_cache else system
    if request.protocol == "tools" and request.tools:
        kwargs["tools"] = wire_tools(request.tools, cache=request.prompt_cache)
    return kwargs


def cached_system(system: str) -> list[dict[str, Any]]:
    """The system prompt as text blocks, a cache breakpoint on the last (cache_control takes blocks, not a string)."""
    return [{"type": "text", "text": system, "cache_control": dict(CACHE_CONTROL)}]


def wire_tools(tools: Sequence[ToolSpec], cache: bool = False) -> list[dict[str, Any]]:
    """ToolSpecs as Anthropic tools (input_schema must be an object schema; names for the wire: providers/names.py);
    with `cache`, a cache breakpoint on the last one (it caches every tool before it too)."""
    wired = []
    for tool in tools:
        schema = _common.plain(tool.parameters) or {}
        schema.setdefault("type", "object")
        wired.append({"name": wire_name(tool.name), "description": tool.description, "input_schema": schema})
    if cache and wired:
        wired[-1]["cache_control"] = dict(CACHE_CONTROL)
    return wired


def wire_messages(messages: Sequence[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(system text, alternating user/assistant turns) from neutral messages."""
    system: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "system":
            system.append(str(message.get("content") or ""))
            continue
        role, blocks = to_blocks(message)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return "\n\n".join(s for s in system if s.strip()), finish_turns(turns)


def to_blocks(message: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """One neutral message as (Anthropic role, content blocks); tool results are user-side blocks."""
    role = message.get("role")
    if role == "user" and isinstance(message.get("content"), list):  # images or documents (agents.engine.parts)
        shown = [p for p in message["content"] if p.get("type") in ("image", "file") or p.get("text")]
        return "user", [wire_part(p) for p in shown]
    text = str(message.get("content") or "")
    if role == "tool":
        block = {"type": "tool_result", "tool_use_id": str(message.get("tool_call_id") or ""), "content": text}
        return "user", [block]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text.strip() else []
    if role == "user":
        return "user", blocks
    if role != "assistant":
        raise ModelError(f"anthropic: unknown message role {str(role)[:20]!r}")
    if message.get("blocks"):  # the reply's own blocks, as the API gave them (thinking keeps its signature)
        kept = [b for b in message["blocks"] if b.get("type") != "text" or str(b.get("text") or "").strip()]
        return "assistant", [dict(b) for b in kept]
    for call in message.get("tool_calls") or []:
        arguments = call.get("arguments")
        tool_input = arguments if isinstance(arguments, dict) else {}
        name = call.get("name")
        name = wire_name(name) if isinstance(name, str) else name
        blocks.append({"type": "tool_use", "id": str(call.get("id") or ""), "name": name, "input": tool_input})
    return "assistant", blocks


def wire_part(part: dict[str, Any]) -> dict[str, Any]:
    """A neutral content part as an Anthropic block: text, an image from base64 data or from a URL, or a document
    (`wire_document`)."""
    if part.get("type") == "file":
        return wire_document(part)
    if part.get("type") != "image":
        return {"type": "text", "text": str(part.get("text") or "")}
    if part.get("url"):
        return {"type": "image", "source": {"type": "url", "url": part["url"]}}
    source = {"type": "base64", "media_type": part.get("media_type"), "data": part.get("data")}
    return {"type": "image", "source": source}


def wire_document(part: dict[str, Any]) -> dict[str, Any]:
    """A loaded document (docs/documents.md) as a `document` block titled with its name: a PDF from a base64 source,
    a text document from a text source (the Messages API's text source is text/plain, whatever kind of text)."""
    text = parts.document_text(part)
    if text is not None:
        source: dict[str, Any] = {"type": "text", "media_type": "text/plain", "data": text}
    else:
        source = {"type": "base64", "media_type": "application/pdf", "data": part.get("data")}
    block: dict[str, Any] = {"type": "document", "source": source}
    if part.get("name"):
        block["title"] = str(part["name"])
    return block


def finish_turns(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool results first in each user turn, no empty turn, and a user turn first."""
    for turn in turns:
        turn["content"].sort(key=lambda block: block["type"] != "tool_result")  # stable: keeps their order
        if not turn["content"]:
            turn["content"] = [{"type": "text", "text": EMPTY_TEXT}]
    if turns and turns[0]["role"] != "user":
        turns.insert(0, {"role": "user", "content": [{"type": "text", "text": EMPTY_TEXT}]})
    return turns


# --- reply -----------------------------------------------------------------------------------------------------


# stop_reason values that end a reply the unusual way ("end_turn", "tool_use" and "stop_sequence" are the ordinary
# ones). `model_context_window_exceeded`: the reply filled the model's context window, cut off as by max_tokens.
FINISHES = {
    "max_tokens": Finish.TRUNCATED,
    "model_context_window_exceeded": Finish.TRUNCATED,
    "refusal": Finish.REFUSED,
    "pause_turn": Finish.PAUSED,
}


def parse_reply(name: str, data: dict[str, Any]) -> ModelReply:
    """A Messages JSON body as a ModelReply; ModelError when its shape is wrong.

    A reply with blocks the request side cannot rebuild from text and tool calls (thinking and redacted_thinking
    with their signatures, server tool blocks), or a paused one, keeps its content blocks as they came: they go back
    unchanged in the next request."""
    content = data.get("content")
    if data.get("type") == "error" or not isinstance(content, list):
        raise ModelError(f"{name}: unexpected reply shape (no content list)")
    texts, thinking, calls, other = _read_blocks(name, content)
    stop = data.get("stop_reason")
    finish = FINISHES.get(stop) if isinstance(stop, str) else None
    return ModelReply(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=parse_usage(data.get("usage")),
        reasoning="\n".join(t for t in thinking if t.strip()) or None,
        finish=finish,
        blocks=tuple(content) if other or finish == Finish.PAUSED else (),
    )


def _read_blocks(name: str, content: list[Any]) -> tuple[list[str], list[str], list[ToolCall], bool]:
    """A reply's content blocks: its texts, its thinking, its tool calls, and whether any block is of another kind
    (thinking included) that only the blocks themselves can send back."""
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    other = False
    for block in content:
        if not isinstance(block, dict):
            raise ModelError(f"{name}: unexpected reply shape (content block is not an object)")
        kind = block.get("type")
        if kind == "text":
            if isinstance(block.get("text"), str):
                texts.append(block["text"])
        elif kind == "tool_use":
            calls.append(parse_tool_use(name, block))
        else:
            other = True
            if kind == "thinking" and isinstance(block.get("thinking"), str):
                thinking.append(block["thinking"])
    return texts, thinking, calls, other


def parse_tool_use(name: str, block: dict[str, Any]) -> ToolCall:
    """A tool_use block as a ToolCall; its input is already a dict."""
    call_id, tool = block.get("id"), block.get("name")
    if not isinstance(call_id, str) or not call_id or not isinstance(tool, str) or not tool:
        raise ModelError(f"{name}: unexpected reply shape (tool_use without id or name)")
    raw = block.get("input")
    arguments = raw if isinstance(raw, dict) else ({} if raw is None else {"__raw__": json.dumps(raw)})
    return ToolCall(id=call_id, name=tool, arguments=arguments)


def parse_usage(raw: Any) -> Usage:
    """input (+ cache creation + cache read) and output tokens; the cache reads are also `cached_tokens` (priced
    lower), the cache creation `cache_write_tokens` (priced higher); 0 when absent."""
    if not isinstance(raw, dict):
        return Usage()
    cached = _common.as_int(raw.get("cache_read_input_tokens"))
    written = _common.as_int(raw.get("cache_creation_input_tokens"))
    prompt = _common.as_int(raw.get("input_tokens")) + written + cached
    output = _common.as_int(raw.get("output_tokens"))
    return Usage(prompt_tokens=prompt, completion_tokens=output, cached_tokens=cached, cache_write_tokens=written)
