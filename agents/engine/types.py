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
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }


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
    `tool_calls`: [{"id", "name", "arguments"}]) and tool (`tool_call_id`, `name`, `content`).
    In the react protocol `tools` is informational: providers send no tool specs.
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


@dataclass(frozen=True)
class ModelReply:
    """One reply of a model, normalised across providers."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
    reasoning: str | None = None


class ModelError(Exception):
    """A provider failed after its retries; the message is safe to show (no keys, no stack)."""


class HostStop(Exception):
    """Raised by a model (a host's wrapper of it) before it makes the call: a budget the host keeps is exhausted
    (e.g. the user's daily token quota). The engine stops the run with `reason`; no call was made, no turn counted."""

    def __init__(self, reason: StopReason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class Model(Protocol):
    def complete(self, request: ModelRequest) -> ModelReply: ...


class Tool(Protocol):
    """What the engine needs of a tool (see agents.tools.registry.Tool)."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    sensitive: bool
    timeout_s: float

    def __call__(self, arguments: dict[str, Any], context: Any) -> str: ...


Clock = Callable[[], float]
