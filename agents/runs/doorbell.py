"""A doorbell for event streams, part of the services layer: a run's commit rings, a stream waiting on it wakes.

Without it every open stream polls the database four times a second. On PostgreSQL a commit NOTIFYs the run's id
on one channel, inside the commit's own statement (agents/runs/persist.py: no extra round trip, and delivered only once
the commit is); with SQLite and Redis (REDIS_URL) it publishes the id on a Redis channel. Each process listens once
(one LISTEN connection, or one subscription, however many streams are open) and wakes the streams waiting on that
run. Whenever the listener (re)connects it wakes every stream it has, since a ring sent while it was not listening
is lost: so a waiting stream reads the database only when its run has news (or once a minute, as a safety net),
however long it stays open. On SQLite alone — one machine — the ring is a datagram to each listening process's
Unix socket (agents/runs/livebus.py). AGENT_DOORBELL (auto, redis, postgres, local, poll) picks one by hand; with
poll, streams read the database every 0.25 s.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

from django.conf import settings
from django.db import connection

from agents.runs import livebus, localbus

log = logging.getLogger(__name__)
CHANNEL = "reactsite_runs"


def kind() -> str:
    """redis, postgres or poll (agents/runs/livebus.py `bell_kind`)."""
    return livebus.bell_kind()


def ring(run_id) -> None:
    """Tell every process's streams that this run has news (after the news is committed)."""
    try:
        match kind():
            case "redis":
                livebus.redis_client(settings.REDIS_URL).publish(CHANNEL, str(run_id))
            case "postgres":
                with connection.cursor() as cursor:
                    cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, str(run_id)])
            case "local":
                livebus.ring_local(str(run_id))
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
    watch = listener.watch(str(run_id))
    listener.start()
    try:
        yield watch.event
    finally:
        listener.unwatch(str(run_id), watch)


RING = "ring"  # in a Watch's inbox: the run's bell rang (read the database)
READY_S = 2.0  # how long a stream waits, at most, for its process's new listener to listen


class Watch:
    """One stream's view of its run: `event` is set when something arrives; `inbox` (when following) holds, in the
    order they came, RING for a ring and (event, data JSON) for a live event. `polls`: no bell rings for commits
    (the embedded default), so the stream reads the database on its own clock."""

    def __init__(self, inbox: bool = False, polls: bool = False) -> None:
        self.event = threading.Event()
        self.inbox: deque | None = deque() if inbox else None
        self.polls = polls

    def take(self) -> list:
        """Everything in the inbox so far (clears the event first: what comes later sets it again)."""
        self.event.clear()
        items = []
        while self.inbox:
            items.append(self.inbox.popleft())
        return items


@contextmanager
def following(run_id) -> Iterator[Watch]:
    """A Watch with an inbox of this run's rings and live events (agents/runs/livebus.py), for as long as the block
    lasts. Without a bell to ring (the embedded default) the live events come from local sockets and `polls` is set;
    with AGENT_LIVE off no live event comes."""
    run_id, watch = str(run_id), None
    bell, live = _listener(kind()), _listener(livebus.transport())
    listeners = [x for x in {id(bell): bell, id(live): live}.values() if x is not None]
    watch = Watch(inbox=True, polls=bell is None)
    for listener in listeners:
        listener.add(run_id, watch)
        listener.start()
    if live is not None:
        live.ready.wait(READY_S)  # a new listener: live events published before it listens would be lost
        _announce(live, run_id)
    try:
        yield watch
    finally:
        for listener in listeners:
            listener.unwatch(run_id, watch)


def _announce(listener: _Listener, run_id: str) -> None:
    """Tell every process that a stream follows this run, and wait (briefly) until our own listener heard it: the
    others heard it by then too, so the run's next model call streams its text.

    The wait is on an event the listener sets when the announcement comes back, not a poll: streams opened at once
    that each polled until theirs came kept a gevent worker's loop busy and so held the announcements (and, before
    the stream let its connection go, as many pooled connections) back longer still."""
    outbox = livebus.outbox()
    if outbox is None:
        return
    heard = listener.expect(run_id)
    try:
        livebus.announce(outbox, run_id)
        if not listener.heard(run_id):
            heard.wait(READY_S)
    finally:
        listener.unexpect(run_id, heard)


