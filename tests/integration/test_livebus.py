"""The live bus (agents/runs/livebus.py): coalescing in the outbox, NOTIFY-sized parts, and delivery to the
processes following a run over the configured transport (local sockets on SQLite, NOTIFY on PostgreSQL, Redis)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from agents.runs import doorbell, livebus


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A transport that records what the outbox sends, batch by batch."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.sent = threading.Event()

    def __call__(self, batch: list[str]) -> None:
        self.batches.append(batch)
        self.sent.set()

    def messages(self) -> list[tuple[str, str, dict]]:
        out = []
        for batch in self.batches:
            for payload in batch:
                run_id, event, data = livebus.decode(payload)
                out.append((run_id, event, json.loads(data)))
        return out


def settle(outbox: livebus.Outbox) -> None:
    assert outbox.drain(2.0)


def test_the_first_piece_of_a_turn_goes_at_once_and_the_rest_is_coalesced():
    clock, sent = Clock(), Recorder()
    outbox = livebus.Outbox(sent, clock=clock)
    outbox.text("r1", 1, "Hel")
    settle(outbox)
    assert sent.messages() == [("r1", "assistant.delta", {"turn": 1, "text": "Hel"})]
    for piece in ["lo", ", ", "wor", "ld"]:  # four pieces within 50 ms: one message
        clock.now += 0.005
        outbox.text("r1", 1, piece)
    time.sleep(0.05)
    assert len(sent.messages()) == 1  # held back: the window is not over
    clock.now += 0.05
    with outbox._cond:
        outbox._cond.notify()
    settle(outbox)
    assert sent.messages()[1:] == [("r1", "assistant.delta", {"turn": 1, "text": "lo, world"})]


def test_a_kilobyte_goes_without_waiting_for_the_window():
    clock, sent = Clock(), Recorder()
    outbox = livebus.Outbox(sent, clock=clock)
    outbox.text("r1", 1, "a")
    for _ in range(300):
        outbox.text("r1", 1, "bcde")  # 1,200 characters at the same instant
    settle(outbox)
    texts = [m[2]["text"] for m in sent.messages()]
    assert "".join(texts) == "a" + "bcde" * 300
    assert all(len(t) <= livebus.COALESCE_CHARS for t in texts) and len(texts) >= 2


def test_other_events_flush_the_text_first_and_keep_the_order_per_run():
    clock, sent = Clock(), Recorder()
    outbox = livebus.Outbox(sent, clock=clock)
    outbox.text("r1", 1, "one")
    outbox.text("r1", 1, " two")  # waiting for the window
    outbox.text("r2", 4, "other run")
    outbox.event("r1", "tool.started", {"call_id": "c1", "tool": "t", "arguments": {}})
    outbox.text("r1", 2, "next turn")
    outbox.flush("r1", forget=True)
    settle(outbox)
    mine = [(e, d) for r, e, d in sent.messages() if r == "r1"]
    assert mine == [
        ("assistant.delta", {"turn": 1, "text": "one"}),
        ("assistant.delta", {"turn": 1, "text": " two"}),
        ("tool.started", {"call_id": "c1", "tool": "t", "arguments": {}}),
        ("assistant.delta", {"turn": 2, "text": "next turn"}),
    ]
    theirs = [(e, d) for r, e, d in sent.messages() if r == "r2"]
    assert theirs == [("assistant.delta", {"turn": 4, "text": "other run"})]


def test_a_failing_transport_loses_live_events_not_the_thread():
    clock, calls = Clock(), []

    def send(batch):
        calls.append(batch)
        if len(calls) == 1:
            raise ConnectionError("down")

    outbox = livebus.Outbox(send, clock=clock)
    outbox.event("r1", "assistant.retry", {"turn": 1})
    settle(outbox)
    outbox.event("r1", "assistant.retry", {"turn": 2})
    settle(outbox)
    assert len(calls) == 2  # the thread went on after the failure


@pytest.mark.parametrize("text", ["x" * 20000, "é€😀" * 3000, "line\n" * 2000])
def test_a_long_message_goes_in_notify_sized_parts_and_joins_again(text):
    payload = livebus.encode("run-1", "tool.started", {"call_id": "c", "tool": "t", "arguments": {"text": text}})
    parts = livebus.split(payload)
    assert len(parts) > 1 and all(len(p.encode()) <= livebus.PG_PAYLOAD_BYTES for p in parts)
    joiner = livebus.Parts()
    whole = [joiner.add(p) for p in parts]
    assert whole[:-1] == [None] * (len(parts) - 1) and whole[-1] == payload
    assert livebus.decode(whole[-1])[2] == payload.split(" ", 3)[3]


def test_a_part_whose_first_part_was_missed_is_dropped():
    payload = livebus.encode("run-1", "assistant.delta", {"turn": 1, "text": "y" * 20000})
    parts = livebus.split(payload)
    joiner = livebus.Parts()
    assert [joiner.add(p) for p in parts[1:]] == [None] * (len(parts) - 1)


def test_a_short_message_is_one_part():
    payload = livebus.encode("run-1", "assistant.delta", {"turn": 1, "text": "short"})
    assert livebus.split(payload) == [payload] and livebus.Parts().add(payload) == payload


@pytest.mark.django_db(transaction=True)
def test_a_published_event_reaches_the_streams_following_that_run_only():
    """Through this deployment's transport (a socket per process on SQLite, NOTIFY on PostgreSQL, or Redis)."""
    outbox = livebus.outbox()
    assert outbox is not None
    with doorbell.following("run-a") as mine, doorbell.following("run-b") as theirs:
        outbox.event("run-a", "tool.started", {"call_id": "c1", "tool": "search", "arguments": {"q": "é"}})
        outbox.text("run-a", 3, "hello")
        assert outbox.drain(5)
        deadline, got = time.monotonic() + 5, []
        while len(got) < 2 and time.monotonic() < deadline:
            mine.event.wait(0.2)
            got += [item for item in mine.take() if item is not doorbell.RING]
        assert [(event, json.loads(data)) for event, data in got] == [
            ("tool.started", {"call_id": "c1", "tool": "search", "arguments": {"q": "é"}}),
            ("assistant.delta", {"turn": 3, "text": "hello"}),
        ]
        assert [item for item in theirs.take() if item is not doorbell.RING] == []


