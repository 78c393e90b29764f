"""A run's live sink: the engine reports the reply as it is written and each tool call as it starts and ends; this
sends it on the live bus (agents/runs/livebus.py) for the run's event streams, and to a local sink too when the
caller has one (the CLI prints the text on its terminal). Nothing here is stored.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from agents.engine import LiveSink
from agents.runs import doorbell, livebus

# How long a tool's end and a model call's end wait for their live events to go out: they then reach the streams
# before the commit that follows (a stream leaves out what a step it already sent covers).
SETTLE_S = 0.5


class Publisher:
    """The LiveSink of one run driven by this process. Its events go on the bus only while a stream somewhere follows
    the run (doorbell.follows): a run no one watches makes plain model calls and sends nothing."""

    def __init__(
        self, run_id, outbox: livebus.Outbox | None, also: LiveSink | None = None, eager_s: float = 0.0
    ) -> None:
        self.run_id, self.outbox, self.also = str(run_id), outbox, also
        self.turn: int | None = None  # the turn whose text went out and is not yet ended
        self.sent = False  # something went on the bus since the last flush
        self.eager_until = time.monotonic() + eager_s  # publish until then even if no one was heard to follow yet

    def followed(self) -> bool:
        if self.outbox is None:
            return False
        return time.monotonic() < self.eager_until or doorbell.follows(self.run_id)

    def streams(self) -> bool:
        """Whether the next model call should stream: someone follows the run, here (the CLI) or on the bus."""
        return self.also is not None or self.followed()

    def text(self, turn: int, text: str) -> None:
        if self.outbox is not None:
            self.turn = turn
            self.sent = True
            self.outbox.text(self.run_id, turn, text)
        if self.also is not None:
            self.also.text(turn, text)

    def retry(self, turn: int) -> None:
        if self.turn is not None:
            self._event("assistant.retry", {"turn": turn})
        if self.also is not None:
            self.also.retry(turn)

    def tool_started(self, call_id: str, tool: str, arguments: dict[str, Any]) -> None:
        if self.followed():
            self._event("tool.started", {"call_id": call_id, "tool": tool, "arguments": arguments})
        if self.also is not None:
            self.also.tool_started(call_id, tool, arguments)

    def tool_finished(self, call_id: str, tool: str, is_error: bool, latency_ms: int) -> None:
        if self.followed():
            self._event(
                "tool.finished", {"call_id": call_id, "tool": tool, "is_error": is_error, "latency_ms": latency_ms}
            )
            self._settle()
        if self.also is not None:
            self.also.tool_finished(call_id, tool, is_error, latency_ms)

    def flush(self, done: bool = False) -> None:
        """The model call is over: its last text goes now, then `assistant.end` (streams hold the reply's step until
        it comes, so no text of it follows the step); `done`: the unit is over too."""
        if self.outbox is None:
            return
        if self.turn is not None:
            self._event("assistant.end", {"turn": self.turn})
            self.turn = None
        if done:
            self.outbox.flush(self.run_id, forget=True)
        else:
            self._settle()

    def _settle(self) -> None:
        """Wait (at most SETTLE_S) until what was sent is out: it then reaches the streams before the next commit."""
        if self.sent and self.outbox is not None:
            self.outbox.flush(self.run_id, wait_s=SETTLE_S)
        self.sent = False

    def _event(self, event: str, data: dict[str, Any]) -> None:
        if self.outbox is not None:
            self.sent = True
            self.outbox.event(self.run_id, event, data)


# A new background run is published from its start for this long, followed or not: its client opens the run's
# event stream right after creating it, and the first model call may begin before that stream's announcement.
EAGER_S = 3.0


def for_run(run_id, also: LiveSink | None = None, age_s: float | None = None) -> Publisher | None:
    """The run's sink: the bus when AGENT_LIVE is on, plus `also`; None when there is nowhere to send. `age_s`: a
    background run's age (it is published eagerly while younger than EAGER_S)."""
    outbox = livebus.outbox()
    if outbox is None and also is None:
        return None
    eager = max(EAGER_S - age_s, 0.0) if age_s is not None else 0.0
    return Publisher(run_id, outbox, also, eager_s=eager)


_LOCAL: ContextVar[LiveSink | None] = ContextVar("reactsite_live_local_sink", default=None)


@contextmanager
def also_to(sink: LiveSink) -> Iterator[None]:
    """Runs driven inside this block report to `sink` too (the CLI, which drives runs in its own process)."""
    token = _LOCAL.set(sink)
    try:
        yield
    finally:
        _LOCAL.reset(token)


def local_sink() -> LiveSink | None:
    return _LOCAL.get()
