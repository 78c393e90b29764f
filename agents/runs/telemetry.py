"""What runs tell an operator's tools while they work: the hook points of traces and metrics.

The runs call these hooks where the work happens (a run driven by this process, each unit, each model call, each
tool call, a run created, an event stream open); observers registered at start-up (reactsite/observability/, each
switched on by its settings) do the rest. With no observer, each hook is one check of an empty list: tracing and
metrics switched off cost nothing.

An observer implements any of: `driving(run)`, `unit(run)`, `summary(run)`, `model_call(run, request, record)`,
`tool_call(run, name, call_id, record)`, `stream(run_id)` and `task(name, waited_s, record)` (context managers around
the work; an exception inside goes through them and on: an observer records it, never swallows it), `run_created(run)`,
`run_scored(score)` (a RunScore stored: an evaluator's or a person's), `tasks_claimed(count)` and `carrier()` (what a
new run stores so that a process that takes it up later continues the same trace: a dict of strings).
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

_observers: list[Any] = []


def add_observer(observer: Any) -> None:
    if observer not in _observers:
        _observers.append(observer)


def remove_observer(observer: Any) -> None:
    if observer in _observers:
        _observers.remove(observer)


def active() -> bool:
    return bool(_observers)


@dataclass
class CallRecord:
    """What an observer learns of a model or tool call when it ends: the reply (a ModelReply), or the output and
    whether it is an error (a tool)."""

    reply: Any = None
    output: str | None = None
    is_error: bool = False


class _Around:
    """The observers' context managers around one piece of work, as an ExitStack would hold them: each observer's
    hook called and entered in turn (a later one sees what an earlier one entered), left in reverse. A class rather
    than a generator and an ExitStack: there are about ten hooks a run, and with one observer (the common case) this
    is the observer's own manager and one object more. `as` gives `record` (a call's CallRecord, or None)."""

    __slots__ = ("method", "args", "record", "_entered")

    def __init__(self, method: str, args: tuple[Any, ...], record: CallRecord | None = None) -> None:
        self.method, self.args, self.record = method, args, record
        self._entered: list[AbstractContextManager[Any]] = []

    def __enter__(self) -> Any:
        if not _observers:
            return self.record
        for observer in list(_observers):
            hook = getattr(observer, self.method, None)
            if hook is None:
                continue
            manager = hook(*self.args)
            try:
                manager.__enter__()
            except BaseException:
                self.__exit__(*sys.exc_info())
                raise
            self._entered.append(manager)
        return self.record

    def __exit__(self, kind: Any, exc: BaseException | None, traceback: Any) -> bool:
        """Leave each entered manager, the last first; an exception raised by one goes to those outside it."""
        pending: tuple[Any, Any, Any] = (kind, exc, traceback)
        raised: BaseException | None = None
        while self._entered:
            manager = self._entered.pop()
            try:
                if manager.__exit__(*pending):
                    pending, raised = (None, None, None), None  # swallowed (no observer of ours does)
            except BaseException as error:  # noqa: BLE001 - handed on to the outer managers, raised at the end
                pending, raised = (type(error), error, error.__traceback__), error
        if raised is not None:
            raise raised
        return exc is not None and pending[1] is None


def driving(run) -> AbstractContextManager[None]:
    """This process drives the run (between taking its lease and handing it back)."""
    return _Around("driving", (run,))


def unit(run) -> AbstractContextManager[None]:
    """One unit of a run: a model call and the tool calls it asked for (or a decision and the calls it allows)."""
    return _Around("unit", (run,))


def summary(run) -> AbstractContextManager[None]:
    """A run condenses its thread's earlier turns (history `summarize`) before its first unit: one model call."""
    return _Around("summary", (run,))


def stream(run_id) -> AbstractContextManager[None]:
    """An event stream of the run is open."""
    return _Around("stream", (run_id,))


def model_call(run, request) -> AbstractContextManager[CallRecord]:
    """One call of the run's model; the caller sets `record.reply` when it returns."""
    record = CallRecord()
    return _Around("model_call", (run, request, record), record)


def tool_call(run, name: str, call_id: str | None) -> AbstractContextManager[CallRecord]:
    """One call of a tool; the caller sets `record.output` when it returns (an exception: the tool failed)."""
    record = CallRecord()
    return _Around("tool_call", (run, name, call_id, record), record)


def task(name: str, waited_s: float | None) -> AbstractContextManager[CallRecord]:
    """A worker runs one background task (`name`: its path) that waited `waited_s` in the queue (None: unknown); the
    caller sets `record.is_error` when the task failed without raising (its backend recorded the failure)."""
    record = CallRecord()
    return _Around("task", (name, waited_s, record), record)


def _tell(method: str, *args: Any) -> None:
    """Call `method(*args)` of every observer that has it."""
    for observer in list(_observers):
        hook = getattr(observer, method, None)
        if hook is not None:
            hook(*args)


def tasks_claimed(count: int) -> None:
    """A worker claimed `count` tasks from the queue (run_worker's claim; Celery's broker hands them out itself)."""
    _tell("tasks_claimed", count)


def run_created(run) -> None:
    _tell("run_created", run)


def run_scored(score) -> None:
    """A score was stored on a run (agents.models.RunScore: `name`, `source`, `passed`)."""
    _tell("run_scored", score)


def carrier() -> dict[str, str]:
    """What a new run stores to continue the current trace in the process that takes it up (empty without one)."""
    found: dict[str, str] = {}
    for observer in list(_observers):
        hook = getattr(observer, "carrier", None)
        if hook is not None:
            found.update(hook())
    return found