@pytest.mark.django_db(transaction=True)
def test_a_stream_of_this_process_counts_as_following_even_if_its_announcement_is_late(monkeypatch):
    """The process that serves a stream knows at once that its run is followed: a bus slow to carry the `follow`
    announcement back (a loaded host) does not turn a run's tool events off mid-run. Other processes learn it from
    the announcement, and stop counting it once the stream ends."""
    monkeypatch.setattr(livebus, "announce", lambda outbox, run_id: None)  # the announcement never arrives
    monkeypatch.setattr(doorbell, "READY_S", 0.05)
    assert not doorbell.follows("run-late")
    with doorbell.following("run-late"):
        assert doorbell.follows("run-late")
        assert not doorbell.follows("run-other")
    assert not doorbell.follows("run-late")


@pytest.mark.django_db(transaction=True)
def test_live_off_sends_nothing_and_streams_get_nothing(settings):
    settings.AGENT_LIVE = False
    assert livebus.transport() == "off" and livebus.outbox() is None
    from agents.runs import live

    assert live.for_run("r") is None


# --- the embedded default's doorbell: rings as datagrams ---------------------------------------------------------


@pytest.fixture
def local_bell(settings):
    settings.AGENT_DOORBELL = "local"
    doorbell.stop_listeners()
    yield
    doorbell.stop_listeners()


def _running_run():
    from agents.models import Run
    from tests.conftest import stored_run_fields
    from tests.integration._support import quick_user

    return Run.objects.create(owner=quick_user(f"l{time.monotonic_ns()}"), **stored_run_fields(status="running"))


@pytest.mark.django_db(transaction=True)
def test_a_local_ring_wakes_the_watchers_of_that_run_only(local_bell):
    run, other = _running_run(), _running_run()
    with doorbell.watching(run.pk) as mine, doorbell.watching(other.pk) as theirs:
        assert doorbell._LISTENERS["local"].ready.wait(5)
        time.sleep(0.05)
        mine.clear(), theirs.clear()
        doorbell.ring(run.pk)
        assert mine.wait(2), "the ring never arrived"
        assert not theirs.wait(0.3)


@pytest.mark.django_db(transaction=True)
def test_a_stream_on_the_embedded_default_wakes_on_the_commit_and_reads_nothing_between(local_bell, monkeypatch):
    """No poll: 200 open streams read the database only when their run has news (issue 32 moved the embedded
    default from a read every 0.25 s per stream to the rings of its local sockets)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from agents.api import events
    from agents.runs import drive

    monkeypatch.setattr(events, "KEEPALIVE_S", 0.3)
    run = _running_run()
    stream = events.run_events(run.pk, -1, max_s=30)
    assert next(stream).startswith("event: run")
    try:
        with CaptureQueriesContext(connection) as reads:
            beats = [next(stream) for _ in range(3)]
        assert beats == [": keep-alive\n\n"] * 3 and reads.captured_queries == []
        drive.cancel_run(run_id=run.pk)
        started = time.monotonic()
        assert next(stream).startswith("event: run") and next(stream).startswith("event: done")
        assert time.monotonic() - started < 2
    finally:
        stream.close()


@pytest.mark.django_db(transaction=True)
def test_a_local_listener_whose_socket_is_lost_listens_again_and_wakes_its_watchers(local_bell):
    run = _running_run()
    with doorbell.watching(run.pk) as mine:
        listener = doorbell._LISTENERS["local"]
        assert listener.ready.wait(5)
        old = listener.socket
        mine.clear()
        old.close()  # as if its file were removed: recv fails, the listener binds a new socket
        assert mine.wait(5), "after listening again, every watcher is woken (it may have missed a ring)"
        assert listener.socket is not old
        mine.clear()
        doorbell.ring(run.pk)
        assert mine.wait(2)
