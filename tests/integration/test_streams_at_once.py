"""Event streams opened by the hundred hold nothing while they wait: /api/v1/health answers while 200 of them open.

In a second, contended round of 200 streams beside a load, one health check answered 503 after 47 s. Each stream kept
the pooled connection of its view's reads while it waited for its process's listener to hear its announcement (and
polled for that every 2 ms), so the pool ran dry and health's check of the database queued behind the streams; and a
worker set the streams up one after another as it accepted them, health's request last.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from django.db import connection

from agents.api.events import run_events
from agents.models import Run
from agents.runs import doorbell, livebus
from tests.conftest import stored_run_fields
from tests.integration._support import ROOT, app_env, quick_user, stop, token_key, wait_healthy
from tests.integration.conftest import free_port

STREAMS = 200
POOL = 1  # PostgreSQL: one pooled connection per worker (2 workers) for 200 streams and health
HEALTH_S = 1.0  # health answers within this (the client gives up after it)


@dataclass
class Server:
    url: str
    stderr: Path


@pytest.fixture(scope="module")
def small_pool_server(django_db_setup, tmp_path_factory):
    """gunicorn as deployed (2 workers of the default class, gevent) on the test database, with a pool of POOL
    connections per worker on PostgreSQL: 200 streams that each held one while waiting could not all open."""
    logs = tmp_path_factory.mktemp("streams")
    env = app_env(LOG_LEVEL="WARNING", DB_POOL_MIN_SIZE=str(POOL), DB_POOL_MAX_SIZE=str(POOL))
    out, err = logs / "stdout.log", logs / "stderr.log"
    port = free_port()
    cmd = [str(Path(sys.executable).parent / "gunicorn"), "-c", "gunicorn.conf.py", "--workers", "2"]
    cmd += ["--bind", f"127.0.0.1:{port}", "--no-control-socket", "reactsite.wsgi"]
    with out.open("wb") as fout, err.open("wb") as ferr:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fout, stderr=ferr)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, proc, err)
        yield Server(url=url, stderr=err)
    finally:
        stop(proc)


def _open_stream(url: str, run_id, token: str) -> socket.socket:
    """A client of the run's event stream: the request sent, the answer not read yet."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    head = f"GET /api/v1/runs/{run_id}/events HTTP/1.1\r\nHost: {host}\r\nAuthorization: Token {token}\r\n"
    sock.sendall((head + "Accept: text/event-stream\r\n\r\n").encode())
    return sock


def _read_until(sock: socket.socket, marker: bytes, got: bytes = b"", limit_s: float = 20.0) -> bytes:
    deadline = time.monotonic() + limit_s
    while marker not in got and time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def _health(url: str) -> tuple[int, dict]:
    resp = requests.get(url + "/api/v1/health", timeout=HEALTH_S)
    return resp.status_code, resp.json()


@pytest.mark.django_db(transaction=True)
def test_health_answers_within_a_second_while_200_streams_open_at_once(small_pool_server):
    server = small_pool_server
    owner = quick_user(f"streams{time.monotonic_ns()}")
    token = token_key(owner)
    fields = stored_run_fields(status="awaiting_approval", stop_reason="", output=None)
    runs = Run.objects.bulk_create([Run(owner=owner, **fields) for _ in range(STREAMS)])  # each waits for a reviewer
    socks: list[socket.socket] = []
    try:
        socks = [_open_stream(server.url, run.pk, token) for run in runs]  # all sent before any answer is read
        assert _health(server.url)[0] == 200, "health while the streams open"

        firsts = [_read_until(sock, b"event: run") for sock in socks]
        opened = [got for got in firsts if got.startswith(b"HTTP/1.1 200") and b"event: run" in got]
        refused = [got[:300] for got in firsts if got not in opened][:3]
        assert len(opened) == STREAMS, refused  # every stream is open and waiting on its paused run

        status, body = _health(server.url)
        assert (status, body["database"], body["cache"]) == (200, "ok", "ok"), "health while 200 streams wait"

        # Every stream still answers: the runs finish, each rings its bell, and each stream sends `done`.
        Run.objects.filter(pk__in=[run.pk for run in runs]).update(status="done", stop_reason="cancelled")
        for run in runs:
            doorbell.ring(run.pk)
        ends = [_read_until(sock, b"event: done", got) for sock, got in zip(socks, firsts, strict=True)]
        assert sum(b"event: done" in got for got in ends) == STREAMS
    finally:
        for sock in socks:
            sock.close()
        Run.objects.filter(pk__in=[run.pk for run in runs]).update(status="done", stop_reason="cancelled")


