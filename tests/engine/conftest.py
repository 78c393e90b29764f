"""Fakes and helpers for the engine tests: a manual clock, small tools, and a run driver."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from agents.engine import RunState, Status, Toolset, advance
from agents.tools.calculator import CALCULATOR_TOOL
from agents.tools.registry import Tool, ToolContext

STRING_PARAM = {
    "type": "object",
    "properties": {"text": {"type": "string"}},
    "required": ["text"],
    "additionalProperties": False,
}
ANY_PARAMS: dict[str, Any] = {"type": "object"}


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_tool(
    name: str,
    func: Callable[[dict[str, Any], Any], str],
    parameters: dict[str, Any] | None = None,
    *,
    sensitive: bool = False,
    timeout_s: float = 5.0,
) -> Tool:
    return Tool(name, f"The {name} tool.", parameters or ANY_PARAMS, func, sensitive=sensitive, timeout_s=timeout_s)


def echo_tool(name: str = "echo", log: list[dict[str, Any]] | None = None, **kwargs: Any) -> Tool:
    """Returns 'echo:<text>' and records each call's arguments in `log`."""

    def func(arguments: dict[str, Any], context: Any) -> str:
        if log is not None:
            log.append(dict(arguments))
        return f"{name}:{arguments.get('text', '')}"

    return make_tool(name, func, STRING_PARAM, **kwargs)


def toolset(*tools: Tool, max_output_chars: int = 4000) -> Toolset:
    return Toolset(
        tools={t.name: t for t in tools}, context=ToolContext(user_id=7, run_id="r1"), max_output_chars=max_output_chars
    )


def new_state(of: Toolset | None = None, /, **kwargs: Any) -> RunState:
    """A running state whose enabled tools are, unless given, those of the toolset `of`."""
    kwargs.setdefault("input", "the task")
    if of is not None:
        kwargs.setdefault("tools", list(of.tools))
    return RunState(**kwargs)


def run_until_stopped(
    state: RunState, model: Any, tools: Toolset, clock: FakeClock, limit: int = 50
) -> tuple[RunState, list[dict[str, Any]]]:
    """Advance while running; return the state (done or awaiting approval) and every event produced."""
    events: list[dict[str, Any]] = []
    for _ in range(limit):
        if state.status != Status.RUNNING:
            return state, events
        state, new = advance(state, model, tools, clock)
        events.extend(new)
    raise AssertionError("the run did not stop")


def kinds(steps: list[dict[str, Any]]) -> list[str]:
    return [s["kind"] for s in steps]


def roles(messages: list[dict[str, Any]]) -> list[str]:
    return [m["role"] for m in messages]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def calculator() -> Tool:
    return CALCULATOR_TOOL
