"""Short run leases, renewed by the process that holds them: part of the services layer.

A lease lasts AGENT_LEASE_S (15 s), not the run's budget: a worker that dies (kill -9, a lost machine) loses its runs
within seconds, and the sweep (`sweep_orphans`, run by every `run_worker`) hands them to a live worker. While a
process holds leases, one keeper (a daemon thread; a greenlet under gevent) renews all of them every third of the
lease in one UPDATE, so a long model or tool call never lets a lease lapse under a live worker.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from agents.models import Run, RunMode, RunStatus

log = logging.getLogger(__name__)

_held: dict[str, object] = {}  # token -> the greenlet (under gevent) or thread working on that run
_lock = threading.Lock()
_keeper: threading.Thread | None = None


def lease_s() -> float:
    return float(settings.AGENT_LEASE_S)


def until() -> datetime:
    """When a lease taken or renewed now runs out."""
    return timezone.now() + timedelta(seconds=lease_s())


def hold(token: str) -> None:
    """This process holds `token`'s run: keep its lease alive until `drop`."""
    global _keeper
    with _lock:
        _held[token] = _current()
        if _keeper is None or not _keeper.is_alive():
            _keeper = threading.Thread(target=_keep, name="lease-keeper", daemon=True)
            _keeper.start()


def drop(token: str) -> None:
    with _lock:
        _held.pop(token, None)


def _keep() -> None:
    last = time.monotonic()
    while True:
        time.sleep(0.5)  # short naps: a changed AGENT_LEASE_S (tests) takes effect at once
        if time.monotonic() - last < lease_s() / 3:
            continue
        last = time.monotonic()
        with _lock:
            tokens = list(_held)
        if tokens:
            renew(tokens)


def renew(tokens: list[str]) -> int:
    """Push the leases of these tokens forward (one UPDATE); the number of runs still held."""
    try:
        renewed = Run.objects.filter(lease_owner__in=tokens).update(lease_expires=until())
    except Exception as exc:  # noqa: BLE001 - the database busy or away for a moment: the next round tries again
        log.warning("lease renewal failed: %s", type(exc).__name__)
        renewed = 0
    finally:
        connection.close()  # the keeper holds no connection while it sleeps
    return renewed


def sweep_orphans() -> list[str]:
    """Hand runs whose worker died to the queue: the ids re-queued.

    An orphan is a queued or running run (sync or background; step runs wait for their client) whose lease ran out,
    or that has no lease and was last touched two leases ago, and that no ready or running task will pick up. A
    sync run whose HTTP worker died continues as a background run.
    """
    from django_tasks_db.models import DBTaskResult

    from agents import services

    now = timezone.now()
    stale = Q(lease_owner="", updated_at__lt=now - timedelta(seconds=2 * lease_s())) | Q(lease_expires__lt=now)
    candidates = Run.objects.filter(stale, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]).exclude(mode=RunMode.STEP)
    live = set(
        DBTaskResult.objects.filter(status__in=["READY", "RUNNING"]).values_list("args_kwargs__args__0", flat=True)
    )
    handed: list[str] = []
    for run in candidates[:500]:
        if str(run.pk) not in live and services.continue_elsewhere(run):
            handed.append(str(run.pk))
    if handed:
        log.warning("handed %d orphaned run(s) to the queue", len(handed))
    return handed


def _current() -> object:
    import sys

    gevent = sys.modules.get("gevent")
    return gevent.getcurrent() if gevent is not None else threading.current_thread()


def stop_all() -> int:
    """Under gevent: interrupt every greenlet working on a run; each hands its run back as it unwinds (GreenletExit
    reaches it at its current wait, typically the model call). The number interrupted."""
    import gevent

    with _lock:
        workers = [g for g in _held.values() if isinstance(g, gevent.Greenlet)]
    gevent.killall(workers, block=False)
    return len(workers)


def hand_back_all() -> list[str]:
    """This process is going away (a deploy's SIGTERM): release every lease it holds and queue those runs at once,
    so another worker continues them now instead of after their leases run out. The ids handed back."""
    from agents import services

    with _lock:
        tokens = list(_held)
        _held.clear()
    if not tokens:
        return []
    runs = list(Run.objects.filter(lease_owner__in=tokens, status__in=[RunStatus.QUEUED, RunStatus.RUNNING]))
    Run.objects.filter(lease_owner__in=tokens).update(lease_owner="", lease_expires=None)
    for run in runs:
        services.continue_elsewhere(run)
    log.warning("handed %d run(s) back to the queue on shutdown", len(runs))
    return [str(r.pk) for r in runs]
