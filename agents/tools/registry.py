"""The tool registry: name, description, JSON Schema, callable, sensitivity and timeout."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any


class ToolError(Exception):
    """A failure the model can read and recover from (bad input, upstream down)."""


@dataclass(frozen=True)
class ToolContext:
    """Injected by the host from the authenticated request; never taken from model arguments."""

    user_id: int | None = None
    run_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    # "<run id>:<step index>" of the call being run: the same on a resumed run's repeat of that call
    idempotency_key: str | None = None
    call_id: str | None = None  # the id of the call being run (in a run)

    def for_call(self, step: int, call_id: str | None = None) -> ToolContext:
        """This context for the call whose tool step takes index `step` (no key outside a run)."""
        return replace(self, idempotency_key=f"{self.run_id}:{step}", call_id=call_id) if self.run_id else self


ToolFunc = Callable[[dict[str, Any], ToolContext], str]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: Mapping[str, Any]
    func: ToolFunc
    sensitive: bool = False
    timeout_s: float = 10.0
    # Database tools run in the caller's thread so they share its connection and transaction; their bound is
    # the database's own. So do tools bounded by construction (the calculator). Other tools run in a worker
    # thread that the engine stops waiting for at timeout_s.
    inline: bool = False
    # No side effects, an answer from the arguments alone, in microseconds (bounded by construction): a reply that
    # asks only for instant tools is stored with their results, one commit instead of two (agents/engine/plan.py).
    instant: bool = False
    # How the tool's calls are delivered when its tool steps must say so (an MCP tool: "at-least-once"), else None.
    delivery: str | None = None

    def __call__(self, arguments: dict[str, Any], context: ToolContext) -> str:
        return self.func(arguments, context)

    def describe(self, sensitive: bool | None = None) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "parameters": dict(self.parameters),
            "sensitive": self.sensitive if sensitive is None else sensitive,
        }


class ToolRegistry:
    """Tools by name; the host picks a subset for each run."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(self, tool: Tool) -> Tool:
        self._tools[tool.name] = tool
        return tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return sorted(self._tools)

    def select(self, names: Iterable[str] | None = None) -> dict[str, Tool]:
        """The named tools (all when None), in name order; unknown names raise KeyError."""
        wanted = self.names() if names is None else sorted(set(names))
        missing = [n for n in wanted if n not in self._tools]
        if missing:
            raise KeyError(", ".join(missing))
        return {n: self._tools[n] for n in wanted}


registry = ToolRegistry()
