"""Periodic work, registered by the domain that owns it: each sweep says what it is called and how often it runs.

The domains register their sweeps where they are defined (`@periodic.every(...)`): the orphan sweep and approval
expiry (agents/runs), webhook retries (agents/notifications), schedules (agents/schedules) and retention
(agents/background). `agents.apps` imports those modules, so every process has the whole list once Django is set up.

Who drives them depends on the task backend (docs/operations.md): with `AGENT_TASK_BACKEND=db`, every `run_worker`
runs each sweep on its interval in its own greenlet; with `celery`, `celery -A reactsite beat` sends the task
`agents.tasks.run_periodic` with the sweep's name on its interval, and any worker runs it. Each sweep is safe to run
on several machines at once, twice by mistake included: what it changes it claims in the database first (a schedule's
due time, an expired approval, a lost run's lease), so a second runner finds nothing left to do.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Sweep:
    name: str
    func: Callable[[], Any]
    interval: Callable[[], float]  # seconds between two runs (read each time: a setting may set it)

    def interval_s(self) -> float:
        return float(self.interval())


_SWEEPS: dict[str, Sweep] = {}
Observer = Callable[[str, float, BaseException | None], None]
_observers: list[Observer] = []


def every(name: str, interval: float | Callable[[], float]) -> Callable:
    """Register the decorated function as the sweep `name`, run every `interval` seconds (a number, or a callable
    read when the sweep is scheduled). Returns the function unchanged."""
    read = interval if callable(interval) else (lambda: float(interval))

    def register(func: Callable[[], Any]) -> Callable[[], Any]:
        existing = _SWEEPS.get(name)
        if existing is not None and existing.func is not func:
            raise ValueError(f"two sweeps named {name!r}: {existing.func.__module__} and {func.__module__}")
        _SWEEPS[name] = Sweep(name=name, func=func, interval=read)
        return func

    return register


def sweeps() -> list[Sweep]:
    """Every registered sweep, in the order they were registered."""
    return list(_SWEEPS.values())


def get(name: str) -> Sweep | None:
    return _SWEEPS.get(name)


def observe(observer: Observer) -> None:
    """Call `observer(name, seconds, error)` after each sweep run (the Prometheus metrics count them)."""
    if observer not in _observers:
        _observers.append(observer)


def unobserve(observer: Observer) -> None:
    if observer in _observers:
        _observers.remove(observer)


def run(sweep: Sweep) -> Any:
    """Run `sweep` once, now, in this process; its result (or its exception, after the observers heard of it)."""
    name = sweep.name
    started = time.perf_counter()
    error: BaseException | None = None
    try:
        return sweep.func()
    except BaseException as exc:
        error = exc
        raise
    finally:
        for observer in _observers:
            try:
                observer(name, time.perf_counter() - started, error)
            except Exception:  # noqa: BLE001 - an observer's fault never fails the sweep
                log.exception("sweep observer failed")
