"""Short run leases, renewed by the process that holds them: part of the services layer.

A lease lasts AGENT_LEASE_S (15 s), not the run's budget: a worker that dies (kill -9, a lost machine) loses its runs
within seconds, and the sweep (`recovery.sweep_orphans`, run by every `run_worker`) hands them to a live worker. While a
process holds leases, one keeper (a daemon thread; a greenlet under gevent) renews all of them every third of the
lease in one UPDATE, so a long model or tool call never lets a lease lapse under a live worker. It finds them by
their primary keys: the lease token has no index, and an UPDATE by tokens alone read the whole runs table every
few seconds in every process, at a cost growing with the table.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from agents.models import Run

log = logging.getLogger(__name__)

_held: dict[str, tuple[object, Any]] = {}  # token -> (the greenlet or thread working on that run, the run's id)
_lock = threading.Lock()
_keeper: threading.Thread | None = None


RELEASED: dict[str, Any] = {"lease_owner": "", "lease_expires": None}  # a run no process holds


def release(run_id: Any, token: str, **also: Any) -> int:
    """The one way a lease is given back: the run loses it only if `token` still holds it (one conditional UPDATE,
    which sets `also` with it); the number of runs released (0: the lease had gone to another process already)."""
    return Run.objects.filter(pk=run_id, lease_owner=token).update(**RELEASED, **also)


def lease_s() -> float:
    return float(settings.AGENT_LEASE_S)


def until() -> datetime:
    """When a lease taken or renewed now runs out."""
    return timezone.now() + timedelta(seconds=lease_s())


def hold(token: str, run_id: Any) -> None:
    """This process holds `token`'s run (`run_id`): keep its lease alive until `drop`."""
    global _keeper
    with _lock:
        _held[token] = (_current(), run_id)
        if _keeper is None or not _keeper.is_alive():
            _keeper = threading.Thread(target=_keep, name="lease-keeper", daemon=True)
            _keeper.start()


def drop(token: str) -> None:
    with _lock:
        _held.pop(token, None)


def held() -> list[str]:
    """The tokens this process holds now."""
    with _lock:
        return list(_held)


def _keep() -> None:
    last = time.monotonic()
    while True:
        time.sleep(0.5)  # short naps: a changed AGENT_LEASE_S (tests) takes effect at once
        if time.monotonic() - last < lease_s() / 3:
            continue
        last = time.monotonic()
        held_runs = holdings()
        if held_runs:
            renew(held_runs)


def holdings(clear: bool = False) -> dict[str, Any]:
    """Token -> run id of every run this process holds (`clear`: and hold none from now on)."""
    with _lock:
        held_runs = {token: run_id for token, (_, run_id) in _held.items()}
        if clear:
            _held.clear()
    return held_runs


def held_by_us(held_runs: dict[str, Any]):
    """Those runs while their tokens still hold them, found by primary key (the lease token has no index)."""
    return Run.objects.filter(pk__in=list(held_runs.values()), lease_owner__in=list(held_runs))


def renew(held_runs: dict[str, Any]) -> int:
    """Push forward the leases of these runs (token -> run id) that their tokens still hold, in one UPDATE found by
    primary key; the number of runs still held."""
    try:
        renewed = held_by_us(held_runs).update(lease_expires=until())
    except Exception as exc:  # noqa: BLE001 - the database busy or away for a moment: the next round tries again
        log.warning("lease renewal failed: %s", type(exc).__name__)
        renewed = 0
    finally:
        connection.close()  # the keeper holds no connection while it sleeps
    return renewed


class WorkerLost(RuntimeError):
    """Recorded on a task whose worker died mid-task (kill -9, a lost machine)."""


def _current() -> object:
    import sys

    gevent = sys.modules.get("gevent")
    return gevent.getcurrent() if gevent is not None else threading.current_thread()


class Stopping(BaseException):
    """Raised in a greenlet working on a run when its process stops gracefully (a deploy's SIGTERM): the run is handed
    back to the queue and the request still answers, with the run as it is now (a BaseException, as GreenletExit
    is, so no `except Exception` on the way swallows it)."""


_stopping = threading.Event()


def stopping() -> bool:
    """Whether this process is stopping gracefully: a run it still drives hands itself back before its next model
    call (a request accepted in the last moments of a draining worker answers at once too)."""
    return _stopping.is_set()


def stop_all() -> int:
    """Under gevent: interrupt every greenlet working on a run; each hands its run back as it unwinds (`Stopping`
    reaches it at its current wait, typically the model call) and answers its request. The number interrupted."""
    import gevent

    _stopping.set()
    with _lock:
        workers = [g for g, _ in _held.values() if isinstance(g, gevent.Greenlet)]
    gevent.killall(workers, exception=Stopping, block=False)
    return len(workers)
