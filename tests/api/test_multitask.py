"""Double-texting on a thread (`multitask_strategy`, docs/double-texting.md): reject, enqueue, interrupt, rollback;
one outcome under concurrent requests, on SQLite and PostgreSQL alike."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from agents.errors import RunBusy
from agents.models import Run, Step, Thread
from agents.runs import drive, multitask, persist, recovery, signals
from tests.api.conftest import RUNS, create_run, run_count, run_url
from tests.conftest import client_for, make_user
from tests.support.threads import in_threads

QUESTION = "What is 12*7, plus 1?"  # three units with the demo model: 12*7, then 84+1, then the answer 85
DIVIDE = "now divide that by 5"  # 17 after 85: only with the earlier answer in its history
ADD = "and add 2"
TRIPLE = "multiply it by 3"
THREADS = "/api/v1/threads"
WORKER = pytest.mark.django_db(transaction=True)  # the start of a waiting run follows a commit


@pytest.fixture(autouse=True)
def _no_rate_limit(settings):
    settings.AGENT_RATE_LIMIT = "100000/m"


def new_thread(client) -> str:
    response = client.post(THREADS, {}, format="json")
    assert response.status_code == 201
    return response.json()["id"]


def in_thread(client, thread_id: str, text: str, **fields):
    return create_run(client, input=text, thread_id=thread_id, **fields)


def work() -> None:
    """What `manage.py db_worker` does, once: every queued task (those queued meanwhile too), then stop."""
    call_command("db_worker", "--batch", "--no-reload", "--no-startup-delay", verbosity=0)


def queued_tasks() -> int:
    return DBTaskResult.objects.filter(status="READY").count()


def finish(client, run_id: str) -> dict:
    """Advance a step run until it is done."""
    for _ in range(10):
        body = client.get(run_url(run_id)).json()
        if body["status"] == "done":
            return body
        assert client.post(run_url(run_id, "advance"), {}, format="json").status_code == 200
    raise AssertionError("the run did not finish")


def in_order(thread_id) -> list[Run]:
    return list(Run.objects.filter(thread_id=thread_id).order_by("created_at"))


# --- the field -----------------------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("value", ["queue", "", "INTERRUPT", 3, None, ["enqueue"]])
def test_a_strategy_other_than_the_four_is_400_naming_the_field(api, value):
    thread = new_thread(api)
    response = in_thread(api, thread, QUESTION, multitask_strategy=value)
    assert response.status_code == 400
    assert list(response.json()) == ["multitask_strategy"]
    assert run_count() == 0


@pytest.mark.django_db
@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt", "rollback"])
def test_without_a_thread_the_strategy_is_accepted_and_changes_nothing(api, strategy):
    response = create_run(api, multitask_strategy=strategy)
    assert response.status_code == 201
    assert (response.json()["status"], response.json()["output"]) == ("done", "85")


@pytest.mark.django_db
@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt", "rollback"])
def test_on_an_idle_thread_every_strategy_just_runs(api, strategy):
    thread = new_thread(api)
    assert in_thread(api, thread, QUESTION).json()["output"] == "85"
    response = in_thread(api, thread, DIVIDE, multitask_strategy=strategy)
    assert response.status_code == 201
    assert response.json()["output"] == "17"
    assert [r.stop_reason for r in in_order(thread)] == ["final_answer", "final_answer"]


# --- reject --------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("fields", [{}, {"multitask_strategy": "reject"}])
def test_reject_is_the_default_a_409_that_stores_nothing(api, fields):
    thread = new_thread(api)
    active = in_thread(api, thread, QUESTION, mode="step").json()
    response = in_thread(api, thread, ADD, **fields)
    assert response.status_code == 409
    assert "running" in response.json()["detail"] and "multitask_strategy" in response.json()["detail"]
    assert run_count() == 1
    assert Run.objects.get(pk=active["id"]).status == "running"


# --- enqueue -------------------------------------------------------------------------------------------------------


@WORKER
def test_an_enqueued_run_waits_then_starts_seeing_the_answer_it_waited_for(api):
    thread = new_thread(api)
    active = in_thread(api, thread, QUESTION, mode="step").json()
    response = in_thread(api, thread, DIVIDE, multitask_strategy="enqueue")  # a sync run

    assert response.status_code == 202
    body = response.json()
    assert (body["status"], body["mode"], body["turns"], body["stop_reason"]) == ("queued", "sync", 0, None)
    waiting = Run.objects.get(pk=body["id"])
    assert waiting.thread_queued and waiting.lease_owner == "" and waiting.steps.count() == 0
    assert queued_tasks() == 0  # no task before its turn
    assert Run.objects.get(pk=active["id"]).status == "running"  # the active run is untouched

    assert finish(api, active["id"])["output"] == "85"  # its end starts the waiting run
    waiting.refresh_from_db()
    assert (waiting.thread_queued, waiting.status, waiting.mode) == (False, "queued", "background")
    assert waiting.history == [{"input": QUESTION, "output": "85", "stop_reason": "final_answer"}]
    assert queued_tasks() == 1

    work()
    done = api.get(run_url(body["id"])).json()
    assert (done["status"], done["output"]) == ("done", "17")


@WORKER
def test_several_enqueued_runs_run_one_after_another_in_order(api):
    thread = new_thread(api)
    assert in_thread(api, thread, QUESTION, mode="background").status_code == 202
    for text in (DIVIDE, ADD, TRIPLE):
        response = in_thread(api, thread, text, mode="background", multitask_strategy="enqueue")
        assert (response.status_code, response.json()["status"]) == (202, "queued")
    assert queued_tasks() == 1  # only the active run's

    work()
    runs = in_order(thread)
    assert [r.input for r in runs] == [QUESTION, DIVIDE, ADD, TRIPLE]
    assert [r.output for r in runs] == ["85", "17", "19", "57"]
    for k, run in enumerate(runs):
        assert [t["input"] for t in run.history] == [QUESTION, DIVIDE, ADD, TRIPLE][:k]
    spans = [(min(s.created_at for s in r.steps.all()), max(s.created_at for s in r.steps.all())) for r in runs]
    assert all(spans[k][1] <= spans[k + 1][0] for k in range(len(spans) - 1)), spans


@WORKER
def test_a_step_run_waiting_its_turn_cannot_be_advanced_before_it(api):
    thread = new_thread(api)
    active = in_thread(api, thread, QUESTION, mode="step").json()
    waiting = in_thread(api, thread, "What is 2*3, plus 1?", mode="step", multitask_strategy="enqueue").json()
    assert (waiting["status"], waiting["mode"]) == ("queued", "step")

    refused = api.post(run_url(waiting["id"], "advance"), {}, format="json")
    assert refused.status_code == 409
    assert refused.json() == {"detail": multitask.WAITING}
    assert Run.objects.get(pk=waiting["id"]).turns == 0

    assert api.post(run_url(active["id"], "cancel")).status_code == 200  # a cancel ends it too: the next may start
    started = Run.objects.get(pk=waiting["id"])
    assert (started.thread_queued, started.status, started.mode) == (False, "queued", "step")
    assert queued_tasks() == 0  # a step run waits for its client
    advanced = api.post(run_url(waiting["id"], "advance"), {}, format="json")
    assert advanced.status_code == 200
    assert (advanced.json()["status"], advanced.json()["turns"]) == ("running", 1)


@WORKER
def test_a_waiting_run_is_never_claimed_nor_handed_to_a_worker_before_its_turn(api):
    thread = new_thread(api)
    active = in_thread(api, thread, QUESTION, mode="step").json()
    waiting_id = in_thread(api, thread, ADD, mode="background", multitask_strategy="enqueue").json()["id"]
    long_ago = timezone.now() - timedelta(hours=1)
    Run.objects.filter(pk=waiting_id).update(updated_at=long_ago)  # looks like an orphan to the sweep

    now = timezone.now()
    assert persist.claim(waiting_id, "t1", ["queued", "running"], now, now + timedelta(seconds=15)) is None
    assert persist.claim_queued(waiting_id, "t1", now, now + timedelta(seconds=15)) is None
    with pytest.raises(RunBusy):
        drive.execute(run_id=waiting_id)
    assert recovery.sweep_orphans() == []
    assert queued_tasks() == 0
    assert Run.objects.get(pk=waiting_id).thread_queued

    # The active run ends, but whatever ended it died before starting the next: the sweep starts it.
    Run.objects.filter(pk=active["id"]).update(status="done", stop_reason="cancelled")
    assert recovery.sweep_orphans() == [waiting_id]
    assert not Run.objects.get(pk=waiting_id).thread_queued and queued_tasks() == 1
    work()
    assert Run.objects.get(pk=waiting_id).status == "done"


@WORKER
def test_a_cancelled_waiting_run_is_done_and_skipped(api):
    thread = new_thread(api)
    active = in_thread(api, thread, QUESTION, mode="step").json()
    first, second = (
        in_thread(api, thread, text, mode="background", multitask_strategy="enqueue").json()["id"]
        for text in (DIVIDE, "What is 6*7?")
    )
    cancelled = api.post(run_url(first, "cancel"))
    assert (cancelled.status_code, cancelled.json()["stop_reason"]) == (200, "cancelled")
    assert Run.objects.get(pk=second).thread_queued  # the active run still runs
    assert queued_tasks() == 0

    assert finish(api, active["id"])["output"] == "85"
    work()
    skipped, ran = Run.objects.get(pk=first), Run.objects.get(pk=second)
    assert (skipped.status, skipped.stop_reason, skipped.turns) == ("done", "cancelled", 0)
    assert (ran.status, ran.output) == ("done", "42")
    assert [(t["input"], t["output"]) for t in ran.history] == [(QUESTION, "85"), (DIVIDE, None)]


@pytest.mark.django_db
def test_an_enqueued_run_is_replayed_by_its_idempotency_key(api):
    thread = new_thread(api)
    in_thread(api, thread, QUESTION, mode="step")
    body = {"input": ADD, "thread_id": thread, "multitask_strategy": "enqueue"}
    key = {"Idempotency-Key": "double-text-1"}
    first = api.post(RUNS, body, format="json", headers=key)
    again = api.post(RUNS, body, format="json", headers=key)
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json()["id"] == first.json()["id"] and run_count() == 2


# --- interrupt -----------------------------------------------------------------------------------------------------


def _completion(content: str) -> dict:
    message = {"role": "assistant", "content": content}
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


@WORKER
def test_interrupt_cancels_the_active_run_and_the_new_run_sees_what_it_had_done(api, settings, stub):
    settings.OPENAI_API_KEY = "sk-test"
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    stub.add("POST", "/v1/chat/completions", json=_completion("So far 12*7 is 84."))
    told = []

    def receiver(sender, run, **kwargs):
        told.append(str(run.pk))

    signals.run_done.connect(receiver, dispatch_uid="test-multitask-told")
    try:
        thread = new_thread(api)
        active = in_thread(api, thread, QUESTION, mode="step").json()  # one unit: calculator 12*7 -> 84
        response = in_thread(api, thread, "Stop. What have you got?", provider="openai", multitask_strategy="interrupt")
    finally:
        signals.run_done.disconnect(dispatch_uid="test-multitask-told")

    assert response.status_code == 201
    assert (response.json()["status"], response.json()["output"]) == ("done", "So far 12*7 is 84.")
    interrupted = Run.objects.get(pk=active["id"])
    assert (interrupted.status, interrupted.stop_reason, interrupted.output) == ("done", "cancelled", None)
    assert interrupted.error == multitask.INTERRUPTED
    assert [s.kind for s in interrupted.steps.order_by("index")] == ["model", "tool"]  # its steps are kept
    assert told.count(active["id"]) == 1  # run_done, once, as for any cancel

    new = Run.objects.get(pk=response.json()["id"])
    calls = [{"tool": "calculator", "arguments": '{"expression": "12*7"}', "output": "84"}]
    assert new.history == [{"input": QUESTION, "output": None, "stop_reason": "cancelled", "calls": calls}]
    # ... and the model was sent it: the interrupted turn, then what it had done, its tool output wrapped.
    messages = stub.requests[0].json()["messages"]
    turn = next(i for i, m in enumerate(messages) if m["role"] == "user" and m["content"] == QUESTION)
    said = messages[turn + 1]
    assert said["role"] == "assistant"
    assert 'calculator {"expression": "12*7"} returned:' in said["content"]
    assert "<<<TOOL_OUTPUT_START>>>\n84\n<<<TOOL_OUTPUT_END>>>" in said["content"]
    assert messages[turn + 2] == {"role": "user", "content": "Stop. What have you got?"}


@pytest.mark.django_db
def test_interrupt_also_cancels_the_runs_waiting_their_turn(api):
    thread = new_thread(api)
    active = in_thread(api, thread, QUESTION, mode="step").json()
    waiting = in_thread(api, thread, DIVIDE, mode="background", multitask_strategy="enqueue").json()
    response = in_thread(api, thread, "What is 2*3, plus 1?", mode="step", multitask_strategy="interrupt")
    assert response.status_code == 201 and response.json()["status"] == "running"
    assert str(Run.objects.filter(thread_id=thread).exclude(status="done").get().pk) == response.json()["id"]
    for run_id in (active["id"], waiting["id"]):
        run = Run.objects.get(pk=run_id)
        assert (run.status, run.stop_reason, run.error) == ("done", "cancelled", multitask.INTERRUPTED)
    # The waiting run had done nothing: its turn is only its note. The interrupted one shows its calculator call.
    history = Run.objects.get(pk=response.json()["id"]).history
    assert [t["input"] for t in history] == [QUESTION, DIVIDE]
    assert [c["tool"] for c in history[0]["calls"]] == ["calculator"] and "calls" not in history[1]


@pytest.mark.django_db
def test_a_run_cancelled_by_hand_is_still_only_a_note_in_history(api):
    thread = new_thread(api)
    active = in_thread(api, thread, QUESTION, mode="step").json()
    assert api.post(run_url(active["id"], "cancel")).status_code == 200
    follow = in_thread(api, thread, ADD).json()
    assert Run.objects.get(pk=follow["id"]).history == [{"input": QUESTION, "output": None, "stop_reason": "cancelled"}]


# --- rollback ------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_rollback_deletes_the_run_in_progress_and_the_new_run_does_not_see_it(api):
    thread = new_thread(api)
    assert in_thread(api, thread, QUESTION).json()["output"] == "85"
    active = in_thread(api, thread, DIVIDE, mode="step").json()  # one unit: calculator 85/5
    assert Step.objects.filter(run_id=active["id"]).count() == 2

    response = in_thread(api, thread, ADD, multitask_strategy="rollback")
    assert response.status_code == 201
    assert response.json()["output"] == "87"  # 85 + 2: the rolled-back 17 was never there
    assert not Run.objects.filter(pk=active["id"]).exists()
    assert Step.objects.filter(run_id=active["id"]).count() == 0
    assert api.get(run_url(active["id"])).status_code == 404
    assert [r["input"] for r in api.get(f"{THREADS}/{thread}").json()["runs"]] == [QUESTION, ADD]
    assert Run.objects.get(pk=response.json()["id"]).history == [
        {"input": QUESTION, "output": "85", "stop_reason": "final_answer"}
    ]


# --- concurrent requests on one thread -----------------------------------------------------------------------------


N = 20


@WORKER
@pytest.mark.parametrize("strategy", ["reject", "enqueue", "interrupt", "rollback"])
def test_concurrent_requests_on_one_thread_have_exactly_one_outcome(settings, strategy):
    settings.AGENT_THREAD_HISTORY_RUNS = 50
    alice = make_user("alice")
    thread = Thread.objects.create(owner=alice)
    clients = [client_for(alice) for _ in range(N)]
    mode = "step" if strategy == "interrupt" else "background"  # interrupt: the runs it cancels are being driven

    def post(i: int):
        body = {"input": f"What is {i}+1?", "thread_id": str(thread.pk), "mode": mode, "multitask_strategy": strategy}
        return clients[i].post(RUNS, body, format="json")

    statuses = [getattr(r, "status_code", r) for r in in_threads(N, post)]
    runs = Run.objects.filter(thread=thread)
    active = runs.filter(thread_queued=False).exclude(status="done")
    assert active.count() == 1, (statuses, list(runs.values_list("status", "thread_queued")))

    if strategy == "reject":
        assert sorted(statuses) == [202] + [409] * (N - 1), statuses
        assert runs.count() == 1
    elif strategy == "enqueue":
        assert statuses == [202] * N, statuses
        assert runs.filter(thread_queued=True, status="queued").count() == N - 1
        assert queued_tasks() == 1
        work()  # one after another, in the order they were created
        ordered = in_order(thread)
        assert [r.stop_reason for r in ordered] == ["final_answer"] * N
        for k, run in enumerate(ordered):
            assert [t["input"] for t in run.history] == [r.input for r in ordered[:k]]
            assert [t["output"] for t in run.history] == [r.output for r in ordered[:k]]
        firsts = [min(s.created_at for s in r.steps.all()) for r in ordered]
        lasts = [max(s.created_at for s in r.steps.all()) for r in ordered]
        assert all(lasts[k] <= firsts[k + 1] for k in range(N - 1))
    elif strategy == "interrupt":
        assert statuses == [201] * N, statuses
        assert runs.count() == N
        cancelled = runs.filter(status="done", stop_reason="cancelled", error=multitask.INTERRUPTED)
        assert cancelled.count() == N - 1
        assert active.get().created_at == max(r.created_at for r in runs)  # the last one in wins
    else:
        assert statuses == [202] * N, statuses
        assert runs.count() == 1


# --- what an interrupted turn shows (agents/engine/history.py, pure) -------------------------------------------------


def test_an_interrupted_turn_shows_its_latest_calls_each_output_cut_and_wrapped():
    from agents.engine import history as h

    steps = []
    for i in range(h.CALLS_SHOWN + 2):
        steps.append({"kind": "model", "tool_calls": [{"id": f"c{i}", "name": "calculator", "arguments": {"e": i}}]})
        steps.append({"kind": "tool", "call_id": f"c{i}", "name": "calculator", "output": str(i), "is_error": i == 9})
    steps.append({"kind": "model", "tool_calls": [{"id": "late", "name": "search", "arguments": {"query": "x"}}]})
    steps.append({"kind": "tool", "call_id": "big", "name": "search", "output": "y" * 2000 + h.wrapping.END})

    calls, earlier = h.calls_so_far(steps)
    assert earlier == 4 and len(calls) == h.CALLS_SHOWN
    assert calls[-2] == {"tool": "search", "arguments": '{"query": "x"}', "output": None}  # asked, never run
    assert len(calls[-1]["output"]) <= h.OUTPUT_SHOWN and h.wrapping.END not in calls[-1]["output"]
    assert calls[-3] == {"tool": "calculator", "arguments": '{"e": 9}', "output": "9", "is_error": True}

    text = h.answer_text({"input": "q", "output": None, "stop_reason": "cancelled", "calls": calls, "earlier_calls": 4})
    assert text.startswith("(No final answer: that run stopped with cancelled before it finished.")
    assert "- (4 earlier tool calls not shown)" in text
    assert '- calculator {"e": 9} failed:\n<<<TOOL_OUTPUT_START>>>\n9\n<<<TOOL_OUTPUT_END>>>' in text
    assert '- search {"query": "x"}: not run' in text
    assert text.count(h.wrapping.END) == len(calls) - 1  # one per output, none forged by one
    assert h.answer_text({"input": "q", "output": None, "stop_reason": "cancelled"}) == (
        "(No final answer: that run stopped with cancelled.)"
    )
