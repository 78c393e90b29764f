"""The live bus: what a run is doing right now (text as the model writes it, a tool call starting and ending) goes
from the process doing the work to the processes serving the run's event streams. Nothing on it is stored.

It rides the doorbell's channel: Redis pub/sub with REDIS_URL, PostgreSQL NOTIFY on PostgreSQL (whose 8,000-byte
payload limit a long message is split for), and on the embedded default (SQLite, no server to ring) a Unix datagram
socket per listening process in one directory of this machine. One outbox thread per process sends for every run:
the model's thread only appends to a buffer, never waits on the network or holds a database connection, and a run's
text goes out at most every COALESCE_S (or every COALESCE_CHARS), so a fast model costs a message per interval, not
per token. The first piece of a turn goes at once. Listening is the doorbell's job (agents/runs/doorbell.py).
"""

from __future__ import annotations

import itertools
import json
import logging
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.conf import settings
from django.db import connection

from agents.runs import localbus

log = logging.getLogger(__name__)

CHANNEL = "reactsite_live"
COALESCE_S = 0.05  # a run's text goes out at most this often ...
COALESCE_CHARS = 1024  # ... unless this much is waiting
PG_PAYLOAD_BYTES = 7900  # NOTIFY's limit is 8000 bytes: a longer message goes in parts
PART_BYTES = 7000

_seq = itertools.count(1)

# Control messages, for every listener (not about one run): "~ <seq> follow {"run": id}", "~ <seq> hello {}".
CONTROL = "~ "
FOLLOW_EVENT, HELLO_EVENT = "follow", "hello"
FOLLOW_RENEW_S = 10.0  # a stream's process announces the runs it follows this often ...
FOLLOW_TTL_S = 30.0  # ... and an announcement holds this long


def announce(outbox: Outbox, run_id: str) -> None:
    """Tell every listening process that a stream here follows this run."""
    outbox.event(CONTROL.strip(), FOLLOW_EVENT, {"run": run_id})


def bell_kind() -> str:
    """The doorbell's kind: redis, postgres, local or poll, from AGENT_DOORBELL (auto: PostgreSQL's NOTIFY on
    PostgreSQL, else Redis when configured, else local sockets: SQLite alone is one machine). On PostgreSQL the ring
    rides the commit; a Redis publish was a round trip per commit. poll (by hand only): streams read every 0.25 s."""
    chosen = settings.AGENT_DOORBELL
    if chosen != "auto":
        return chosen
    if connection.vendor == "postgresql":
        return "postgres"
    return "redis" if settings.REDIS_URL else "local"


def transport() -> str:
    """redis, postgres or local (the doorbell's kind; with poll, local sockets); off when AGENT_LIVE is off."""
    if not settings.AGENT_LIVE:
        return "off"
    kind = bell_kind()
    return "local" if kind == "poll" else kind


@cache
def redis_client(url: str):
    """One Redis client per process and URL (the doorbell's rings and subscription, the outbox's publishes)."""
    import redis  # noqa: PLC0415 - only with REDIS_URL

    return redis.Redis.from_url(url)


# --- message format --------------------------------------------------------------------------------------------
# "<run id> <seq> <event> <data json>"; a part of a long one (PostgreSQL): "<run id> <seq> ~<k>/<n> <piece>".


def encode(run_id: str, event: str, data: dict[str, Any]) -> str:
    return f"{run_id} {next(_seq):x} {event} {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}"


def run_of(payload: str) -> str:
    """The run a message is about (read before anything else, so a process with no stream on it stops here)."""
    return payload.partition(" ")[0]


def decode(payload: str) -> tuple[str, str, str]:
    """(run id, event, data JSON) of a whole message."""
    run_id, _, rest = payload.partition(" ")
    _, _, rest = rest.partition(" ")
    event, _, data = rest.partition(" ")
    return run_id, event, data