def follows(run_id) -> bool:
    """Whether a stream anywhere follows this run: only then does its process stream the model's reply and send
    live events (a run no one watches costs what it did before live runs). Starts this process's listener."""
    listener = _listener(livebus.transport())
    if listener is None:
        return False
    listener.start()
    return listener.follows(str(run_id))


class _Listener:
    """One subscription per process; streams register a Watch per run they wait on."""

    def __init__(self, listen) -> None:
        self._listen, self._lock, self.stopped = listen, threading.Lock(), threading.Event()
        self._waiters: dict[str, set[Watch]] = defaultdict(set)
        self._parts = livebus.Parts()
        self.ready = threading.Event()  # set once listening (tests wait for it)
        self.socket: Any = None  # the local listener's socket
        self._started = False
        self.followed: dict[str, float] = {}  # runs some process's stream follows, until when (its announcements)
        self._expected: dict[str, set[threading.Event]] = defaultdict(set)  # streams waiting for their announcement
        self._renew_at = 0.0

    def start(self) -> None:
        """Listen from now on (once): after the first watch is added, so its first wake-up reaches that watch."""
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._run, name="doorbell", daemon=True).start()

    def watch(self, run_id: str) -> Watch:
        watch = Watch()
        self.add(run_id, watch)
        return watch

    def add(self, run_id: str, watch: Watch) -> None:
        with self._lock:
            self._waiters[run_id].add(watch)

    def unwatch(self, run_id: str, watch: Watch) -> None:
        with self._lock:
            self._waiters[run_id].discard(watch)
            if not self._waiters[run_id]:
                del self._waiters[run_id]

    def expect(self, run_id: str) -> threading.Event:
        """An event set when an announcement that a stream follows this run comes over the bus."""
        heard = threading.Event()
        with self._lock:
            self._expected[run_id].add(heard)
        return heard

    def unexpect(self, run_id: str, heard: threading.Event) -> None:
        with self._lock:
            self._expected[run_id].discard(heard)
            if not self._expected[run_id]:
                del self._expected[run_id]

    def _wake(self, run_id: str) -> None:
        with self._lock:
            watches = list(self._waiters.get(run_id, ()))
        for watch in watches:
            if watch.inbox is not None:
                watch.inbox.append(RING)
            watch.event.set()

    def _live(self, payload: str) -> None:
        """A live event: to the streams following its run (a process with none drops it unread)."""
        if payload.startswith(livebus.CONTROL):
            return self._control(payload)
        if livebus.run_of(payload) not in self._waiters:
            return
        whole = self._parts.add(payload)
        if whole is None:
            return
        run_id, event, data = livebus.decode(whole)
        if event == livebus.RING_EVENT:  # the embedded default's ring travels with the live events
            return self._wake(run_id)
        with self._lock:
            watches = [w for w in self._waiters.get(run_id, ()) if w.inbox is not None]
        for watch in watches:
            assert watch.inbox is not None  # kept above: only following watches
            watch.inbox.append((event, data))
            watch.event.set()

    def _control(self, payload: str) -> None:
        """`follow` (a stream somewhere follows a run: publish its live events) or `hello` (a listener has just
        started and knows of no stream yet: announce ours again)."""
        _, event, data = livebus.decode(payload)
        if event == livebus.FOLLOW_EVENT:
            run_id = json.loads(data).get("run")
            if isinstance(run_id, str):
                self.followed[run_id] = time.monotonic() + livebus.FOLLOW_TTL_S
                with self._lock:
                    expected = list(self._expected.get(run_id, ()))
                for heard in expected:
                    heard.set()
        elif event == livebus.HELLO_EVENT:
            self._renew_at = 0.0  # at the next tick

    def heard(self, run_id: str) -> bool:
        """Whether an announcement that a stream follows this run came over the bus (and holds)."""
        until = self.followed.get(run_id)
        return until is not None and until >= time.monotonic()

    def follows(self, run_id: str) -> bool:
        """Whether a stream of any process follows this run: one of ours (known at once, whatever the bus's delay),
        or another process's (as its announcements, renewed every few seconds, say)."""
        with self._lock:
            if any(watch.inbox is not None for watch in self._waiters.get(run_id, ())):
                return True
        until = self.followed.get(run_id)
        if until is None:
            return False
        if until < time.monotonic():
            self.followed.pop(run_id, None)
            return False
        return True

    def tick(self) -> None:
        """Called by the listening loop about once a second: announce the runs this process's streams follow."""
        now = time.monotonic()
        if now < self._renew_at:
            return
        self._renew_at = now + livebus.FOLLOW_RENEW_S
        with self._lock:
            runs = [run_id for run_id, watches in self._waiters.items() if any(w.inbox is not None for w in watches)]
        outbox = livebus.outbox()
        if outbox is not None:
            for run_id in runs:
                livebus.announce(outbox, run_id)

    def _wake_all(self) -> None:
        """Now listening (again): every waiting stream re-reads once, for the rings sent while no one listened."""
        with self._lock:
            watches = [watch for waiters in self._waiters.values() for watch in waiters]
        outbox = livebus.outbox()
        if outbox is not None:  # the streams of other processes announce their runs to us again
            outbox.event(livebus.CONTROL.strip(), livebus.HELLO_EVENT, {})
        self._renew_at = 0.0
        self.ready.set()
        for watch in watches:
            if watch.inbox is not None:
                watch.inbox.append(RING)
            watch.event.set()

    def _run(self) -> None:
        while not self.stopped.is_set():
            try:
                self._listen(self, self.stopped)
            except Exception as exc:  # noqa: BLE001 - reconnect, then every stream re-reads (_wake_all)
                log.warning("doorbell listener lost (%s); reconnecting", type(exc).__name__)
                time.sleep(1.0)


