"""The host's model-call pipeline: the model a held run's engine calls, behind named wrappers in one ordered list.

Each wrapper is a stage `stage(request, call_next) -> reply`: it does its part and hands the request on (or stops
it). `for_run` lists them, outermost first; the order is the contract:

1. `stop_if_leaving`: this process is going away, so the run is handed on rather than a call started.
2. `admit_quota`: the owner's daily quota lets the call in (waiting for room, holding nothing) or stops the run.
3. `load_documents`: the documents the transcript references are read (one query) and put in the request.
4. `release_connection`: the database connection goes back for the call and is taken again after it.
5. `flush_live`: the call's last streamed text goes out once it is over.
6. `stream_only_if_followed`: a call streams only when someone follows the run (and the guard lets its words out).
7. `send_telemetry`: the observers (traces, metrics) see the call and its priced reply.
8. `price`: the reply's cost, at the price of the model that answered. This is where a call's cost is computed.
9. `watch_cancel`: a streamed call asks between chunks whether the run was cancelled (`Cancelled`).

Inside the last stage is the run's model (`runtime.build_model`): its provider, falling back to each of the run's
fallback models in turn (agents/providers/fallback.py). It sits inside `price` because a fallback's reply names the
model that answered, and that model's price applies. No lock, transaction or database connection is held across
the call: everything from `release_connection` inward runs with the connection handed back.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from agents.engine.types import Model, ModelReply, ModelRequest, Verdict
from agents.guardrails import guard_for
from agents.guardrails.rails import RunGuard
from agents.models import Run, RunStatus
from agents.runs import documents, doorbell, leases, store, telemetry
from agents.runs.live import Publisher
from agents.usage import prices, quotas

Call = Callable[[ModelRequest], ModelReply]
Stage = Callable[[ModelRequest, Call], ModelReply]


class Pipeline:
    """A Model: each request goes through the stages in order (the first is the outermost), then to `model`."""

    def __init__(self, model: Model, stages: Sequence[Stage]) -> None:
        self.model, self.stages = model, tuple(stages)
        call: Call = model.complete
        for stage in reversed(self.stages):
            call = _chained(stage, call)
        self._call = call

    def complete(self, request: ModelRequest) -> ModelReply:
        return self._call(request)


def _chained(stage: Stage, call_next: Call) -> Call:
    def call(request: ModelRequest) -> ModelReply:
        return stage(request, call_next)

    return call


def for_run(held: store.Held, model: Model, quiet: bool = False) -> Pipeline:
    """The model a held run's engine calls: `model` behind the host's stages, in their order. `quiet`: the reply's
    words go out only once the run's guard redacted and accepted them, so no call streams."""
    run = held.run
    return Pipeline(
        model,
        [
            stop_if_leaving,
            admit_quota(held.admission),
            load_documents(run.owner_id),
            release_connection,
            flush_live(held.live),
            stream_only_if_followed(held.live, quiet),
            send_telemetry(run),
            price(run.provider, run.model),
            watch_cancel(run.pk),
        ],
    )


def unheld(model: Model) -> Pipeline:
    """`model` whose calls hold no database connection (and start none in a process that is going away)."""
    return Pipeline(model, [stop_if_leaving, release_connection])


def stop_if_leaving(request: ModelRequest, call_next: Call) -> ModelReply:
    """This process is stopping gracefully: hand the run on (leases.Stopping) rather than start a call."""
    if leases.stopping():
        raise leases.Stopping
    return call_next(request)


def passing(request: ModelRequest, call_next: Call) -> ModelReply:
    """A stage with nothing to do (a run without a quota, or without a live sink)."""
    return call_next(request)


def admit_quota(admission: quotas.Admission | None) -> Stage:
    """The owner's daily quota (None: the owner has none): wait for room, holding nothing, or stop (HostStop)."""
    if admission is None:
        return passing

    def admitted(request: ModelRequest, call_next: Call) -> ModelReply:
        admission.leave()  # a reservation of an earlier call whose unit did not commit (a reflection)
        admission.enter(request.timeout_s, idle=store.release_connection, request=request)
        return call_next(request)

    return admitted


def load_documents(owner_id: Any) -> Stage:
    """The transcript's document references (a run's documents, a thread's earlier images: agents/runs/documents.py)
    replaced by their bytes, read before the connection goes back: the call holds none. Read for each call, not kept
    between calls (a run's documents may be megabytes)."""

    def with_documents(request: ModelRequest, call_next: Call) -> ModelReply:
        messages = documents.loaded(owner_id, request.messages)
        if messages is not request.messages:
            request = dataclasses.replace(request, messages=messages)
        return call_next(request)

    return with_documents


