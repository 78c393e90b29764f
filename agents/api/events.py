"""Server-sent events for one run: its steps (replayed, then live), status changes, and a last `done` event.

The stream reads committed rows only, so it works across processes and machines: whichever worker advances the run,
every stream sees the same steps in the same order. A client that reconnects sends `Last-Event-ID` (the last step
index it saw) and gets only what came after.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from rest_framework.renderers import BaseRenderer

from agents.models import Run, RunStatus, Step
from agents.runs import doorbell, representation
from agents.runs.store import reacquire_connection, release_connection

POLL_S = 0.25
KEEPALIVE_S = 15.0
# With a doorbell a stream reads only when rung (its listener rings every stream when it (re)connects, for what it
# may have missed); this re-read is the safety net for a ring that failed to be sent at all.
RECHECK_S = 60.0
MAX_STREAM_S = 600.0  # a paused run can wait for hours: the client reconnects with Last-Event-ID


class EventStreamRenderer(BaseRenderer):
    """Lets DRF's content negotiation accept `Accept: text/event-stream` (the body is streamed, not rendered)."""

    media_type = "text/event-stream"
    format = "sse"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None) -> bytes:
        return json.dumps(data).encode()


def frame(event: str, data: object, event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, default=str)}\n\n"


def run_events(
    run_id, after: int, *, poll_s: float = POLL_S, max_s: float = MAX_STREAM_S, sleep=time.sleep
) -> Iterator[str]:
    """Step events after index `after`, a `run` event whenever the status changes, then `done`.

    With a doorbell (Redis, or PostgreSQL LISTEN/NOTIFY) the stream sleeps until the run's next commit rings it,
    sending keep-alives meanwhile without reading anything (and re-reading after RECHECK_S all the same); on SQLite
    it polls every `poll_s`. Between reads it holds no database connection (on PostgreSQL it goes back to the pool):
    a stream can stay open for minutes.
    """
    with doorbell.watching(run_id) as bell:
        yield from _stream(run_id, after, bell, poll_s=poll_s, max_s=max_s, sleep=sleep)


def _stream(run_id, after: int, bell, *, poll_s: float, max_s: float, sleep) -> Iterator[str]:
    started = last_beat = time.monotonic()
    status = None
    while True:
        if bell is not None:
            bell.clear()  # before reading: a commit from now on rings again
        # The run first, then its steps: a unit's steps commit together with the run's new status, so every step
        # behind the status we read is in the step query that follows (and goes out before `run` / `done`).
        run = Run.objects.filter(pk=run_id).first()
        if run is None:  # deleted while streaming
            return
        for step in Step.objects.filter(run_id=run_id, index__gt=after).order_by("index"):
            yield frame("step", representation.step_json(step), step.index)
            after = step.index
        if run.status != status:
            status = run.status
            yield frame("run", representation.run_json(run))
        if run.status == RunStatus.DONE:
            yield frame("done", representation.run_json(run))
            return
        now = time.monotonic()
        if now - started >= max_s:
            return
        if now - last_beat > KEEPALIVE_S:
            last_beat = now
            yield ": keep-alive\n\n"
        release_connection()
        if bell is None:
            sleep(poll_s)
        else:
            # Until rung: keep-alives for the proxies, no read. At the latest, a read after RECHECK_S (or at max_s).
            until = min(now + RECHECK_S, started + max_s)
            while not bell.wait(max(0.0, min(until, last_beat + KEEPALIVE_S) - time.monotonic())):
                now = time.monotonic()
                if now >= until:
                    break
                if now - last_beat >= KEEPALIVE_S:
                    last_beat = now
                    yield ": keep-alive\n\n"
        reacquire_connection()
