"""OpenAI Chat Completions, and the OpenAI-compatible APIs of xAI, Hugging Face and OpenRouter (one adapter)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import httpx2
import openai
from django.conf import settings

from agents.engine import parts
from agents.engine.types import Finish, ModelError, ModelReply, ModelRequest, ToolCall, ToolSpec, Usage
from agents.providers import _common, streaming
from agents.providers.names import named_back, wire_name
from agents.providers.transport import Transport

ERRORS = _common.SdkErrors(
    base=openai.OpenAIError,
    status=openai.APIStatusError,
    timeout=openai.APITimeoutError,
    connection=openai.APIConnectionError,
    transport=(httpx2.HTTPError, httpx2.StreamError, httpx2.InvalidURL),
    transient=(httpx2.TimeoutException, httpx2.NetworkError, httpx2.RemoteProtocolError),
)


class OpenAIProvider(_common.KeyedProvider):
    """OpenAI's Chat Completions API; subclasses only change names, settings and defaults."""

    name = "openai"
    default_model = "gpt-4.1-mini"
    vision = True  # its models, xAI's grok-4 and OpenRouter's default take images (AGENT_VISION_MODELS_* narrows it)
    documents = True  # PDFs as `file` parts: OpenAI's models and OpenRouter's (AGENT_DOCUMENT_MODELS_* narrows it)
    key_setting = "OPENAI_API_KEY"
    base_url_setting = "OPENAI_BASE_URL"
    default_base_url = "https://api.openai.com/v1"

    def client(self) -> openai.OpenAI:
        """The cached SDK client for the current (provider, base URL, key)."""
        key, base_url = self.api_key(), self.base_url()
        client: openai.OpenAI = _common.cached_client(self.name, base_url, key, lambda: build_client(base_url, key))
        return client

    def complete(self, request: ModelRequest) -> ModelReply:
        """One Chat Completions call; ModelError with a safe message on any failure."""
        budget = _common.call_budget(self.name, request.timeout_s)
        client = self.client()
        payload = self.payload(request, stream=request.on_text is not None)
        if request.on_text is not None:
            streamed = streaming.stream_call(
                self.name,
                ERRORS,
                budget,
                request,
                lambda: _common.post_stream(client, "/chat/completions", payload, budget, openai.Stream[Any]),
                lambda: streaming.OpenAIStream(self.name, request.on_text),
            )
            return named_back(parse_reply(self.name, streamed), request.tools)

        def call() -> bytes:
            """The raw reply body (parsed and shape-checked by us, not by the SDK)."""
            return _common.post_json(client, "/chat/completions", payload, budget, httpx2.Response)

        body = _common.run_call(self.name, ERRORS, budget, call)
        return named_back(parse_reply(self.name, _common.parse_json_body(self.name, body)), request.tools)

    max_tokens_field = "max_completion_tokens"

    def payload(self, request: ModelRequest, stream: bool = False) -> bytes:
        """The request body as JSON; the tools part is serialised once per provider instance (once per run).
        `stream`: a streamed reply, its usage in a last chunk."""
        body: dict[str, Any] = {"model": self.model, "messages": wire_messages(self.name, request.messages)}
        if stream:
            body |= {"stream": True, "stream_options": {"include_usage": True}}
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.max_output_tokens is not None:  # OpenAI's own name; the compatible APIs know max_tokens
            body[self.max_tokens_field] = request.max_output_tokens
        head = json.dumps(body)
        if request.protocol != "tools" or not request.tools:
            return head.encode()
        return (head[:-1] + ', "tools": ' + self.tools_json(request.tools) + "}").encode()

    def tools_json(self, tools: Sequence[ToolSpec]) -> str:
        names = tuple(t.name for t in tools)
        cache: dict[tuple[str, ...], str] = self.__dict__.setdefault("_tools_json", {})
        if names not in cache:
            cache[names] = json.dumps(wire_tools(tools))
        return cache[names]


class XAIProvider(OpenAIProvider):
    """xAI (Grok) through its OpenAI-compatible API."""

    name = "xai"
    default_model = "grok-4"
    max_tokens_field = "max_tokens"
    documents = False  # its Chat Completions API takes no `file` parts (AGENT_DOCUMENT_MODELS_XAI names any that do)
    key_setting = "XAI_API_KEY"
    base_url_setting = "XAI_BASE_URL"
    default_base_url = "https://api.x.ai/v1"