def split(payload: str, limit: int = PG_PAYLOAD_BYTES, part: int = PART_BYTES) -> list[str]:
    """The message as is, or in parts that each fit a NOTIFY (joined again by Parts)."""
    if len(payload.encode()) <= limit:
        return [payload]
    run_id, _, rest = payload.partition(" ")
    seq, _, body = rest.partition(" ")
    pieces: list[str] = []
    piece: list[str] = []
    size = 0
    for char in body:
        width = len(char.encode())
        if size + width > part:
            pieces.append("".join(piece))
            piece, size = [], 0
        piece.append(char)
        size += width
    pieces.append("".join(piece))
    return [f"{run_id} {seq} ~{k}/{len(pieces)} {p}" for k, p in enumerate(pieces, 1)]


class Parts:
    """Joins the parts of long messages (they arrive in order: one statement sends them all)."""

    def __init__(self) -> None:
        self._open: dict[tuple[str, str], list[str]] = {}

    def add(self, payload: str) -> str | None:
        """The whole message once it is complete (or at once, for one that was never split)."""
        run_id, _, rest = payload.partition(" ")
        seq, _, rest = rest.partition(" ")
        if not rest.startswith("~"):
            return payload
        mark, _, piece = rest.partition(" ")
        k, _, n = mark[1:].partition("/")
        key = (run_id, seq)
        if k == "1":
            self._open[key] = []
        got = self._open.get(key)
        if got is None:  # its first part was missed
            return None
        got.append(piece)
        if k != n:
            return None
        del self._open[key]
        return f"{run_id} {seq} {''.join(got)}"


# --- the outbox: one thread per process sends every run's messages ----------------------------------------------


@dataclass
class _Text:
    turn: int
    parts: list[str] = field(default_factory=list)
    size: int = 0
    due: float = 0.0


class Outbox:
    """Collects what the runs of this process publish and sends it from one thread, in order per run."""

    def __init__(self, send, clock=time.monotonic) -> None:
        self._send, self._clock = send, clock
        self._cond = threading.Condition()
        self._ready: deque[str] = deque()
        self._text: dict[str, _Text] = {}  # a run's text not sent yet
        self._last: dict[str, float] = {}  # when a run's text last went out
        self.sent = 0
        self._queued = self._done = 0  # messages handed to the thread, and sent (or given up on) by it
        threading.Thread(target=self._run, name="live-outbox", daemon=True).start()

    def text(self, run_id: str, turn: int, text: str) -> None:
        if not text:
            return
        with self._cond:
            now, pending = self._clock(), self._text.get(run_id)
            if pending is not None and pending.turn != turn:
                self._flush(run_id)
                pending = None
            if pending is None:
                if now - self._last.get(run_id, -1e9) >= COALESCE_S and len(text) < COALESCE_CHARS:
                    self._last[run_id] = now  # the first piece after a quiet spell goes at once
                    self._put(encode(run_id, "assistant.delta", {"turn": turn, "text": text}))
                    self._cond.notify()
                    return
                pending = self._text[run_id] = _Text(turn, due=self._last.get(run_id, now) + COALESCE_S)
            pending.parts.append(text)
            pending.size += len(text)
            if pending.size >= COALESCE_CHARS:
                self._flush(run_id)
            self._cond.notify()

    def event(self, run_id: str, event: str, data: dict[str, Any]) -> None:
        """Any other event: after the run's text so far, at once."""
        with self._cond:
            self._flush(run_id)
            self._put(encode(run_id, event, data))
            self._cond.notify()

    def flush(self, run_id: str, forget: bool = False, wait_s: float = 0.0) -> None:
        """Send the run's waiting text now (the model call ended); `forget` the run once its unit is over. With
        `wait_s`, return once everything handed in so far went out (or that time passed): what was live then
        reaches the streams before the commit that follows it."""
        with self._cond:
            self._flush(run_id)
            if forget:
                self._last.pop(run_id, None)
            self._cond.notify()
            ticket, deadline = self._queued, self._clock() + wait_s
            while self._done < ticket and (left := deadline - self._clock()) > 0:
                self._cond.wait(left)

    def drain(self, timeout: float = 2.0) -> bool:
        """Wait until everything handed in so far was sent (tests, and a process about to exit)."""
        deadline = self._clock() + timeout
        with self._cond:
            for run_id in list(self._text):
                self._flush(run_id)
            self._cond.notify()
            while self._ready or self._busy:
                left = deadline - self._clock()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    _busy = False

    def _put(self, payload: str) -> None:  # under the lock
        self._ready.append(payload)
        self._queued += 1

    def _flush(self, run_id: str) -> None:  # under the lock
        pending = self._text.pop(run_id, None)
        if pending is None:
            return
        text = "".join(pending.parts)
        for start in range(0, len(text), COALESCE_CHARS):
            piece = text[start : start + COALESCE_CHARS]
            self._put(encode(run_id, "assistant.delta", {"turn": pending.turn, "text": piece}))
        self._last[run_id] = self._clock()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = self._clock()
                    for run_id in [r for r, t in self._text.items() if t.due <= now]:
                        self._flush(run_id)
                    if self._ready:
                        break
                    due = min((t.due for t in self._text.values()), default=None)
                    self._cond.wait(None if due is None else max(due - now, 0.001))
                batch = list(self._ready)
                self._ready.clear()
                self._busy = True
            try:
                self._send(batch)
            except Exception as exc:  # noqa: BLE001 - live events are a courtesy: the committed steps are the record
                log.warning("live events not sent (%s): %s", type(exc).__name__, exc)
            with self._cond:
                self._busy = False
                self.sent += len(batch)
                self._done += len(batch)
                self._cond.notify_all()


