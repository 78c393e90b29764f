"""Value types shared by the engine, the providers and the tools."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


class Status(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    DONE = "done"


class StopReason(StrEnum):
    FINAL_ANSWER = "final_answer"
    MAX_TURNS = "max_turns"
    TIMEOUT = "timeout"
    MODEL_ERROR = "model_error"
    CANCELLED = "cancelled"
    QUOTA_EXCEEDED = "quota_exceeded"
    OUTPUT_TRUNCATED = "output_truncated"  # the reply reached the output token limit (its tool calls never run)
    CONTENT_FILTERED = "content_filtered"  # the provider's content filter stopped the reply
    REFUSED = "refused"  # the model declined to answer (OpenAI `refusal`, Anthropic `stop_reason: refusal`)
    USAGE_LIMIT = "usage_limit"  # a per-run limit (max_total_tokens, max_tool_calls) would be exceeded
    GUARDRAIL = "guardrail"  # a guardrail tripped (the error step names it and says why)


class Finish(StrEnum):
    """How a reply ended when not in the ordinary way (a complete answer or complete tool calls)."""

    TRUNCATED = "output_truncated"  # OpenAI `finish_reason: length`, Anthropic `max_tokens`
    FILTERED = "content_filtered"  # OpenAI `finish_reason: content_filter`
    REFUSED = "refused"  # OpenAI `message.refusal`, Anthropic `stop_reason: refusal`
    PAUSED = "pause_turn"  # Anthropic `pause_turn`: a server tool paused a long turn; send it back to continue


class Protocol_(StrEnum):
    TOOLS = "tools"
    REACT = "react"


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for."""

    id: str
    name: str
    arguments: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(frozen=True)
class Usage:
    """Tokens of one call. `cached_tokens`: the part of `prompt_tokens` the provider read from its prompt cache
    (priced lower); `cache_write_tokens`: the part it wrote to that cache (Anthropic's cache creation, priced higher);
    0 when it reports none."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, int]:
        data = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.cached_tokens:
            data["cached_tokens"] = self.cached_tokens
        if self.cache_write_tokens:
            data["cache_write_tokens"] = self.cache_write_tokens
        return data


@dataclass(frozen=True)
class ToolSpec:
    """What a model is told about a tool."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True)
class ModelRequest:
    """Everything a model needs for one call.

    `messages` use the engine's neutral roles: system, user, assistant (with optional
    `tool_calls`: [{"id", "name", "arguments"}], and `blocks`: the provider's own content blocks to send back
    unchanged instead, when the reply had any: see ModelReply) and tool (`tool_call_id`, `name`, `content`).
    In the react protocol `tools` is informational: providers send no tool specs.
    `prompt_cache`: mark the stable prefix (system prompt, tool specs) for the provider's prompt cache where it must
    be asked for (Anthropic's cache_control); a provider that caches by itself (OpenAI) ignores it.
    `history_messages`: how many messages after the system prompt are a thread's earlier turns (user/assistant
    pairs); the run's own input follows them.
    """

    messages: list[dict[str, Any]]
    tools: list[ToolSpec]
    protocol: str
    timeout_s: float
    history_messages: int = 0
    temperature: float | None = None  # None: the provider's default
    max_output_tokens: int | None = None  # None: the provider's default
    prompt_cache: bool = False
    # Streaming (all None: the provider makes a plain call). `on_text` receives the reply's text as it is written,
    # `on_retry` is told when a call is retried after some text went out (that text is void), `interrupted` is asked
    # between chunks (at most a few times a second) whether the host wants the call stopped.
    on_text: Callable[[str], None] | None = None
    on_retry: Callable[[], None] | None = None
    interrupted: Callable[[], bool] | None = None


