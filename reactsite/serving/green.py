"""Database connections under gevent: one per-process set of idle connections that the greenlets share, each used
by one greenlet at a time (docs/performance.md, shared SQLite connections).

A request takes one when it starts and puts its open connections, outside any transaction, back when it ends (after
Django's `close_old_connections`). On PostgreSQL the psycopg pool does this already, and the set stays empty.
"""

from __future__ import annotations

import sys

from django.core.signals import request_finished, request_started
from django.db import connections

IDLE_MAX = 64  # idle connections kept per database alias; more are closed
_idle: dict[str, list] = {}


def patched() -> bool:
    """Whether gevent has patched this process (gunicorn's gevent worker does it before loading the app)."""
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey and monkey.is_module_patched("socket"))


def let_others_first(max_s: float) -> None:
    """Under gevent: wait until the worker has nothing else ready (connections to accept, requests to answer), at most
    `max_s`. Without gevent: nothing (each request has its thread). The gevent module is the one that patched this
    process (`patched()`): nothing is imported here."""
    if not patched():
        return
    gevent = sys.modules["gevent"]
    with gevent.Timeout(max_s, False):
        gevent.idle()


def install() -> None:
    """Share idle connections between requests of different greenlets (a no-op without gevent)."""
    if patched():
        request_started.connect(_on_started, dispatch_uid="reactsite.serving.green.lend")
        request_finished.connect(_on_finished, dispatch_uid="reactsite.serving.green.take_back")


def _on_started(**kwargs) -> None:
    lend()


def _on_finished(**kwargs) -> None:
    take_back()


def lend() -> None:
    """Give this greenlet an idle open connection for each database it has none for.

    The connection is checked again before its first query here (CONN_HEALTH_CHECKS): it may have waited in the set
    for minutes, and a PostgreSQL connection (DB_POOL=0) whose session ended meanwhile is reopened, never used.
    """
    for alias, idle in _idle.items():
        if idle and not _has(alias):
            wrapper = idle.pop()
            wrapper.health_check_done = False
            connections[alias] = wrapper


def take_back() -> None:
    """Put this greenlet's open connections, outside any transaction, back for the next greenlet (or close them)."""
    for wrapper in connections.all(initialized_only=True):
        if wrapper.connection is None:
            continue
        if wrapper.in_atomic_block or not wrapper.get_autocommit():
            continue  # mid-transaction: leave it where it is (Django closes it if the greenlet never finishes it)
        idle = _idle.setdefault(wrapper.alias, [])
        del connections[wrapper.alias]
        if not wrapper.allow_thread_sharing:
            wrapper.inc_thread_sharing()  # used by one greenlet at a time, but not always the one that opened it
        if len(idle) >= IDLE_MAX:
            wrapper.close()
        else:
            idle.append(wrapper)


def _has(alias: str) -> bool:
    return any(w.alias == alias and w.connection is not None for w in connections.all(initialized_only=True))


def close_idle() -> None:
    """Close every idle connection (tests; a process about to exit)."""
    for idle in _idle.values():
        while idle:
            idle.pop().close()