class _Recording(doorbell.Watch):
    """A stream's Watch that notes, each time the stream waits on it, whether a database connection is open."""

    held: list[bool] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        event, held = self.event, self.held

        class Event(threading.Event):
            def wait(self, timeout=None):
                held.append(connection.connection is not None)
                return super().wait(timeout)

        self.event = Event()
        if event.is_set():
            self.event.set()


@pytest.fixture
def doorbell_rings(settings):
    """The embedded default's doorbell on SQLite, PostgreSQL's otherwise; connections go back between reads."""
    settings.AGENT_RELEASE_DB_DURING_MODEL_CALLS = True  # SQLite keeps its file handle by default (no server slot)
    doorbell.stop_listeners()
    yield
    doorbell.stop_listeners()


@pytest.mark.django_db(transaction=True)
def test_a_stream_holds_no_connection_while_it_starts_or_waits(doorbell_rings, monkeypatch):
    """The view's reads leave a connection open; the stream lets it go before it waits for its announcement to be
    heard, takes one for each read only, and holds none while it waits on its bell."""
    monkeypatch.setattr(doorbell, "Watch", _Recording)
    _Recording.held = []
    held_while_announcing: list[bool] = []
    announce = doorbell._announce

    def recording_announce(listener, run_id):
        held_while_announcing.append(connection.connection is not None)
        return announce(listener, run_id)

    monkeypatch.setattr(doorbell, "_announce", recording_announce)
    monkeypatch.setattr("agents.api.events.KEEPALIVE_S", 0.05)
    run = Run.objects.create(owner=quick_user("sol"), **stored_run_fields(status="awaiting_approval", output=None))
    assert Run.objects.filter(pk=run.pk).exists() and connection.connection is not None  # as the view leaves it

    stream = run_events(run.pk, -1, max_s=30)
    try:
        assert next(stream).startswith("event: run")
        assert [next(stream) for _ in range(3)] == [": keep-alive\n\n"] * 3
    finally:
        stream.close()

    assert held_while_announcing == [False]
    assert len(_Recording.held) >= 3 and not any(_Recording.held)


@pytest.mark.django_db(transaction=True)
def test_a_stream_waits_for_its_announcement_without_polling(doorbell_rings, monkeypatch):
    """The wait for the listener to hear a stream's announcement is one wait on an event, set when it is heard (200
    streams each polling every 2 ms kept a gevent worker's loop busy while they opened)."""
    listener = doorbell._Listener(lambda listener, stopped: stopped.wait())
    checks: list[float] = []
    heard = listener.heard

    def counting_heard(run_id):
        checks.append(time.monotonic())
        return heard(run_id)

    monkeypatch.setattr(listener, "heard", counting_heard)
    outbox = livebus.outbox()
    if outbox is None:
        pytest.skip("no live bus")
    late = livebus.encode(livebus.CONTROL.strip(), livebus.FOLLOW_EVENT, {"run": "r-late"})
    monkeypatch.setattr(
        livebus, "announce", lambda outbox, run_id: threading.Timer(0.3, listener._control, [late]).start()
    )

    started = time.monotonic()
    doorbell._announce(listener, "r-late")
    waited = time.monotonic() - started

    assert 0.25 <= waited < doorbell.READY_S  # until the announcement came back, not the whole READY_S
    assert len(checks) <= 2
    listener.stopped.set()
