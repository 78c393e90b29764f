"""Server-sent events for one run: its steps (replayed, then live), status changes, and a last `done` event.

The stream reads committed rows only, so it works across processes and machines: whichever worker advances the run,
every stream sees the same steps in the same order. A client that reconnects sends `Last-Event-ID` (the last step
index it saw) and gets only what came after.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Generator, Iterator

from django.conf import settings
from django.db.models import F
from rest_framework.renderers import BaseRenderer

from agents.models import Run, RunStatus, Step
from agents.runs import doorbell, representation, telemetry
from agents.runs.store import reacquire_connection, release_connection
from reactsite.serving import green

POLL_S = 0.25
KEEPALIVE_S = 15.0
# With a doorbell a stream reads only when rung (its listener rings every stream when it (re)connects, for what it
# may have missed); this re-read is the safety net for a ring that failed to be sent at all.
RECHECK_S = 60.0
MAX_STREAM_S = 600.0
HOLD_S = 0.5  # at most this long a tool's step waits for its tool.finished (see _Stream._read)
HOLD_RECHECK_S = 0.02  # a paused run can wait for hours: the client reconnects with Last-Event-ID
# At most this many streams of a process read at once while they open (the view's reads, then the stream's first
# read, each a turn of its own); the others wait their turn before reading, holding no connection. Many streams
# opened at once each cost a worker's CPU that nothing interrupts on SQLite: in turns, a request that comes
# meanwhile (health's) waits for a few of them, not for all.
OPENING_AT_ONCE = 4
OPENING_WAIT_S = 10.0  # a turn not given by then is taken all the same: a slow set-up delays, never refuses, a stream
_opening = threading.BoundedSemaphore(OPENING_AT_ONCE)
IDLE_WAIT_S = 0.5  # at most this long a stream's turn lets the worker's other work go first (see _let_others_first)


class Turn:
    """A turn to read while opening a stream (taken when made); `release` (any number of times) gives it on.

    Once taken, the stream lets every other request that is ready run first (under gevent `sleep(0)` yields to them):
    what nothing interrupts (SQLite's reads, the CPU of a view) would otherwise run stream after stream, each taking
    its turn in the next instant, while a request that came after them waited for all."""

    def __init__(self) -> None:
        self._held = _opening.acquire(timeout=OPENING_WAIT_S)
        _let_others_first()

    def release(self) -> None:
        if self._held:
            self._held = False
            _opening.release()


def _let_others_first() -> None:
    """Under gevent: wait until the worker has nothing else ready, at most IDLE_WAIT_S. gunicorn accepts one
    connection per turn of the loop, so 200 streams opened at once would otherwise be accepted and set up one by one,
    and a request behind them in the backlog (health's) answered only after all of them."""
    green.let_others_first(IDLE_WAIT_S)


class Frames:
    """A stream's frames for StreamingHttpResponse, with the turn of its view's reads: given on when the frames
    start, or when the response is closed (a stream the server never started), whichever comes first."""

    def __init__(self, frames: Iterator[str], turn: Turn) -> None:
        self._frames, self._turn = frames, turn

    def __iter__(self) -> Iterator[str]:
        return self._frames

    def close(self) -> None:
        self._turn.release()
        close = getattr(self._frames, "close", None)
        if close is not None:
            close()


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
    run_id,
    after: int,
    *,
    poll_s: float = POLL_S,
    max_s: float = MAX_STREAM_S,
    sleep=None,
    deltas: bool = True,
    turn: Turn | None = None,
) -> Iterator[str]:
    """Step events after index `after`, a `run` event whenever the status changes, then `done`; between them the
    live events of the work in progress (`assistant.delta`, `assistant.retry` unless `deltas` is off; `tool.started`,
    `tool.finished`), which carry no id and are never replayed.

    With a doorbell (Redis, or PostgreSQL LISTEN/NOTIFY) the stream sleeps until the run's next commit rings it or a
    live event comes, sending keep-alives meanwhile without reading anything (and re-reading after RECHECK_S all the
    same); on the embedded default it reads every `poll_s` and forwards live events as they come. Between reads it
    holds no database connection (on PostgreSQL it goes back to the pool): a stream can stay open for minutes,
    nor while it starts (`_let_go`). `sleep`: a test's stand-in for the wait between two polls. `turn`: the Turn of
    the view's reads (given on here; the first read then waits for a turn of its own).
    """
    _let_go(turn)
    with telemetry.stream(run_id), doorbell.following(run_id) as watch:
        reacquire_connection()
        stream = _Stream(run_id, after, watch, deltas, in_turn=turn is not None)
        yield from stream.frames(poll_s=poll_s, max_s=max_s, sleep=sleep)


def _let_go(turn: Turn | None) -> None:
    """Before a stream starts: the connection of the view's reads goes back before the stream waits for its
    process's listener and its announcement (up to READY_S each), and comes again for the first read only; the
    view's turn is given on. Many streams opened at once, each holding a pooled connection through that wait, would
    run the pool dry, and health's check of the database, queued behind them, would answer 503 (docs/operations.md,
    event streams and connections)."""
    release_connection()
    if turn is not None:
        turn.release()


LIVE_TEXT = ("assistant.delta", "assistant.retry")


class _Stream:
    """One client's stream: what it has been sent, so a live event that a committed step already covers (it came
    late, from another process) is left out."""

    def __init__(self, run_id, after: int, watch: doorbell.Watch, deltas: bool, in_turn: bool = False) -> None:
        self.run_id, self.after, self.watch, self.deltas, self.in_turn = run_id, after, watch, deltas, in_turn
        self.status: str | None = None
        self.turns = 0  # the run's committed model turns: text of those is history
        self.tools_done: set[str] = set()  # call ids whose tool step went out
        self.calls: set[str] = set()  # call ids a model step that went out asked for
        self.running: set[str] = set()  # call ids whose tool.started went out, and not yet tool.finished
        self.holding: dict[str, float] = {}  # since when a tool step waits for its tool.finished
        self.read_for_turn = 0  # the latest turn whose first text had the stream read what came before it
        self.writing: int | None = None  # the turn whose text went out and whose assistant.end has not come
        self.finished = False
        self.children: dict = {}  # child run id -> (its last step index sent, its status, its version) as sent

    def frames(self, *, poll_s: float, max_s: float, sleep) -> Iterator[str]:
        started = last_beat = time.monotonic()
        wait_s = poll_s if self.watch.polls else RECHECK_S
        yield from self._opening()
        next_read = time.monotonic() + wait_s
        while not self.finished:
            now = time.monotonic()
            if now - started >= max_s:
                return
            if now - last_beat >= KEEPALIVE_S:
                last_beat = now
                yield ": keep-alive\n\n"
            until = min(next_read, last_beat + KEEPALIVE_S, started + max_s)
            read = self._wait(until, next_read, poll_s, sleep)
            for item in self.watch.take():
                if item is doorbell.RING:
                    read = True
                    continue
                live = _Live(*item)
                if read or self._ahead(live):  # a ring came first, or it is of work past what was read: steps first
                    held = yield from self._read(also=live.call_id)
                    read = False
                    next_read = time.monotonic() + (HOLD_RECHECK_S if held else wait_s)
                yield from self._live(live)
                if self.finished:
                    return
            if read:
                held = yield from self._read()
                next_read = time.monotonic() + (HOLD_RECHECK_S if held else wait_s)

    def _opening(self) -> Iterator[str]:
        """The first read (in a turn of its own when the stream opened in the view's), then the live events that
        came before it: the first read covers the rings among them."""
        early = [item for item in self.watch.take() if item is not doorbell.RING]
        turn = Turn() if self.in_turn else None
        try:
            first = list(self._read())  # read in its turn; sent after it
        finally:
            if turn is not None:
                turn.release()
        yield from first
        for item in early:
            yield from self._live(_Live(*item))

    def _wait(self, until: float, next_read: float, poll_s: float, sleep) -> bool:
        """Wait, holding no connection, for a ring, a live event or `until`: whether it is time to read."""
        release_connection()
        if self.watch.polls and sleep is not None:
            sleep(poll_s)
            reacquire_connection()
            return True  # the poll's wait is over
        self.watch.event.wait(max(0.0, until - time.monotonic()))
        reacquire_connection()
        return time.monotonic() >= next_read

    def _read(self, also: str | None = None) -> Generator[str, None, bool]:
        """Send what was committed since the last read; True when it held a step back.

        A step whose live events went out in part is held back, with what follows it, for up to HOLD_S (`_holds`):
        the rest is sent before that step commits but may reach this process a moment after it, and clients read
        the text, then the reply's step; tool.started, tool.finished, then the tool's step. `also`: a tool call
        whose tool.started is in hand."""
        # The run first, then its steps: a unit's steps commit together with the run's new status, so every step
        # behind the status we read is in the step query that follows (and goes out before `run` / `done`).
        run = Run.objects.filter(pk=self.run_id).first()
        if run is None:  # deleted while streaming
            self.finished = True
            return False
        held = yield from self._steps(run, also)
        if held:
            return True
        if run.subagents:  # a run that can call sub-agents: their child runs' steps and status changes go out too
            yield from self._children()
        if run.status != self.status:
            self.status = run.status
            yield frame("run", representation.run_json(run))
        if run.status == RunStatus.DONE:
            yield frame("done", representation.run_json(run))
            self.finished = True
        return False

    def _steps(self, run: Run, also: str | None) -> Generator[str, None, bool]:
        """The run's steps committed since the last read, up to one held back (then True)."""
        # Each step comes with the run's turns as of the same snapshot: text of a reply that snapshot has committed,
        # arriving late, is left out (the step says it all) — unless a step is held back, whose text still counts.
        steps = Step.objects.filter(run_id=self.run_id, index__gt=self.after).annotate(run_turns=F("run__turns"))
        committed = run.turns
        for step in steps.order_by("index"):
            data = representation.step_json(step)
            if self._holds(step.kind, data, also):
                return True
            committed = max(committed, step.run_turns)
            if step.kind == "tool" and data.get("call_id"):
                self.tools_done.add(data["call_id"])
            for call in data.get("tool_calls") or ():
                self.calls.add(call.get("id"))
            yield frame("step", data, step.index)
            self.after = step.index
        self.turns = max(self.turns, committed)
        return False

    def _children(self) -> Iterator[str]:
        """The committed steps (`child.step`) and status changes (`child.run`) of the run's child runs and theirs,
        each labelled with its run's id (they carry no event id: a stream resumed with Last-Event-ID sends a child's
        steps again). A child whose version is as last sent costs no step query."""
        parents = [self.run_id]
        for _ in range(settings.AGENT_MAX_DEPTH):
            kids = list(Run.objects.filter(parent_id__in=parents).order_by("created_at"))
            for child in kids:
                after, status, version = self.children.get(child.pk, (-1, None, -1))
                if child.version != version:
                    for step in Step.objects.filter(run_id=child.pk, index__gt=after).order_by("index"):
                        yield frame("child.step", {"run": str(child.pk), **representation.step_json(step)})
                        after = step.index
                if child.status != status:
                    yield frame("child.run", representation.run_json(child))
                self.children[child.pk] = (after, child.status, child.version)
            if not kids:
                return
            parents = [k.pk for k in kids]

    def _holds(self, kind: str, data: dict, also: str | None) -> bool:
        """Whether this step waits (at most HOLD_S) for the live events that come before it: a tool's step for its
        tool.finished, a reply's step for the end of its text (assistant.end)."""
        call = data.get("call_id") if kind == "tool" else None
        if call is not None and (call in self.running or call == also):
            waits_for = call
        elif kind in ("model", "error") and self.writing is not None:
            waits_for = f"turn {self.writing}"
        else:
            return False
        return time.monotonic() - self.holding.setdefault(waits_for, time.monotonic()) < HOLD_S

    def _ahead(self, live: _Live) -> bool:
        """Whether a live event is of work that follows commits this stream has not read (without a doorbell to
        ring, the embedded default learns of commits by reading): the first text of a turn, or a tool call its
        reply's step did not announce."""
        if live.event in LIVE_TEXT:  # a new turn's model call starts after the last unit committed: read it once
            if live.turn > self.read_for_turn:
                self.read_for_turn = live.turn
                return True
            return False
        return live.event == "tool.started" and live.call_id not in self.calls

    def _live(self, live: _Live) -> Iterator[str]:
        event = live.event
        if event == "assistant.end":  # not for clients: the reply's text is all out
            self.writing = None
            return
        if event in LIVE_TEXT:
            if not self.deltas or live.turn <= self.turns:  # a committed reply: its step says it all
                return
            self.writing = live.turn
        elif event.startswith("tool."):
            if live.call_id is None or live.call_id in self.tools_done:
                return
            if event == "tool.started":
                self.running.add(live.call_id)
            else:
                self.running.discard(live.call_id)
        else:
            return  # not an event of ours
        yield f"event: {event}\ndata: {live.data}\n\n"


_TURN = re.compile(r'\{"turn":(\d+)[,}]')


class _Live:
    """A live event from the bus, read once: its turn (text events) or call id (tool events)."""

    __slots__ = ("event", "data", "turn", "call_id")

    def __init__(self, event: str, data: str) -> None:
        self.event, self.data, self.turn, self.call_id = event, data, 0, None
        if event in LIVE_TEXT or event == "assistant.end":
            match = _TURN.match(data)  # the bus writes {"turn":N,...} compactly: no need to parse the text
            self.turn = int(match[1]) if match else _field(data, "turn", 0)
        elif event.startswith("tool."):
            self.call_id = _field(data, "call_id", None)


def _field(data: str, name: str, default):
    try:
        value = json.loads(data)
    except ValueError:
        return default
    return value.get(name, default) if isinstance(value, dict) else default