@contextmanager
def connection_released() -> Iterator[None]:
    """The database connection handed back for the block (kept inside an atomic block), and taken again after it."""
    store.release_connection()
    try:
        yield
    finally:
        store.reacquire_connection()


def release_connection(request: ModelRequest, call_next: Call) -> ModelReply:
    """A run waits on its model for seconds: a connection held meanwhile is one of the server's doing nothing."""
    store.release_connection()
    try:
        return call_next(request)
    finally:
        store.reacquire_connection()


def flush_live(sink: Publisher | None) -> Stage:
    """After the call, ended or failed, its last text and `assistant.end` go to the run's live sink."""
    if sink is None:
        return passing

    def flushed(request: ModelRequest, call_next: Call) -> ModelReply:
        try:
            return call_next(request)
        finally:
            sink.flush()

    return flushed


def stream_only_if_followed(sink: Publisher | None, quiet: bool = False) -> Stage:
    """A streamed request becomes a plain call when no one follows the run, or when its words must wait (`quiet`)."""

    def streamed(request: ModelRequest, call_next: Call) -> ModelReply:
        if request.on_text is not None and (quiet or sink is None or not sink.streams()):
            request = dataclasses.replace(request, on_text=None, on_retry=None)
        return call_next(request)

    return streamed


def send_telemetry(run: Run | None) -> Stage:
    """The observers of model calls (agents/runs/telemetry.py) see the request, then the reply as priced."""

    def observed(request: ModelRequest, call_next: Call) -> ModelReply:
        with telemetry.model_call(run, request) as record:
            reply = call_next(request)
            record.reply = reply
            return reply

    return observed


def price(provider: str, model: str) -> Stage:
    """The reply with its cost (`cost_nanos`), at the price of the model that answered: the run's own, or the
    fallback the reply names ("provider/model")."""

    def priced(request: ModelRequest, call_next: Call) -> ModelReply:
        reply = call_next(request)
        answered_provider, answered_model = provider, model
        if reply.model is not None:
            answered_provider, _, answered_model = reply.model.partition("/")
        return prices.priced(reply, answered_provider, answered_model)

    return priced


def watch_cancel(run_id: Any) -> Stage:
    """A streamed call asks between its chunks whether the run was cancelled (a plain call is checked between calls
    by the engine): with a doorbell, only after the run's bell rang."""

    def watched(request: ModelRequest, call_next: Call) -> ModelReply:
        if request.on_text is None:
            return call_next(request)
        with doorbell.watching(run_id) as bell:
            return call_next(dataclasses.replace(request, interrupted=Cancelled(run_id, bell)))

    return watched


class Cancelled:
    """Asked between the chunks of a streamed call: was the run cancelled? With a doorbell it reads the database only
    after the run's bell rang (a cancel rings it); without one, at most every POLL_S. The connection goes back at
    once: the call holds none."""

    POLL_S = 0.5

    def __init__(self, run_id: Any, bell: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self.run_id, self.bell, self.clock, self.checked = run_id, bell, clock, clock()

    def __call__(self) -> bool:
        if self.bell is not None:
            if not self.bell.is_set():
                return False
            self.bell.clear()
        elif self.clock() - self.checked < self.POLL_S:
            return False
        self.checked = self.clock()
        try:
            return bool(Run.objects.filter(pk=self.run_id, status=RunStatus.DONE).exists())
        finally:
            store.release_connection()


def unheld_guard(run: Run) -> RunGuard | UnheldGuard | None:
    """The run's guardrails (None without any); a guard that calls out holds no database connection while it does."""
    guard = guard_for(run)
    if guard is None or not guard.calls_out:
        return guard
    return UnheldGuard(guard)


class UnheldGuard:
    """A Guard that calls out (a moderation endpoint, a team's hook) whose checks hold no database connection, like
    a model call: ours goes back before each check and is taken again after."""

    def __init__(self, guard: RunGuard) -> None:
        self.guard = guard

    def redact(self, stage: str, text: str) -> str:
        return self.guard.redact(stage, text)

    def watches(self, stage: str) -> bool:
        return self.guard.watches(stage)

    def check(
        self, stage: str, text: str | None = None, tool: str | None = None, arguments: dict[str, Any] | None = None
    ) -> Verdict | None:
        with connection_released():
            return self.guard.check(stage, text, tool=tool, arguments=arguments)
