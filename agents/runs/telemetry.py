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

from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager
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


@contextmanager
def _around(method: str, *args: Any) -> Iterator[None]:
    with ExitStack() as stack:
        for observer in list(_observers):
            hook = getattr(observer, method, None)
            if hook is not None:
                stack.enter_context(hook(*args))
        yield


@contextmanager
def _hook(method: str, *args: Any) -> Iterator[None]:
    if not _observers:
        yield
        return
    with _around(method, *args):
        yield


def driving(run) -> AbstractContextManager[None]:
    """This process drives the run (between taking its lease and handing it back)."""
    return _hook("driving", run)


def unit(run) -> AbstractContextManager[None]:
    """One unit of a run: a model call and the tool calls it asked for (or a decision and the calls it allows)."""
    return _hook("unit", run)


def summary(run) -> AbstractContextManager[None]:
    """A run condenses its thread's earlier turns (history `summarize`) before its first unit: one model call."""
    return _hook("summary", run)


def stream(run_id) -> AbstractContextManager[None]:
    """An event stream of the run is open."""
    return _hook("stream", run_id)


@contextmanager
def model_call(run, request) -> Iterator[CallRecord]:
    """One call of the run's model; the caller sets `record.reply` when it returns."""
    record = CallRecord()
    with _hook("model_call", run, request, record):
        yield record


@contextmanager
def tool_call(run, name: str, call_id: str | None) -> Iterator[CallRecord]:
    """One call of a tool; the caller sets `record.output` when it returns (an exception: the tool failed)."""
    record = CallRecord()
    with _hook("tool_call", run, name, call_id, record):
        yield record


@contextmanager
def task(name: str, waited_s: float | None) -> Iterator[CallRecord]:
    """A worker runs one background task (`name`: its path) that waited `waited_s` in the queue (None: unknown); the
    caller sets `record.is_error` when the task failed without raising (its backend recorded the failure)."""
    record = CallRecord()
    with _hook("task", name, waited_s, record):
        yield record


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
