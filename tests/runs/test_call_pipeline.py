"""The host's model-call pipeline (agents/runs/calls.py): each named stage on its own, then their order in
`for_run`, which is the contract: nothing is held across the call and the reply is priced before anyone sees it."""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
from django.db import connection

from agents.engine.types import ModelError, ModelReply, ModelRequest, Usage, Verdict
from agents.models import Run
from agents.runs import calls, doorbell, leases, store, telemetry
from agents.usage import prices
from tests.conftest import make_user, stored_run_fields

REPLY = ModelReply(text="85", usage=Usage(10, 2))


def request(streamed: bool = False) -> ModelRequest:
    on_text = (lambda text: None) if streamed else None
    on_retry = (lambda: None) if streamed else None
    return ModelRequest(messages=[], tools=[], protocol="native", timeout_s=5.0, on_text=on_text, on_retry=on_retry)


class Answering:
    """A model (and a `call_next`) that notes each request it gets and answers `reply`, or raises `error`."""

    def __init__(self, reply: ModelReply = REPLY, error: Exception | None = None, log: list | None = None) -> None:
        self.reply, self.error, self.requests, self.log = reply, error, [], log

    def complete(self, request: ModelRequest) -> ModelReply:
        self.requests.append(request)
        if self.log is not None:
            self.log.append("model")
        if self.error is not None:
            raise self.error
        return self.reply

    __call__ = complete


class Sink:
    """A live sink: whether it streams, and each flush."""

    def __init__(self, streams: bool = True, log: list | None = None) -> None:
        self.following, self.flushes, self.log = streams, 0, log

    def streams(self) -> bool:
        return self.following

    def flush(self) -> None:
        self.flushes += 1
        if self.log is not None:
            self.log.append("flush")


class Admission:
    """A quota gate noting what it was asked, in order."""

    def __init__(self, log: list) -> None:
        self.log = log

    def leave(self) -> None:
        self.log.append("leave")

    def enter(self, timeout_s, idle=None, request=None) -> None:
        self.log.append(("enter", timeout_s, idle, request))


# The pipeline itself


def test_the_stages_run_in_order_around_the_model():
    seen: list[str] = []

    def stage(name: str) -> calls.Stage:
        def noted(request, call_next):
            seen.append(f"{name} in")
            reply = call_next(request)
            seen.append(f"{name} out")
            return reply

        return noted

    model = Answering(log=seen)
    reply = calls.Pipeline(model, [stage("outer"), stage("inner")]).complete(request())

    assert reply is REPLY
    assert seen == ["outer in", "inner in", "model", "inner out", "outer out"]


def test_a_pipeline_without_stages_is_its_model():
    assert calls.Pipeline(Answering(), []).complete(request()) is REPLY


# stop_if_leaving


def test_a_process_going_away_starts_no_call(monkeypatch):
    monkeypatch.setattr(leases, "stopping", lambda: True)
    model = Answering()

    with pytest.raises(leases.Stopping):
        calls.stop_if_leaving(request(), model)

    assert model.requests == []


def test_a_process_staying_calls_the_model(monkeypatch):
    monkeypatch.setattr(leases, "stopping", lambda: False)
    assert calls.stop_if_leaving(request(), Answering()) is REPLY


# admit_quota


def test_the_quota_gives_back_an_earlier_reservation_then_admits_the_call():
    log: list = []
    asked = request()

    reply = calls.admit_quota(Admission(log))(asked, Answering(log=log))

    assert reply is REPLY
    assert log == ["leave", ("enter", 5.0, store.release_connection, asked), "model"]


def test_a_quota_that_stops_the_run_stops_the_call():
    class Refusing(Admission):
        def enter(self, timeout_s, idle=None, request=None) -> None:
            raise ModelError("quota used up")

    model = Answering()
    with pytest.raises(ModelError):
        calls.admit_quota(Refusing([]))(request(), model)
    assert model.requests == []


def test_an_owner_without_a_quota_passes():
    assert calls.admit_quota(None) is calls.passing


# release_connection


def _noting_the_connection(monkeypatch, log: list) -> None:
    monkeypatch.setattr(store, "release_connection", lambda: log.append("release"))
    monkeypatch.setattr(store, "reacquire_connection", lambda: log.append("reacquire"))


def test_the_connection_goes_back_for_the_call_and_is_taken_again_after(monkeypatch):
    log: list = []
    _noting_the_connection(monkeypatch, log)

    calls.release_connection(request(), Answering(log=log))

    assert log == ["release", "model", "reacquire"]


def test_a_failed_call_takes_the_connection_again_too(monkeypatch):
    log: list = []
    _noting_the_connection(monkeypatch, log)

    with pytest.raises(ModelError):
        calls.release_connection(request(), Answering(error=ModelError("down"), log=log))

    assert log == ["release", "model", "reacquire"]


