"""Live events on GET /api/v1/runs/{id}/events (issue 32): the model's words as they are written, tool calls as they
start and end, between the committed steps; `?deltas`; a cancel closes the provider's stream. The model is the stub
speaking the SDKs' streaming formats; the run is driven by another thread, as a worker would (its own connection).
On SQLite the events travel over local sockets, on PostgreSQL over NOTIFY, with REDIS_URL over Redis."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.db import connection

from agents.models import Run
from agents.runs import drive, submit
from tests.api.conftest import RUNS
from tests.api.test_events import parse
from tests.conftest import client_for, make_user
from tests.providers.stub_llm import (
    ANTHROPIC_PATH,
    OPENAI_PATH,
    anthropic_stream,
    anthropic_text,
    anthropic_usage,
    openai_stream,
    openai_text,
    openai_tool_calls,
    point_sdks_at,
)

pytestmark = pytest.mark.django_db(transaction=True)
ANSWER = "The answer is 85, which is 12*7 plus 1."


def paced(chunks: list[bytes], pause: float) -> list:
    """Stream pieces with a pause before each (the stub writes them one by one)."""
    return [x for chunk in chunks for x in (pause, chunk)]


def streamed(body: dict, pause: float, size: int = 4) -> tuple[int, dict, list]:
    return 200, {"Content-Type": "text/event-stream"}, paced(openai_stream(body, size=size), pause)


def background_run(user, provider: str = "openai", tools=("recall",)) -> Run:
    options = submit.RunOptions(input="What is 12*7, plus 1?", mode="background", provider=provider, tools=list(tools))
    return submit.submit_run(owner=user, options=options)


def drive_in_thread(run_id) -> threading.Thread:
    def work() -> None:
        try:
            drive.run_background(run_id=run_id)
        finally:
            connection.close()

    thread = threading.Thread(target=work)
    thread.start()
    return thread


def stream(api, run_id, query: str = "", then=None) -> list[dict]:
    """The run's event stream read to its end (`done`), live frames included, each with its arrival time. `then`
    is called once the stream is open (its first frame read): e.g. start the worker, so no live event is missed."""
    response = api.get(f"{RUNS}/{run_id}/events{query}")
    assert response.status_code == 200, response.content
    frames, buffer, started = [], b"", time.monotonic()
    for chunk in response.streaming_content:
        buffer += chunk.encode() if isinstance(chunk, str) else chunk
        while b"\n\n" in buffer:
            block, buffer = buffer.split(b"\n\n", 1)
            for frame in parse(block + b"\n\n"):
                frames.append(frame | {"at": time.monotonic() - started})
                if then is not None and len(frames) == 1:
                    then()
    return frames


@pytest.fixture
def two_turns(stub, settings):
    """Turn 1 asks for recall (after a sentence written slowly; not an instant tool, so its reply is stored before it
    runs); turn 2 writes ANSWER in pieces."""
    point_sdks_at(settings, stub)
    first = openai_tool_calls([("c1", "recall", {"query": "numbers"})])
    first["choices"][0]["message"]["content"] = "Let me compute that."

    def model(request):
        body = json.loads(request.body)
        turn = sum(1 for m in body["messages"] if m["role"] == "tool")
        reply = first if turn == 0 else openai_text(ANSWER)
        if not body.get("stream"):  # a plain call gets the whole reply
            return 200, {"Content-Type": "application/json"}, json.dumps(reply).encode()
        return streamed(reply, pause=0.08)

    stub.add("POST", OPENAI_PATH, handler=model, repeat=True)
    return stub


def test_the_reply_arrives_as_it_is_written_and_tool_calls_as_they_run(two_turns):
    user = make_user("live")
    run = background_run(user)
    workers = []
    frames = stream(client_for(user), run.pk, then=lambda: workers.append(drive_in_thread(run.pk)))
    workers[0].join(30)

    events = [f["event"] for f in frames]
    steps = [f for f in frames if f["event"] == "step"]
    assert [s["data"]["kind"] for s in steps] == ["model", "tool", "model"]
    deltas = {
        turn: [f for f in frames if f["event"] == "assistant.delta" and f["data"]["turn"] == turn] for turn in (1, 2)
    }
    # Each turn's text arrives in several pieces that join into exactly what the committed step says.
    assert "".join(f["data"]["text"] for f in deltas[1]) == "Let me compute that."
    assert "".join(f["data"]["text"] for f in deltas[2]) == ANSWER
    assert len(deltas[2]) >= 3
    assert steps[2]["data"]["final_answer"] == ANSWER
    # Live events come before the step that commits what they showed, and carry no id (never replayed).
    first_step, last_step = frames.index(steps[0]), frames.index(steps[2])
    assert all(frames.index(f) < first_step for f in deltas[1])
    assert all(frames.index(steps[1]) < frames.index(f) < last_step for f in deltas[2])
    assert all(f["id"] is None for f in frames if f["event"] != "step")
    assert deltas[2][-1]["at"] - deltas[2][0]["at"] > 0.2  # as written (pieces 80 ms apart), not all at the end
    assert "tool.started" in events and "tool.finished" in events, events
    started = frames[events.index("tool.started")]["data"]
    finished = frames[events.index("tool.finished")]["data"]
    assert started == {"call_id": "c1", "tool": "recall", "arguments": {"query": "numbers"}}
    assert finished["call_id"] == "c1" and finished["is_error"] is False and finished["latency_ms"] >= 0
    assert (
        frames.index(steps[0]) < events.index("tool.started") < events.index("tool.finished") < frames.index(steps[1])
    )
    assert events[-1] == "done"


def test_deltas_0_leaves_out_the_text_but_not_the_tools(two_turns):
    user = make_user("quiet")
    run = background_run(user)
    workers = []
    frames = stream(client_for(user), run.pk, "?deltas=0", then=lambda: workers.append(drive_in_thread(run.pk)))
    workers[0].join(30)

    events = [f["event"] for f in frames]
    assert "assistant.delta" not in events and "assistant.retry" not in events
    assert {"tool.started", "tool.finished"} <= set(events)
    assert [f["data"]["kind"] for f in frames if f["event"] == "step"] == ["model", "tool", "model"]


def test_a_replay_of_a_finished_run_has_no_live_events(two_turns):
    user = make_user("later")
    run = background_run(user)
    drive.run_background(run_id=run.pk)
    frames = stream(client_for(user), run.pk)
    assert [f["event"] for f in frames] == ["step", "step", "step", "run", "done"]


@pytest.mark.parametrize("value", ["2", "true", "", "yes", "00"])
def test_a_deltas_value_but_0_or_1_is_400(value):
    user = make_user("bad")
    run = background_run(user, provider="demo")
    response = client_for(user).get(f"{RUNS}/{run.pk}/events?deltas={value}")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/json" and "deltas" in response.json()


def test_someone_elses_run_is_404_before_anything_else():
    run = background_run(make_user("owner"), provider="demo")
    response = client_for(make_user("other")).get(f"{RUNS}/{run.pk}/events?deltas=2")
    assert response.status_code == 404 and response["Content-Type"] == "application/json"


def test_a_cancel_closes_the_models_stream_within_a_second_and_keeps_its_usage(stub, settings):
    """Anthropic reports the input tokens in message_start: a call cut short by a cancel still counts them, and no
    partial step is stored."""
    point_sdks_at(settings, stub)
    body = anthropic_text("word " * 60, usage=anthropic_usage(321, 60))
    slow = paced(anthropic_stream(body, size=5), pause=0.2)  # ~12 s to write it all
    stub.add(
        "POST", ANTHROPIC_PATH, handler=lambda request: (200, {"Content-Type": "text/event-stream"}, slow), repeat=True
    )
    user = make_user("canceller")
    api = client_for(user)
    run = background_run(user, provider="anthropic")
    worker = drive_in_thread(run.pk)
    response = api.get(f"{RUNS}/{run.pk}/events")
    seen = b""
    for chunk in response.streaming_content:
        seen += chunk.encode() if isinstance(chunk, str) else chunk
        if b"assistant.delta" in seen:
            break
    assert api.post(f"{RUNS}/{run.pk}/cancel").status_code == 200
    cancelled = time.monotonic()
    worker.join(10)
    assert not worker.is_alive()
    assert time.monotonic() - cancelled < 1.5  # the worker let go of the model's stream within about a second

    run.refresh_from_db()
    assert (run.status, run.stop_reason) == ("done", "cancelled")
    assert list(run.steps.values_list("kind", flat=True)) == []  # nothing of the cut reply is stored
    assert (run.turns, run.prompt_tokens) == (1, 321)  # but the input it was charged for counts
    assert stub.count("POST", ANTHROPIC_PATH) == 1


def _asked_to_stream(stub) -> list[bool]:
    return [json.loads(r.body).get("stream") is True for r in stub.requests if r.path.endswith("/chat/completions")]


def test_a_run_no_one_follows_makes_plain_model_calls(two_turns, monkeypatch):
    """Streaming costs a client that does not follow its run nothing: no stream is asked for, no event published."""
    from agents.runs import livebus

    outbox = livebus.outbox()
    assert outbox.drain(2)
    sent: list[str] = []
    send = outbox._send
    monkeypatch.setattr(outbox, "_send", lambda batch: (sent.extend(batch), send(batch)))
    options = submit.RunOptions(input="What is 12*7, plus 1?", mode="sync", provider="openai", tools=["recall"])
    run = submit.submit_run(owner=make_user("alone"), options=options)

    assert run.output == ANSWER
    assert _asked_to_stream(two_turns) == [False, False]
    assert outbox.drain(2)
    # Only this run's messages count: a stream an earlier test left open in this process may renew its follow.
    assert [p for p in sent if livebus.run_of(p) == str(run.pk)] == []


def test_once_a_stream_follows_a_step_run_its_next_call_streams(two_turns):
    user = make_user("stepper")
    options = submit.RunOptions(input="What is 12*7, plus 1?", mode="step", provider="openai", tools=["recall"])
    run = submit.submit_run(owner=user, options=options)  # the first unit, followed by no one: a plain call
    assert _asked_to_stream(two_turns) == [False]
    workers = []

    def advance() -> None:
        def work() -> None:
            try:
                drive.execute(run_id=run.pk, units=drive.UNTIL_STOPPED)
            finally:
                connection.close()

        workers.append(threading.Thread(target=work))
        workers[0].start()

    frames = stream(client_for(user), run.pk, then=advance)
    workers[0].join(30)

    assert _asked_to_stream(two_turns) == [False, True]
    deltas = [f["data"]["text"] for f in frames if f["event"] == "assistant.delta"]
    assert "".join(deltas) == ANSWER and len(deltas) >= 3