def _listen_redis(listener: _Listener, stopped: threading.Event) -> None:
    pubsub = livebus.redis_client(settings.REDIS_URL).pubsub()
    pubsub.subscribe(CHANNEL, livebus.CHANNEL)
    subscribed = 0
    try:
        while not stopped.is_set():
            message = pubsub.get_message(timeout=1.0)
            listener.tick()
            if message is None:
                continue
            if message["type"] == "message":
                if message["channel"] == b"reactsite_live":
                    listener._live(message["data"].decode())
                else:
                    listener._wake(message["data"].decode())
            elif message["type"] == "subscribe":  # Redis confirms: from here on no publish is missed
                subscribed += 1
                if subscribed == 2:
                    listener._wake_all()
    finally:
        pubsub.close()


def _listen_postgres(listener: _Listener, stopped: threading.Event) -> None:
    import psycopg

    with psycopg.connect(autocommit=True, **livebus.pg_params()) as conn:
        # Done when it returns: every later commit's NOTIFY, and every live event, reaches us.
        conn.execute(f"LISTEN {CHANNEL}; LISTEN {livebus.CHANNEL}")
        listener._wake_all()
        while not stopped.is_set():
            listener.tick()
            for notify in conn.notifies(timeout=1.0):
                if notify.channel == livebus.CHANNEL:
                    listener._live(notify.payload)
                else:
                    listener._wake(notify.payload)


def _listen_local(listener: _Listener, stopped: threading.Event) -> None:
    """The embedded default: live events arrive on this process's own socket (there are no rings to hear)."""
    sock = listener.socket = localbus.local_socket()
    sock.settimeout(1.0)
    try:
        listener._wake_all()
        while not stopped.is_set():
            listener.tick()
            try:
                data = sock.recv(1 << 20)
            except TimeoutError:
                continue
            listener._live(data.decode())
    finally:
        path = sock.getsockname()
        sock.close()
        with suppress(OSError):
            os.unlink(path)


_LISTENERS: dict[str, _Listener] = {}
_LISTENERS_LOCK = threading.Lock()


def _listener(name: str) -> _Listener | None:
    """This process's listener for a doorbell kind or live transport (started on first use); None for poll/off."""
    listen = {"redis": _listen_redis, "postgres": _listen_postgres, "local": _listen_local}.get(name)
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