@pytest.mark.django_db(transaction=True)
def test_no_database_connection_is_open_during_the_call(settings):
    settings.AGENT_RELEASE_DB_DURING_MODEL_CALLS = True
    make_user("una")  # the connection is open before the call
    open_during: list[bool] = []

    def model(asked):
        open_during.append(connection.connection is not None)
        return REPLY

    calls.release_connection(request(), model)

    assert open_during == [False]


# flush_live


def test_the_live_sink_is_flushed_after_the_call():
    log: list = []
    sink = Sink(log=log)
    calls.flush_live(sink)(request(), Answering(log=log))
    assert log == ["model", "flush"]


def test_the_live_sink_is_flushed_after_a_failed_call_too():
    sink = Sink()
    with pytest.raises(ModelError):
        calls.flush_live(sink)(request(), Answering(error=ModelError("down")))
    assert sink.flushes == 1


def test_a_run_without_a_live_sink_passes():
    assert calls.flush_live(None) is calls.passing


# stream_only_if_followed


@pytest.mark.parametrize(
    ("sink", "quiet"),
    [(None, False), (Sink(streams=False), False), (Sink(streams=True), True)],
    ids=["no sink", "no one follows", "the guard holds the words"],
)
def test_a_call_no_one_can_follow_is_a_plain_call(sink, quiet):
    model = Answering()
    calls.stream_only_if_followed(sink, quiet)(request(streamed=True), model)
    (sent,) = model.requests
    assert (sent.on_text, sent.on_retry) == (None, None)


def test_a_followed_call_streams():
    model, asked = Answering(), request(streamed=True)
    calls.stream_only_if_followed(Sink(streams=True))(asked, model)
    assert model.requests == [asked]


def test_a_plain_request_stays_as_it_is():
    model, asked = Answering(), request()
    calls.stream_only_if_followed(None)(asked, model)
    assert model.requests[0] is asked


# send_telemetry


class Observer:
    def __init__(self) -> None:
        self.seen: list = []

    @contextmanager
    def model_call(self, run, request, record):
        self.seen.append(("start", run, request))
        yield
        self.seen.append(("end", record.reply))


@pytest.fixture
def observer():
    watching = Observer()
    telemetry.add_observer(watching)
    yield watching
    telemetry.remove_observer(watching)


def test_observers_see_the_request_and_the_reply(observer):
    run, asked = SimpleNamespace(pk="r1"), request()

    reply = calls.send_telemetry(run)(asked, Answering())

    assert reply is REPLY
    assert observer.seen == [("start", run, asked), ("end", REPLY)]


def test_observers_see_a_failed_call_end_without_a_reply():
    class Failing(Observer):
        @contextmanager
        def model_call(self, run, request, record):
            try:
                yield
            except ModelError as exc:
                self.seen.append(("failed", str(exc)))
                raise

    watching = Failing()
    telemetry.add_observer(watching)
    try:
        with pytest.raises(ModelError):
            calls.send_telemetry(None)(request(), Answering(error=ModelError("down")))
    finally:
        telemetry.remove_observer(watching)
    assert watching.seen == [("failed", "down")]


# price


@pytest.fixture
def asked_prices(monkeypatch):
    """Each (provider, model) asked for a price; the cost set is 7 nanos."""
    asked: list[tuple[str, str]] = []

    def priced(reply, provider, model):
        asked.append((provider, model))
        return ModelReply(text=reply.text, usage=reply.usage, model=reply.model, cost_nanos=7)

    monkeypatch.setattr(prices, "priced", priced)
    return asked


def test_a_reply_is_priced_at_the_runs_model(asked_prices):
    reply = calls.price("openai", "gpt-4o-mini")(request(), Answering())
    assert (reply.cost_nanos, asked_prices) == (7, [("openai", "gpt-4o-mini")])


def test_a_fallbacks_reply_is_priced_at_the_model_that_answered(asked_prices):
    answered = ModelReply(text="85", model="anthropic/claude-haiku-4-5")
    reply = calls.price("openai", "gpt-4o-mini")(request(), Answering(answered))
    assert (reply.cost_nanos, asked_prices) == (7, [("anthropic", "claude-haiku-4-5")])


def test_a_price_from_the_settings_sets_the_cost(settings):
    settings.AGENT_PRICES = {"fake/fake-1": {"input": "1000", "output": "1000"}}  # per million tokens
    reply = calls.price("fake", "fake-1")(request(), Answering())
    assert reply.cost_nanos == 12 * 1000 * 1000  # 12 tokens at a thousandth each


# watch_cancel


@pytest.fixture
def bell(monkeypatch):
    """The run's doorbell: the ids watched, and the event a ring sets."""
    event, watched = threading.Event(), []

    @contextmanager
    def watching(run_id):
        watched.append(run_id)
        yield event

    monkeypatch.setattr(doorbell, "watching", watching)
    return SimpleNamespace(event=event, watched=watched)


def test_a_streamed_call_asks_between_chunks_whether_the_run_was_cancelled(bell):
    model, run_id = Answering(), uuid.uuid4()

    calls.watch_cancel(run_id)(request(streamed=True), model)

    (sent,) = model.requests
    assert isinstance(sent.interrupted, calls.Cancelled)
    assert (sent.interrupted.run_id, sent.interrupted.bell, bell.watched) == (run_id, bell.event, [run_id])