@dataclass(frozen=True)
class ModelReply:
    """One reply of a model, normalised across providers.

    `finish`: None when the reply ended the ordinary way, else how it ended (a refusal's text is in `text`).
    `blocks`: the provider's own content blocks when they must go back unchanged in the next request (Anthropic:
    thinking and redacted_thinking blocks with their signatures, server tool blocks, a paused turn); empty otherwise.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    reasoning: str | None = None
    finish: Finish | None = None
    blocks: tuple[dict[str, Any], ...] = ()
    # Set by the host: the "provider/model" that answered when it is not the run's own (a fallback model), and the
    # call's price in billionths of the deployment's currency when a price is known for that model.
    model: str | None = None
    cost_nanos: int | None = None


class ModelError(Exception):
    """A provider failed after its retries; the message is safe to show (no keys, no stack). `retryable`: the
    failure was one a later attempt (or another model) may not meet: a timeout, a lost connection, a rate limit
    (429), an overloaded or failing server (408, 409, 5xx). An authentication or request error is not."""

    def __init__(self, message: str = "", retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class CallStopped(Exception):
    """A streamed call was stopped before its reply was complete: the host interrupted it (`CANCELLED`) or the run's
    deadline came (`TIMEOUT`). `usage`: what the provider had reported so far (0 when nothing)."""

    def __init__(self, reason: StopReason, usage: Usage | None = None) -> None:
        super().__init__(f"the model call was stopped ({reason})")
        self.reason, self.usage = reason, usage or Usage()


class LiveSink(Protocol):
    """Where the engine reports work in progress (never stored; committed steps stay the record)."""

    def text(self, turn: int, text: str) -> None: ...

    def retry(self, turn: int) -> None: ...

    def tool_started(self, call_id: str, tool: str, arguments: dict[str, Any]) -> None: ...

    def tool_finished(self, call_id: str, tool: str, is_error: bool, latency_ms: int) -> None: ...


class ToolWaits(Exception):
    """Raised by a tool whose result is not ready and will not be for a while: a sub-agent's run that goes on
    elsewhere, or waits for a human. The call stays pending and the unit ends (`RunState.waiting` names what it
    waits for); the host stores the run, holds nothing meanwhile, and advances it again once the result is there:
    the tool is then called again with the same arguments and call id, and answers at once."""

    def __init__(self, ref: str, message: str = "") -> None:
        super().__init__(message or f"waiting for {ref}")
        self.ref = ref


class HostStop(Exception):
    """Raised by a model (a host's wrapper of it) before it makes the call: a budget the host keeps is exhausted
    (e.g. the user's daily token quota). The engine stops the run with `reason`; no call was made, no turn counted."""

    def __init__(self, reason: StopReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class Verdict:
    """A guardrail's finding. `action`: "stop" (the run ends with stop reason `guardrail`) or "correct" (the model is
    told why, once per guardrail and run; a second trip stops the run)."""

    guardrail: str  # its name, as configured
    reason: str  # why, in words the user and the model can read (never the matched secret itself)
    action: str = "stop"


class Guard(Protocol):
    """A run's guardrails, as the host built them. Stages: "input" (before the first model call), "output" (before
    a final answer is accepted), "tool_arguments" (before a tool runs, and before its call pauses for approval),
    "tool_output" (before a tool's result is stored and shown to the model). `redact` replaces what must not be
    seen (PII) in a text of a stage and costs no I/O; `check` may call out (a moderation endpoint) and answers the
    first guardrail that trips, or None."""

    def redact(self, stage: str, text: str) -> str: ...

    def check(
        self, stage: str, text: str | None = None, tool: str | None = None, arguments: dict[str, Any] | None = None
    ) -> Verdict | None: ...


class Model(Protocol):
    def complete(self, request: ModelRequest) -> ModelReply: ...


class Tool(Protocol):
    """What the engine needs of a tool (see agents.tools.registry.Tool). Each tool declares how it is treated:

    - `sensitive`: a call waits for a human's approval (a run can widen this gate with its own list, never narrow it);
    - `inline`: it runs in the caller's thread (bounded by its own means: a database tool, the calculator), not in a
      worker thread the engine stops waiting for at `timeout_s`;
    - `instant`: no side effects, an answer from the arguments alone in microseconds: a reply that asks only for
      instant tools (that need no approval) runs them at once, and the host stores the reply with their results;
    - `delivery`: how its calls are delivered when a tool step must say so ("at-least-once": a resumed run may have
      run the call twice), else None.
    """

    # Read-only members: a tool is a frozen value (agents.tools.registry.Tool).
    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def parameters(self) -> Mapping[str, Any]: ...

    @property
    def sensitive(self) -> bool: ...

    @property
    def timeout_s(self) -> float: ...

    @property
    def inline(self) -> bool: ...

    @property
    def instant(self) -> bool: ...

    @property
    def delivery(self) -> str | None: ...

    def __call__(self, arguments: dict[str, Any], context: Any) -> str: ...


Clock = Callable[[], float]