class HuggingFaceProvider(OpenAIProvider):
    """Hugging Face Inference Providers through the OpenAI-compatible router."""

    name = "huggingface"
    vision = False  # most models the router serves read text only: AGENT_VISION_MODELS_HUGGINGFACE names those that see
    documents = False  # nor do they take `file` parts: AGENT_DOCUMENT_MODELS_HUGGINGFACE names those that do
    max_tokens_field = "max_tokens"
    default_model = "meta-llama/Llama-3.3-70B-Instruct"
    key_setting = "HF_TOKEN"
    base_url_setting = "HF_BASE_URL"
    default_base_url = "https://router.huggingface.co/v1"


class OpenRouterProvider(OpenAIProvider):
    """OpenRouter through its OpenAI-compatible API."""

    name = "openrouter"
    max_tokens_field = "max_tokens"
    default_model = "openai/gpt-4.1-mini"
    key_setting = "OPENROUTER_API_KEY"
    base_url_setting = "OPENROUTER_BASE_URL"
    default_base_url = "https://openrouter.ai/api/v1"


def build_client(base_url: str, api_key: str) -> openai.OpenAI:
    """A new SDK client on our own http client (deadline-aware hooks), with explicit timeout and retries."""
    limits = _common.connection_limits(openai.DEFAULT_CONNECTION_LIMITS)
    transport = Transport(limits=limits)  # idle connections probed with poll(2), not a gevent round trip each
    http_client = openai.DefaultHttpxClient(event_hooks=_common.http_hooks(), limits=limits, transport=transport)
    return openai.OpenAI(
        api_key=api_key,
        base_url=base_url,
        http_client=http_client,
        default_headers=_common.unsent_platform_headers(openai.Omit),
        timeout=float(settings.AGENT_LLM_TIMEOUT_S),
        max_retries=int(settings.AGENT_LLM_MAX_RETRIES),
    )


# --- request ---------------------------------------------------------------------------------------------------


def wire_tools(tools: Sequence[ToolSpec]) -> list[dict[str, Any]]:
    """ToolSpecs as Chat Completions function tools (named for the wire: agents/providers/names.py)."""
    return [
        {
            "type": "function",
            "function": {
                "name": wire_name(t.name),
                "description": t.description,
                "parameters": _common.plain(t.parameters),
            },
        }
        for t in tools
    ]