def test_a_plain_call_watches_no_bell(bell):
    model, asked = Answering(), request()
    calls.watch_cancel(uuid.uuid4())(asked, model)
    assert model.requests == [asked] and bell.watched == []


def test_a_bell_that_did_not_ring_reads_nothing():
    """(No database access is allowed in this test: a read would fail it.)"""
    assert calls.Cancelled(uuid.uuid4(), threading.Event())() is False


@pytest.mark.django_db
def test_a_rung_bell_reads_whether_the_run_is_done():
    run = Run.objects.create(owner=make_user("cat"), **stored_run_fields(status="running", output=None))
    rung = threading.Event()
    rung.set()
    cancelled = calls.Cancelled(run.pk, rung)

    assert cancelled() is False and not rung.is_set()  # the ring was read: running still
    Run.objects.filter(pk=run.pk).update(status="done", stop_reason="cancelled")
    rung.set()
    assert cancelled() is True


@pytest.mark.django_db
def test_without_a_bell_the_run_is_read_at_most_every_poll():
    run = Run.objects.create(owner=make_user("dee"), **stored_run_fields(status="done", output=None))
    now = [100.0]
    cancelled = calls.Cancelled(run.pk, None, clock=lambda: now[0])

    assert cancelled() is False  # too soon after the call started
    now[0] += calls.Cancelled.POLL_S
    assert cancelled() is True


# The guard that calls out


class Guard:
    def __init__(self, calls_out: bool, log: list | None = None) -> None:
        self.calls_out, self.log = calls_out, log

    def check(self, stage, text=None, tool=None, arguments=None):
        self.log.append(("check", stage, text, tool, arguments))
        return Verdict("hook", "no", "stop")


def test_a_guard_that_stays_in_the_process_is_used_as_it_is(monkeypatch):
    guard = Guard(calls_out=False)
    monkeypatch.setattr(calls, "guard_for", lambda run: guard)
    assert calls.unheld_guard(SimpleNamespace()) is guard


def test_a_guard_that_calls_out_holds_no_connection_while_it_checks(monkeypatch):
    log: list = []
    _noting_the_connection(monkeypatch, log)
    monkeypatch.setattr(calls, "guard_for", lambda run: Guard(calls_out=True, log=log))

    guard = calls.unheld_guard(SimpleNamespace())
    verdict = guard.check("tool_call", tool="shell", arguments={"cmd": "ls"})

    assert verdict == Verdict("hook", "no", "stop")
    assert log == ["release", ("check", "tool_call", None, "shell", {"cmd": "ls"}), "reacquire"]


# The order, in one place


def test_a_held_runs_call_goes_through_every_stage_in_order(monkeypatch, bell, asked_prices, observer):
    log: list = []
    monkeypatch.setattr(leases, "stopping", lambda: log.append("stopping?") or False)
    _noting_the_connection(monkeypatch, log)
    run = SimpleNamespace(pk=uuid.uuid4(), owner_id=1, provider="openai", model="gpt-4o-mini")
    held = SimpleNamespace(run=run, admission=Admission(log), live=Sink(log=log))
    model = Answering(log=log)

    reply = calls.for_run(held, model).complete(request(streamed=True))

    assert log[:3] == ["stopping?", "leave", ("enter", 5.0, store.release_connection, log[2][3])]
    assert log[3:] == ["release", "model", "flush", "reacquire"]
    assert bell.watched == [run.pk] and isinstance(model.requests[0].interrupted, calls.Cancelled)
    assert (reply.cost_nanos, asked_prices) == (7, [("openai", "gpt-4o-mini")])
    assert observer.seen[-1] == ("end", reply)  # the observers see the reply as priced
    assert observer.seen[0][2].interrupted is None  # ... and the request before the cancel watch


def test_a_quiet_run_calls_its_model_plainly(monkeypatch, bell):
    monkeypatch.setattr(leases, "stopping", lambda: False)
    run = SimpleNamespace(pk=uuid.uuid4(), owner_id=1, provider="fake", model="fake-1")
    held = SimpleNamespace(run=run, admission=None, live=Sink(streams=True))
    model = Answering()

    calls.for_run(held, model, quiet=True).complete(request(streamed=True))

    assert model.requests[0].on_text is None and bell.watched == []


def test_the_stages_of_a_held_run_are_named_in_order():
    run = SimpleNamespace(pk=uuid.uuid4(), owner_id=1, provider="fake", model="fake-1")
    held = SimpleNamespace(run=run, admission=Admission([]), live=Sink())
    names = [stage.__qualname__.split(".")[0] for stage in calls.for_run(held, Answering()).stages]
    assert names == [
        "stop_if_leaving",
        "admit_quota",
        "load_documents",
        "release_connection",
        "flush_live",
        "stream_only_if_followed",
        "send_telemetry",
        "price",
        "watch_cancel",
    ]
