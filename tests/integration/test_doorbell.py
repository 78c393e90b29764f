"""Event streams that scale (issue 11): a commit rings the run's doorbell and a waiting stream wakes at once —
Redis pub/sub, or PostgreSQL LISTEN/NOTIFY — instead of every stream polling the database."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from agents.api.events import run_events
from agents.models import Run
from agents.runs import doorbell, drive, livebus, review, submit
from tests.conftest import stored_run_fields
from tests.integration._support import quick_user

pytestmark = pytest.mark.django_db(transaction=True)


def available(kind: str) -> bool:
    from django.conf import settings

    return bool(settings.REDIS_URL) if kind == "redis" else connection.vendor == "postgresql"


@pytest.fixture(params=["redis", "postgres"])
def bell_kind(request, settings):
    if not available(request.param):
        pytest.skip(f"this run has no {request.param}")
    settings.AGENT_DOORBELL = request.param
    doorbell.stop_listeners()  # each test starts with a new listener (an earlier test's may still be listening)
    yield request.param
    doorbell.stop_listeners()  # no LISTEN connection outlives the test (the test database is dropped at the end)


def running_run() -> Run:
    return Run.objects.create(owner=quick_user(f"d{time.monotonic_ns()}"), **stored_run_fields(status="running"))


def stream_in_background(run_id, after: int, max_s: float) -> tuple[threading.Thread, list[tuple[float, str]]]:
    """A stream of the run read by a thread, each frame with the time it arrived; returns once the stream has sent
    what it had and waits on the bell (a poll would take a minute)."""
    arrivals: list[tuple[float, str]] = []

    def consume() -> None:
        try:
            for frame in run_events(run_id, after, poll_s=60, max_s=max_s):
                arrivals.append((time.monotonic(), frame))
        finally:
            connection.close()

    reader = threading.Thread(target=consume)
    reader.start()
    time.sleep(1.0)
    return reader, arrivals


def test_a_ring_sets_every_watcher_of_that_run_and_no_other(bell_kind):
    run, other = running_run(), running_run()
    with doorbell.watching(run.pk) as mine, doorbell.watching(other.pk) as theirs:
        # the process's one listener subscribes on first use, then wakes every watcher once (what it may have missed)
        assert mine.wait(5) and theirs.wait(5)
        mine.clear(), theirs.clear()
        doorbell.ring(run.pk)
        assert mine.wait(5), "the ring never arrived"
        assert not theirs.wait(0.3)


def test_a_waiting_stream_wakes_on_the_commit_not_on_a_poll(bell_kind):
    run = running_run()
    reader, arrivals = stream_in_background(run.pk, -1, max_s=30)
    started = time.monotonic()
    drive.cancel_run(run_id=run.pk)
    reader.join(10)

    assert not reader.is_alive()
    assert time.monotonic() - started < 3  # woken by the ring (a safety re-read comes only after a minute)
    assert arrivals[-1][1].startswith("event: done")


def test_a_units_commit_rings_the_bell(bell_kind):
    """The ring of a unit's commit (on PostgreSQL a NOTIFY inside the commit's own statement) wakes a stream."""
    options = submit.RunOptions(input="What is 12*7, plus 1?", mode="step", provider="demo", tools=["calculator"])
    run = submit.submit_run(owner=quick_user(f"u{time.monotonic_ns()}"), options=options)  # one unit: a reply
    reader, arrivals = stream_in_background(run.pk, run.steps.count() - 1, max_s=6)
    started = time.monotonic()
    review.advance_run(run_id=run.pk, actor=run.owner)  # the tool unit commits
    reader.join(10)

    steps = [at for at, frame in arrivals if "\nevent: step\n" in frame]
    assert steps, "the committed step never reached the stream"
    assert steps[0] - started < 3  # woken by the commit's ring, not by a poll or the safety re-read


def test_sqlite_alone_rings_over_local_sockets_and_polls_only_when_asked(settings):
    """The embedded default (SQLite, no Redis) is one machine: its rings are datagrams to each process's socket
    (issue 32: the live events travel there too). AGENT_DOORBELL=poll still polls."""
    settings.AGENT_DOORBELL = "auto"
    settings.REDIS_URL = ""
    if connection.vendor != "sqlite":
        pytest.skip("the embedded default only")
    assert doorbell.kind() == "local"
    settings.AGENT_DOORBELL = "poll"
    assert doorbell.kind() == "poll"
    with doorbell.watching(running_run().pk) as bell:
        assert bell is None


def test_a_waiting_stream_reads_nothing_between_rings(bell_kind, monkeypatch):
    """While its run has no news a stream only sends keep-alives: no read of the run or its steps (200 open streams
    re-reading every 5 s were ~80 statements a second beside the runs). The ring then wakes it at once."""
    from django.test.utils import CaptureQueriesContext

    from agents.api import events

    monkeypatch.setattr(events, "KEEPALIVE_S", 0.3)
    run = running_run()
    with doorbell.watching(running_run().pk) as listening:
        assert listening.wait(5)  # the listener is subscribed (it wakes its watchers once when it is)
    stream = run_events(run.pk, -1, max_s=30)
    assert next(stream).startswith("event: run")  # what there is: the run (no steps yet)
    try:
        with CaptureQueriesContext(connection) as reads:
            beats = [next(stream) for _ in range(4)]
        assert beats == [": keep-alive\n\n"] * 4
        assert reads.captured_queries == []
        drive.cancel_run(run_id=run.pk)
        started = time.monotonic()
        assert next(stream).startswith("event: run") and next(stream).startswith("event: done")
        assert time.monotonic() - started < 3  # the ring, not the safety re-read (a minute)
    finally:
        stream.close()


def _drop_listener_connection(kind: str) -> None:
    """Cut this process's listener off the server, as a restart of Redis or PostgreSQL would."""
    if kind == "redis":
        from django.conf import settings

        assert livebus.redis_client(settings.REDIS_URL).client_kill_filter(_type="pubsub") >= 1
    else:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE %s AND pid <> pg_backend_pid()",
                [f"LISTEN {doorbell.CHANNEL}%"],
            )
            assert cursor.fetchone()[0] >= 1


def test_a_listener_that_reconnects_wakes_every_waiting_stream(bell_kind):
    """A ring sent while the listener was away is lost, so once it listens again every stream re-reads: a stream never
    waits for a safety re-read to see news committed during the gap."""
    first, second = running_run(), running_run()
    with doorbell.watching(first.pk) as one, doorbell.watching(second.pk) as two:
        assert one.wait(5) and two.wait(5), "the listener's first subscription wakes the streams already waiting"
        time.sleep(0.3)
        one.clear(), two.clear()
        _drop_listener_connection(bell_kind)
        assert one.wait(8) and two.wait(8), "after the reconnect every waiting stream is woken"
