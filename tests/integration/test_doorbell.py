"""Event streams that scale (issue 11): a commit rings the run's doorbell and a waiting stream wakes at once —
Redis pub/sub, or PostgreSQL LISTEN/NOTIFY — instead of every stream polling the database."""

from __future__ import annotations

import threading
import time

import pytest
from django.db import connection

from agents import doorbell, services
from agents.api.events import run_events
from agents.models import Run
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
        time.sleep(0.3)  # the process's one listener subscribes on first use
        doorbell.ring(run.pk)
        assert mine.wait(5), "the ring never arrived"
        assert not theirs.wait(0.3)


def test_a_waiting_stream_wakes_on_the_commit_not_on_a_poll(bell_kind):
    run = running_run()
    reader, arrivals = stream_in_background(run.pk, -1, max_s=30)
    started = time.monotonic()
    services.cancel_run(run_id=run.pk)
    reader.join(10)

    assert not reader.is_alive()
    assert time.monotonic() - started < 3  # woken by the ring (a safety re-check comes only every 5 s)
    assert arrivals[-1][1].startswith("event: done")


def test_a_units_commit_rings_the_bell(bell_kind):
    """The ring of a unit's commit (on PostgreSQL a NOTIFY inside the commit's own statement) wakes a stream."""
    options = services.RunOptions(input="What is 12*7, plus 1?", mode="step", provider="demo", tools=["calculator"])
    run = services.submit_run(owner=quick_user(f"u{time.monotonic_ns()}"), options=options)  # one unit: a reply
    reader, arrivals = stream_in_background(run.pk, run.steps.count() - 1, max_s=6)
    started = time.monotonic()
    services.advance_run(run_id=run.pk, actor=run.owner)  # the tool unit commits
    reader.join(10)

    steps = [at for at, frame in arrivals if "\nevent: step\n" in frame]
    assert steps, "the committed step never reached the stream"
    assert steps[0] - started < 3  # woken by the commit's ring, not by a poll or the 5 s safety re-check


def test_sqlite_polls(settings):
    settings.AGENT_DOORBELL = "auto"
    settings.REDIS_URL = ""
    if connection.vendor != "sqlite":
        pytest.skip("the embedded default only")
    assert doorbell.kind() == "poll"
    with doorbell.watching(running_run().pk) as bell:
        assert bell is None
