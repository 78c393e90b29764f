"""Recording a unit's work: the steps it appends, and the two outcomes every part of it may end in (the run stops,
or the model is told what to fix)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.engine.context import RunContext
from agents.engine.state import RunState
from agents.engine.steps import ErrorStep, StepRecord
from agents.engine.types import StopReason

# Stop reasons whose run `error` is the error step's message unless one is given.
_ERROR_IS_MESSAGE = (StopReason.MODEL_ERROR, StopReason.USAGE_LIMIT, StopReason.GUARDRAIL)


@dataclass(frozen=True)
class Halt:
    """The run stops with `reason`. `message`: the error step that says why (no step without one); `error`: the
    run's error (by default the message, for a model error, a usage limit or a guardrail); `limit`, `guardrail` and
    `stage` name on the error step what stopped it."""

    reason: StopReason
    message: str | None = None
    error: str | None = None
    limit: str | None = None
    guardrail: str | None = None
    stage: str | None = None


@dataclass(frozen=True)
class Correct:
    """The run goes on, and the model is shown this error step (what to fix) before its next call."""

    step: ErrorStep


class Unit:
    """One unit of work in progress: the state it changes, its context, and the steps it appended (its events),
    with gap-free indexes."""

    def __init__(self, state: RunState, ctx: RunContext) -> None:
        self.state, self.ctx = state, ctx
        self.events: list[dict[str, Any]] = []

    def add(self, record: StepRecord, latency_ms: int = 0) -> dict[str, Any]:
        """Append a step: its index, kind and latency, then the record's data."""
        step = {"index": len(self.state.steps), "kind": record.kind.value, "latency_ms": latency_ms}
        step.update(record.to_data())
        self.state.steps.append(step)
        self.events.append(step)
        return step

    def halt(self, halt: Halt) -> None:
        """Stop the run, after an error step when the halt has a message."""
        if halt.message is not None:
            self.add(ErrorStep(halt.message, limit=halt.limit, guardrail=halt.guardrail, stage=halt.stage))
        error = halt.error
        if error is None and halt.reason in _ERROR_IS_MESSAGE:
            error = halt.message
        self.state.finish(halt.reason, error=error)

    def answer(self, output: str) -> None:
        """End the run with its final answer."""
        self.state.finish(StopReason.FINAL_ANSWER, output=output)

    def ms_since(self, start: float) -> int:
        """Milliseconds from `start` to now on the run's clock (never negative)."""
        return max(0, round((self.ctx.clock() - start) * 1000))