_OUTBOX: dict[str, Outbox] = {}
_OUTBOX_LOCK = threading.Lock()


def outbox() -> Outbox | None:
    """This process's outbox for the configured transport (started on first use); None when AGENT_LIVE is off."""
    name = transport()
    if name == "off":
        return None
    with _OUTBOX_LOCK:
        if name not in _OUTBOX:
            _OUTBOX[name] = Outbox(_SENDERS[name]())
        return _OUTBOX[name]


def _redis_sender():
    client = redis_client(settings.REDIS_URL)

    def send(batch: list[str]) -> None:
        pipe = client.pipeline(transaction=False)
        for payload in batch:
            pipe.publish(CHANNEL, payload)
        pipe.execute()

    return send


def _postgres_sender():
    state: dict[str, Any] = {}
    params = pg_params()

    def send(batch: list[str]) -> None:
        import psycopg  # noqa: PLC0415 - only on PostgreSQL

        conn = state.get("conn")
        if conn is None or conn.closed:
            conn = state["conn"] = psycopg.connect(autocommit=True, **params)
        payloads = [part for payload in batch for part in split(payload)]
        try:
            for start in range(0, len(payloads), 200):  # one round trip per 200 messages
                chunk = payloads[start : start + 200]
                calls = ", ".join(["pg_notify(%s, %s)"] * len(chunk))
                conn.execute(f"SELECT {calls}", [v for p in chunk for v in (CHANNEL, p)])
        except Exception:
            conn.close()  # a new connection for the next batch
            raise

    return send


def pg_params() -> dict[str, Any]:
    """psycopg.connect() arguments for the default database (the listener's and the outbox's own connections)."""
    conf = connection.settings_dict
    params = {"dbname": conf["NAME"], "user": conf["USER"], "password": conf["PASSWORD"] or None}
    params |= {"host": conf["HOST"] or None, "port": conf["PORT"] or None}
    params["connect_timeout"] = (conf.get("OPTIONS") or {}).get("connect_timeout", 5)
    return {k: v for k, v in params.items() if v}


# --- local sockets (the embedded default: one machine, no server; agents/runs/localbus.py) -------------------------

_RING_SOCKET: list[socket.socket] = []
_RING_LOCK = threading.Lock()


def ring_local(run_id: str) -> None:
    """The doorbell's ring on the embedded default: a `ring` message to every listening process of this machine,
    sent at once (after the commit it tells of), not through the outbox."""
    with _RING_LOCK:  # one sender at a time: a socket waited on by two greenlets at once is refused by gevent
        if not _RING_SOCKET:
            _RING_SOCKET.append(localbus.sending_socket())
        localbus.deliver(_RING_SOCKET[0], localbus.local_dir(), [encode(run_id, RING_EVENT, {})])


RING_EVENT = "ring"


_SENDERS = {"redis": _redis_sender, "postgres": _postgres_sender, "local": localbus.sender}
