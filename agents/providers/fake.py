"""A scripted fake model for tests: replays canned replies in order and records every request."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from agents.engine.types import ModelReply, ModelRequest, ToolCall, Usage
from agents.providers.base import Provider

Scripted = ModelReply | Exception | Callable[[ModelRequest], ModelReply]


class ScriptedModel(Provider):
    """Each call takes the next scripted item: a reply, an exception to raise, or a function of the request."""

    name = "fake"
    default_model = "fake-1"

    def __init__(self, script: Iterable[Scripted] = (), model: str | None = None) -> None:
        super().__init__(model)
        self.script = list(script)
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelReply:
        self.requests.append(request)
        if not self.script:
            raise AssertionError("ScriptedModel: no scripted reply left")
        item = self.script.pop(0)
        if isinstance(item, Exception):
            raise item
        return item(request) if callable(item) else item


def text(content: str, prompt_tokens: int = 0, completion_tokens: int = 0, reasoning: str | None = None) -> ModelReply:
    """A plain text reply."""
    return ModelReply(text=content, usage=Usage(prompt_tokens, completion_tokens), reasoning=reasoning)


def calls(*items: tuple[str, dict[str, Any]] | ToolCall, text: str = "", usage: Usage | None = None) -> ModelReply:
    """A reply asking for tool calls: ("calculator", {"expression": "1+1"}) or ToolCall objects."""
    made = [
        item if isinstance(item, ToolCall) else ToolCall(f"fc_{i}", item[0], item[1]) for i, item in enumerate(items)
    ]
    return ModelReply(text=text, tool_calls=tuple(made), usage=usage or Usage())
