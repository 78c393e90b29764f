"""A doorbell for event streams, part of the services layer: a run's commit rings, a stream waiting on it wakes.

Without it every open stream polls the database four times a second. On PostgreSQL a commit NOTIFYs the run's id
on one channel, inside the commit's own statement (agents/runs/persist.py: no extra round trip, and delivered only once
the commit is); with SQLite and Redis (REDIS_URL) it publishes the id on a Redis channel. Each process listens once
(one LISTEN connection, or one subscription, however many streams are open) and wakes the streams waiting on that
run. Whenever the listener (re)connects it wakes every stream it has, since a ring sent while it was not listening
is lost: so a waiting stream reads the database only when its run has news (or once a minute, as a safety net),
however long it stays open. On SQLite alone — one machine, no server to ring — streams poll as before.
AGENT_DOORBELL (auto, redis, postgres, poll) picks one by hand.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

from django.conf import settings
from django.db import connection

log = logging.getLogger(__name__)
CHANNEL = "reactsite_runs"


def kind() -> str:
    """redis, postgres or poll, from AGENT_DOORBELL (auto: PostgreSQL's NOTIFY on PostgreSQL, else Redis when
    configured, else poll). On PostgreSQL the ring rides the commit; a Redis publish was a round trip per commit."""
    chosen = settings.AGENT_DOORBELL
    if chosen != "auto":
        return chosen
    if connection.vendor == "postgresql":
        return "postgres"
    return "redis" if settings.REDIS_URL else "poll"


def ring(run_id) -> None:
    """Tell every process's streams that this run has news (after the news is committed)."""
    try:
        match kind():
            case "redis":
                _redis(settings.REDIS_URL).publish(CHANNEL, str(run_id))
            case "postgres":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, str(run_id)])
    except Exception as exc:  # noqa: BLE001 - a lost ring costs a stream one safety re-check, never the run
        log.warning("doorbell ring failed: %s", type(exc).__name__)


@contextmanager
def watching(run_id) -> Iterator[threading.Event | None]:
    """An event set whenever this run's bell rings, for as long as the block lasts (None when streams poll).

    Clear it before reading the run, then wait on it: a ring between the read and the wait is not lost.
    """
    listener = _listener(kind())
    if listener is None:
        yield None
        return
    event = listener.watch(str(run_id))
    try:
        yield event
    finally:
        listener.unwatch(str(run_id), event)


@cache
def _redis(url: str):
    import redis

    return redis.Redis.from_url(url)


class _Listener:
    """One subscription per process; streams register an event per run they wait on."""

    def __init__(self, listen) -> None:
        self._listen, self._lock, self.stopped = listen, threading.Lock(), threading.Event()
        self._waiters: dict[str, set[threading.Event]] = defaultdict(set)
        threading.Thread(target=self._run, name="doorbell", daemon=True).start()

    def watch(self, run_id: str) -> threading.Event:
        event = threading.Event()
        with self._lock:
            self._waiters[run_id].add(event)
        return event

    def unwatch(self, run_id: str, event: threading.Event) -> None:
        with self._lock:
            self._waiters[run_id].discard(event)
            if not self._waiters[run_id]:
                del self._waiters[run_id]

    def _wake(self, run_id: str) -> None:
        with self._lock:
            events = list(self._waiters.get(run_id, ()))
        for event in events:
            event.set()

    def _wake_all(self) -> None:
        """Now listening (again): every waiting stream re-reads once, for the rings sent while no one listened."""
        with self._lock:
            events = [event for waiters in self._waiters.values() for event in waiters]
        for event in events:
            event.set()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                self._listen(self._wake, self._wake_all, self.stopped)
            except Exception as exc:  # noqa: BLE001 - reconnect, then every stream re-reads (_wake_all)
                log.warning("doorbell listener lost (%s); reconnecting", type(exc).__name__)
                time.sleep(1.0)


def _listen_redis(wake, listening, stopped: threading.Event) -> None:
    pubsub = _redis(settings.REDIS_URL).pubsub()
    pubsub.subscribe(CHANNEL)
    try:
        while not stopped.is_set():
            message = pubsub.get_message(timeout=1.0)
            if message is None:
                continue
            if message["type"] == "message":
                wake(message["data"].decode())
            elif message["type"] == "subscribe":  # Redis confirms: from here on no publish is missed
                listening()
    finally:
        pubsub.close()


def _listen_postgres(wake, listening, stopped: threading.Event) -> None:
    import psycopg

    conf = connection.settings_dict
    params = {"dbname": conf["NAME"], "user": conf["USER"], "password": conf["PASSWORD"] or None}
    params |= {"host": conf["HOST"] or None, "port": conf["PORT"] or None}
    with psycopg.connect(autocommit=True, **{k: v for k, v in params.items() if v}) as conn:
        conn.execute(f"LISTEN {CHANNEL}")  # done when it returns: every later commit's NOTIFY reaches us
        listening()
        while not stopped.is_set():
            for notify in conn.notifies(timeout=1.0):
                wake(notify.payload)


_LISTENERS: dict[str, _Listener] = {}
_LISTENERS_LOCK = threading.Lock()


def _listener(name: str) -> _Listener | None:
    """This process's listener for the doorbell kind (started on first use); None for poll."""
    listen = {"redis": _listen_redis, "postgres": _listen_postgres}.get(name)
    if listen is None:
        return None
    with _LISTENERS_LOCK:
        if name not in _LISTENERS:
            _LISTENERS[name] = _Listener(listen)
        return _LISTENERS[name]


def stop_listeners() -> None:
    """Stop this process's listeners (they close their subscription or connection within a second)."""
    with _LISTENERS_LOCK:
        for listener in _LISTENERS.values():
            listener.stopped.set()
        _LISTENERS.clear()
