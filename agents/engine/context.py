"""What every part of a unit of work runs with: the host's tools, clock, cancel question, live sink and guard."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agents.engine.dispatch import Toolset
from agents.engine.types import Clock, Guard, LiveSink

Interrupt = Callable[[], bool]


@dataclass(frozen=True)
class RunContext:
    """What travels together through a unit, as the host gave it: the run's tools, the clock, the question whether
    the host wants the run stopped (`interrupt`), where work in progress is reported (`live`, never stored) and the
    run's guardrails (`guard`)."""

    toolset: Toolset
    clock: Clock
    interrupt: Interrupt | None = None
    live: LiveSink | None = None
    guard: Guard | None = None

    def cancelled(self) -> bool:
        """Whether the host wants the run stopped now (a query for some hosts: ask only where it matters)."""
        return self.interrupt is not None and self.interrupt()