def wire_messages(name: str, messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Neutral messages as Chat Completions messages."""
    return [wire_message(name, m) for m in messages]


def wire_message(name: str, message: dict[str, Any]) -> dict[str, Any]:
    """One neutral message in the Chat Completions format."""
    role = message.get("role")
    if role == "user" and isinstance(message.get("content"), list):  # images or documents (agents.engine.parts)
        return {"role": "user", "content": [wire_part(p) for p in message["content"]]}
    content = str(message.get("content") or "")
    if role in ("system", "user"):
        return {"role": role, "content": content}
    if role == "tool":
        return {"role": "tool", "tool_call_id": str(message.get("tool_call_id") or ""), "content": content}
    if role != "assistant":
        raise ModelError(f"{name}: unknown message role {str(role)[:20]!r}")
    calls = message.get("tool_calls") or []
    if not calls:
        return {"role": "assistant", "content": content}
    return {"role": "assistant", "content": content or None, "tool_calls": [wire_call(c) for c in calls]}


def wire_part(part: dict[str, Any]) -> dict[str, Any]:
    """A neutral content part as a Chat Completions one: text, an image_url (a base64 image as a data: URL), or a
    document (`wire_file`)."""
    if part.get("type") == "file":
        return wire_file(part)
    if part.get("type") != "image":
        return {"type": "text", "text": str(part.get("text") or "")}
    url = part.get("url") or f"data:{part.get('media_type')};base64,{part.get('data')}"
    return {"type": "image_url", "image_url": {"url": url}}


def wire_file(part: dict[str, Any]) -> dict[str, Any]:
    """A loaded document (docs/documents.md): a PDF as a `file` content part (its base64 as a data: URL, with its
    file name); a text document as a text part that names it (Chat Completions reads text files as text)."""
    name = str(part.get("name") or "document")
    text = parts.document_text(part)
    if text is not None:
        return {"type": "text", "text": f'The document "{name}" ({part.get("media_type")}):\n\n{text}'}
    data_url = f"data:{part.get('media_type')};base64,{part.get('data')}"
    return {"type": "file", "file": {"filename": name, "file_data": data_url}}


def wire_call(call: dict[str, Any]) -> dict[str, Any]:
    """A neutral tool call as a Chat Completions tool call (arguments as a JSON string)."""
    arguments = call.get("arguments")
    raw = arguments["__raw__"] if isinstance(arguments, dict) and set(arguments) == {"__raw__"} else None
    encoded = raw if isinstance(raw, str) else json.dumps(arguments if arguments is not None else {})
    name = call.get("name")
    return {
        "id": str(call.get("id") or ""),
        "type": "function",
        "function": {"name": wire_name(name) if isinstance(name, str) else name, "arguments": encoded},
    }


# --- reply -----------------------------------------------------------------------------------------------------


# finish_reason values that end a reply the unusual way ("stop", "tool_calls" and the old "function_call" are the
# ordinary ones).
FINISHES = {"length": Finish.TRUNCATED, "content_filter": Finish.FILTERED}


def parse_reply(name: str, data: dict[str, Any]) -> ModelReply:
    """A Chat Completions JSON body as a ModelReply; ModelError when its shape is wrong. A reply with a finish
    reason but no content and no tool call is an empty reply (the engine asks the model again)."""
    message = first_message(name, data)
    calls = parse_tool_calls(name, message.get("tool_calls"))
    text = message_text(message.get("content"))
    finish = data["choices"][0].get("finish_reason")
    refusal = message.get("refusal")
    if text is None and not calls and not refusal and not isinstance(finish, str):
        raise ModelError(f"{name}: unexpected reply shape (no content and no tool calls)")
    reply = ModelReply(
        text=text or "", tool_calls=calls, usage=parse_usage(data.get("usage")), reasoning=reasoning(message)
    )
    if refusal or finish in ("length", "content_filter"):  # rare: only then is the reply told apart
        return unusual(reply, refusal, finish)
    return reply


def unusual(reply: ModelReply, refusal: Any, finish: str) -> ModelReply:
    """A reply the model refused (`message.refusal`: its text becomes the reply's text), or one the output limit
    (`finish_reason: length`) or the content filter (`content_filter`) cut short."""
    if refusal:
        said = refusal if isinstance(refusal, str) else json.dumps(refusal)
        return replace(reply, text="\n\n".join(t for t in (reply.text, said) if t), finish=Finish.REFUSED)
    return replace(reply, finish=FINISHES[finish])


def first_message(name: str, data: dict[str, Any]) -> dict[str, Any]:
    """choices[0].message, checked."""
    choices = data.get("choices")
    if not choices and isinstance(data.get("error"), dict):
        code = data["error"].get("code")
        suffix = f" (code {code})" if isinstance(code, int | str) and len(str(code)) < 20 else ""
        raise ModelError(f"{name}: the provider returned an error{suffix}", retryable=_common.status_retryable(code))
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ModelError(f"{name}: unexpected reply shape (no choices)")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise ModelError(f"{name}: unexpected reply shape (no message)")
    return message


def message_text(content: Any) -> str | None:
    """The message content as text (a string, or a list of text parts); None when there is none."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [str(p["text"]) for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        return "".join(parts) if parts else None
    return None


def parse_tool_calls(name: str, raw: Any) -> tuple[ToolCall, ...]:
    """The message's tool calls, in order; arguments parsed from their JSON string."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ModelError(f"{name}: unexpected reply shape (tool_calls is not a list)")
    calls = []
    for index, item in enumerate(raw):
        function = item.get("function") if isinstance(item, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise ModelError(f"{name}: unexpected reply shape (tool call without a function name)")
        call_id = item.get("id") if isinstance(item.get("id"), str) and item.get("id") else f"call_{index}"
        calls.append(ToolCall(id=call_id, name=function["name"], arguments=parse_arguments(function.get("arguments"))))
    return tuple(calls)


def parse_arguments(raw: Any) -> dict[str, Any]:
    """Tool-call arguments as a dict; {"__raw__": text} when they are not a JSON object."""
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}
    text = raw if isinstance(raw, str) else json.dumps(raw)
    try:
        parsed = json.loads(text)
    except ValueError:
        return {"__raw__": text}
    return parsed if isinstance(parsed, dict) else {"__raw__": text}


def parse_usage(raw: Any) -> Usage:
    """prompt/completion tokens, and the part of the prompt read from the prompt cache
    (`prompt_tokens_details.cached_tokens`, priced lower); 0 when absent."""
    if not isinstance(raw, dict):
        return Usage()
    prompt = _common.as_int(raw.get("prompt_tokens"))
    details = raw.get("prompt_tokens_details")
    cached = _common.as_int(details.get("cached_tokens")) if isinstance(details, dict) else 0
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=_common.as_int(raw.get("completion_tokens")),
        cached_tokens=min(cached, prompt),
    )


def reasoning(message: dict[str, Any]) -> str | None:
    """A reasoning field of OpenAI-compatible APIs (`reasoning_content`, `reasoning`), kept out of the text."""
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None
