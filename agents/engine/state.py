"""The run state: JSON-serialisable, rebuilt from stored rows, advanced by the pure step function."""

from __future__ import annotations

import copy
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from agents.engine.types import Status, StopReason, Usage


@dataclass
class RunState:
    """Everything the engine needs to continue a run: its configuration, counters and its steps (events)."""

    input: str
    protocol: str = "tools"
    max_turns: int = 8
    deadline: float = math.inf  # wall-clock seconds (the clock's epoch)
    tools: list[str] = field(default_factory=list)
    sensitive_tools: list[str] = field(default_factory=list)
    status: str = Status.RUNNING
    stop_reason: str | None = None
    output: str | None = None
    error: str | None = None
    turns: int = 0
    max_reflections: int = 0  # retries after an attempt that ran out of turns, each with the model's own critique
    reflections: int = 0
    attempt_start_turn: int = 0  # `turns` when the current attempt began
    prompt_tokens: int = 0
    completion_tokens: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)
    # A thread's earlier runs, oldest first, as {"input", "output", "stop_reason"} (see agents.engine.history).
    history: list[dict[str, Any]] = field(default_factory=list)
    # An agent's settings (docs/api.md#agents): text added to the system prompt, sampling settings passed to the
    # provider, and a JSON Schema the final answer must satisfy.
    instructions: str = ""
    temperature: float | None = None
    max_output_tokens: int | None = None
    output_schema: dict[str, Any] | None = None
    # Mark the stable prefix (system prompt, tools) for the provider's prompt cache (docs/cost.md#prompt-caching).
    prompt_cache: bool = False
    # The input as a list of parts when it has images (agents.engine.parts); None for a string input, which `input`
    # holds. `input` is then the text of the parts (what a text-only reader sees).
    input_parts: list[dict[str, Any]] | None = None
    # Per-run limits (None / empty: none): tokens of all model calls, tool calls that ran, calls per tool name.
    max_total_tokens: int | None = None
    max_tool_calls: int | None = None
    tool_limits: dict[str, int] = field(default_factory=dict)
    # What the run's model calls cost, in billionths of the deployment's currency; None while no call had a price.
    cost_nanos: int | None = None
    # What the unit that just ended waits for (a tool raised ToolWaits: e.g. a child run's id), else None. Not
    # stored: a run taken up again calls the tool again, which answers or waits again.
    waiting: str | None = None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["deadline"] = None if math.isinf(self.deadline) else self.deadline
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunState:
        values = copy.deepcopy(data)
        if values.get("deadline") is None:
            values["deadline"] = math.inf
        return cls(**values)

    def copy(self) -> RunState:
        """A new state sharing the (never mutated) step dicts: O(steps) pointers, not a deep copy. The fields are
        copied as they are, without the `__init__` that `dataclasses.replace` runs (a fifth of its time), then the
        lists the engine appends to are copied."""
        new = object.__new__(RunState)
        new.__dict__.update(self.__dict__)
        new.tools, new.sensitive_tools, new.steps = list(self.tools), list(self.sensitive_tools), list(self.steps)
        return new

    @property
    def usage(self) -> Usage:
        return Usage(self.prompt_tokens, self.completion_tokens)

    @property
    def attempt_turns(self) -> int:
        return self.turns - self.attempt_start_turn

    @property
    def done(self) -> bool:
        return self.status == Status.DONE

    def finish(self, reason: StopReason, output: str | None = None, error: str | None = None) -> None:
        self.status = Status.DONE
        self.stop_reason = reason.value
        self.output = output if reason == StopReason.FINAL_ANSWER else None
        self.error = error
