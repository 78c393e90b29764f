"""Long threads summarised (run option `history: summarize`, docs/threads.md#long-threads): the turns past the
history budget are condensed by the run's own model in one call, stored once on the thread and extended by later
runs; the call is a traced, priced step of the run. `truncate`, the default, drops them as before.

Through the REST API and the real `openai` SDK against the stub on 127.0.0.1, whose model answers by the request it
gets (a summary request is told by its system prompt), and with the offline demo model.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.db.models import F, Sum

from agents.engine import summary as engine_summary
from agents.models import DailyUsage, Run, RunStatus, Step, Thread
from agents.runs import drive, store, thread_runs
from tests.conftest import client_for, make_user
from tests.console.conftest import logged_in
from tests.observability.test_tracing import Traced
from tests.providers import stub_llm as llm
from tests.support.http_stub import RecordedRequest

RUNS = "/api/v1/runs"
THREADS = "/api/v1/threads"
JSON = {"Content-Type": "application/json"}
BUDGET = 250  # AGENT_THREAD_HISTORY_CHARS: two of the turns below fit, three do not
SUMMARY_USAGE, TURN_USAGE = (50, 10), (10, 2)
PRICES = {"openai/gpt-4.1-mini": {"input": "1000", "output": "2000"}}  # per million tokens
SUMMARY_COST = 50 * 1000 * 1000 + 10 * 2000 * 1000  # nanos: 50 input tokens, 10 output tokens
TURN_COST = 10 * 1000 * 1000 + 2 * 2000 * 1000


def question(number: int) -> str:
    return f"question {number} " + "x" * 90  # with its answer, about 110 characters of history


class ThreadModel:
    """Chat Completions answered by what is asked: a summary request (its system prompt) gets "SUMMARY <n>: " and
    the questions it was sent; a run's turn gets "answer <n>" for its question. `fail` summary requests first
    answer 500."""

    def __init__(self, fail: int = 0) -> None:
        self.summaries: list[dict[str, Any]] = []
        self.turns: list[dict[str, Any]] = []
        self.fail = fail

    def __call__(self, request: RecordedRequest) -> tuple[int, dict[str, str], bytes]:
        body = request.json()
        if body["messages"][0]["content"].startswith(engine_summary.SUMMARY_MARK):
            self.summaries.append(body)
            if self.fail:
                self.fail -= 1
                return 500, JSON, json.dumps(llm.openai_error("the summariser is down")).encode()
            asked = re.findall(r"^User: (question \d+)", body["messages"][1]["content"], re.M)
            text = f"SUMMARY {len(self.summaries)}: {', '.join(asked)}"
            return 200, JSON, json.dumps(llm.openai_text(text, llm.openai_usage(*SUMMARY_USAGE))).encode()
        self.turns.append(body)
        number = re.match(r"question (\d+)", body["messages"][-1]["content"]).group(1)
        return 200, JSON, json.dumps(llm.openai_text(f"answer {number}", llm.openai_usage(*TURN_USAGE))).encode()

    def summary_prompt(self, index: int = -1) -> str:
        return self.summaries[index]["messages"][1]["content"]

    def seen(self, index: int = -1) -> list[tuple[str, str]]:
        """What a run's model call was sent after the system prompt: (role, content)."""
        return [(m["role"], m["content"]) for m in self.turns[index]["messages"][1:]]


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.AGENT_RATE_LIMIT = "100000/m"
    settings.AGENT_THREAD_HISTORY_CHARS = BUDGET
    settings.AGENT_PRICES = PRICES


@pytest.fixture
def model(settings, stub) -> ThreadModel:
    llm.point_sdks_at(settings, stub, retries=0)
    handler = ThreadModel()
    stub.add("POST", llm.OPENAI_PATH, handler=handler, repeat=True)
    return handler


@pytest.fixture
def api(alice):
    return client_for(alice)


def new_thread(api) -> str:
    response = api.post(THREADS, {}, format="json")
    assert response.status_code == 201, response.data
    return response.data["id"]


def ask(api, thread_id: str, number: int, **fields) -> dict[str, Any]:
    body = {"input": question(number), "thread_id": thread_id, "provider": "openai", "tools": [], **fields}
    response = api.post(RUNS, body, format="json")
    assert response.status_code == 201, response.data
    assert (response.data["status"], response.data["output"]) == ("done", f"answer {number}")
    return response.data


def converse(api, thread_id: str, numbers, **fields) -> list[dict[str, Any]]:
    return [ask(api, thread_id, n, **fields) for n in numbers]


def steps_of(api, run: dict[str, Any]) -> list[dict[str, Any]]:
    return api.get(f"{RUNS}/{run['id']}").json()["steps"]


def thread_of(api, thread_id: str) -> dict[str, Any]:
    return api.get(f"{THREADS}/{thread_id}").json()


def turn(number: int) -> list[tuple[str, str]]:
    return [("user", question(number)), ("assistant", f"answer {number}")]


def summary_pair(text: str, runs: int) -> list[tuple[str, str]]:
    note = f"(The earlier part of this conversation, condensed: {runs} earlier runs.)\n{text}"
    return [("user", note), ("assistant", "Noted: I have the earlier part of our conversation in mind.")]


# --- summarize: one call, stored on the thread, seen by the model ------------------------------------------------


def test_a_thread_past_its_budget_condenses_the_left_out_turns_with_one_call(api, model, alice):
    thread_id = new_thread(api)
    converse(api, thread_id, [1, 2, 3], history="summarize")
    assert model.summaries == []  # within the budget so far

    fourth = ask(api, thread_id, 4, history="summarize")

    (request,) = model.summaries
    prompt = model.summary_prompt()
    assert prompt.startswith(engine_summary.FIRST)
    assert f"Turn 1\nUser: {question(1)}\nAssistant: answer 1" in prompt  # the left-out turn, and only it
    assert "question 2" not in prompt and "question 3" not in prompt
    assert request["max_completion_tokens" if "max_completion_tokens" in request else "max_tokens"] == 1024
    assert "tools" not in request
    # The thread stores it; the run's model saw it in place of the turn it condenses.
    thread = thread_of(api, thread_id)
    assert (thread["summary"], thread["summary_runs"]) == ("SUMMARY 1: question 1", 1)
    assert Thread.objects.get(pk=thread_id).summary == "SUMMARY 1: question 1"
    assert model.seen() == [*summary_pair("SUMMARY 1: question 1", 1), *turn(2), *turn(3), ("user", question(4))]
    assert Run.objects.get(pk=fourth["id"]).history[0] == {"summary": "SUMMARY 1: question 1", "runs": 1}
    # The call is a step of the run, before its first turn, with its usage and cost; the run counts both calls.
    summary, answer = steps_of(api, fourth)
    assert (summary["index"], summary["kind"], answer["kind"]) == (0, "summary", "model")
    assert summary["summary"] == "SUMMARY 1: question 1"
    assert (summary["runs"], summary["condensed"], summary["extended"]) == (1, 1, False)
    assert summary["usage"] == {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
    assert summary["cost"] == "0.07" and "error" not in summary
    assert fourth["usage"] == {"prompt_tokens": 60, "completion_tokens": 12, "total_tokens": 72}
    assert fourth["cost"] == "0.084"
    assert fourth["turns"] == 1  # the summary is no turn
    # ... and its owner's quota, like any model call.
    day = DailyUsage.objects.get(owner=alice)
    assert (day.prompt_tokens, day.completion_tokens) == (4 * 10 + 50, 4 * 2 + 10)
    assert day.cost_nanos == 4 * TURN_COST + SUMMARY_COST


def test_the_next_run_extends_the_summary_with_only_the_newly_left_out_turns(api, model):
    thread_id = new_thread(api)
    converse(api, thread_id, [1, 2, 3, 4], history="summarize")

    fifth = ask(api, thread_id, 5, history="summarize")

    assert len(model.summaries) == 2
    prompt = model.summary_prompt()
    assert prompt.startswith(f"{engine_summary.SO_FAR}\nSUMMARY 1: question 1\n\n{engine_summary.EXTEND}")
    assert f"Turn 2\nUser: {question(2)}" in prompt
    assert "User: question 1" not in prompt and "question 3" not in prompt  # not redone: only the new one
    thread = thread_of(api, thread_id)
    assert (thread["summary"], thread["summary_runs"]) == ("SUMMARY 2: question 2", 2)
    assert model.seen() == [*summary_pair("SUMMARY 2: question 2", 2), *turn(3), *turn(4), ("user", question(5))]
    (summary, _) = steps_of(api, fifth)
    assert (summary["runs"], summary["condensed"], summary["extended"]) == (2, 1, True)


def test_a_run_whose_left_out_turns_the_summary_covers_shows_it_without_a_call(api, model, settings):
    thread_id = new_thread(api)
    converse(api, thread_id, [1, 2, 3, 4, 5], history="summarize")
    assert len(model.summaries) == 2
    settings.AGENT_THREAD_HISTORY_CHARS = 400  # three turns fit now: the two left out are covered already

    sixth = ask(api, thread_id, 6, history="summarize")

    assert len(model.summaries) == 2
    assert model.seen() == [*summary_pair("SUMMARY 2: question 2", 2), *turn(3), *turn(4), *turn(5)] + [
        ("user", question(6))
    ]
    assert [s["kind"] for s in steps_of(api, sixth)] == ["model"]
    assert Run.objects.get(pk=sixth["id"]).history[0] == {"summary": "SUMMARY 2: question 2", "runs": 2}


def test_a_step_run_condenses_before_its_first_unit_which_is_still_one_model_call(api, model):
    thread_id = new_thread(api)
    converse(api, thread_id, [1, 2, 3], history="summarize")
    body = {"input": question(4), "thread_id": thread_id, "provider": "openai", "tools": [], "history": "summarize"}

    response = api.post(RUNS, {**body, "mode": "step"}, format="json")

    assert response.status_code == 201, response.data
    assert (response.data["status"], response.data["output"], response.data["turns"]) == ("done", "answer 4", 1)
    assert [s["kind"] for s in steps_of(api, response.data)] == ["summary", "model"]
    assert len(model.summaries) == 1 and len(model.turns) == 4


# --- no call -------------------------------------------------------------------------------------------------------


def test_truncate_the_default_makes_no_summary_call_and_drops_the_oldest_turns(api, model):
    thread_id = new_thread(api)
    runs = converse(api, thread_id, [1, 2, 3, 4, 5])

    assert model.summaries == []
    assert {r["history"] for r in runs} == {"truncate"}
    assert model.seen() == [*turn(3), *turn(4), ("user", question(5))]
    assert (thread_of(api, thread_id)["summary"], thread_of(api, thread_id)["summary_runs"]) == ("", 0)
    assert not Step.objects.filter(kind="summary").exists()


def test_a_thread_within_its_budget_makes_no_summary_call(api, model, settings):
    settings.AGENT_THREAD_HISTORY_CHARS = 24000
    thread_id = new_thread(api)
    converse(api, thread_id, [1, 2, 3, 4, 5], history="summarize")

    assert model.summaries == []
    assert model.seen() == [*turn(1), *turn(2), *turn(3), *turn(4), ("user", question(5))]
    assert thread_of(api, thread_id)["summary"] == ""
    assert not Step.objects.filter(kind="summary").exists()


# --- a failed call, a crash, a race --------------------------------------------------------------------------------


def test_a_failed_summary_call_truncates_the_run_goes_on_and_nothing_is_stored(api, model):
    thread_id = new_thread(api)
    converse(api, thread_id, [1, 2, 3], history="summarize")
    model.fail = 1

    fourth = ask(api, thread_id, 4, history="summarize")

    assert len(model.summaries) == 1  # tried once (no retries here)
    assert model.seen() == [*turn(2), *turn(3), ("user", question(4))]  # as truncate would
    assert (thread_of(api, thread_id)["summary"], thread_of(api, thread_id)["summary_runs"]) == ("", 0)
    summary, answer = steps_of(api, fourth)
    assert (summary["kind"], summary["summary"], answer["final_answer"]) == ("summary", None, "answer 4")
    assert "500" in summary["error"] or "down" in summary["error"]
    assert summary["usage"]["total_tokens"] == 0 and summary["cost"] is None
    assert Run.objects.get(pk=fourth["id"]).history == [
        {"input": question(n), "output": f"answer {n}", "stop_reason": "final_answer"} for n in (2, 3)
    ]

    ask(api, thread_id, 5, history="summarize")  # the next run condenses what is left out from the start

    assert "Turn 1\nUser: question 1" in model.summary_prompt() and "Turn 2\nUser: question 2" in model.summary_prompt()
    assert thread_of(api, thread_id)["summary_runs"] == 2


def test_a_crash_before_the_commit_loses_only_the_call_which_the_next_take_repeats(api, model, monkeypatch):
    thread_id = new_thread(api)
    converse(api, thread_id, [1, 2, 3], history="summarize")
    real, crashes = store.commit_unit, []

    def crash_once(held, state, events, **kwargs):
        if not crashes and any(e["kind"] == "summary" for e in events):
            crashes.append(held.run.pk)
            raise RuntimeError("the worker died")
        return real(held, state, events, **kwargs)

    monkeypatch.setattr(store, "commit_unit", crash_once)
    with pytest.raises(RuntimeError, match="the worker died"):
        api.post(RUNS, {"input": question(4), "thread_id": thread_id, "provider": "openai", "tools": [],
                        "history": "summarize"}, format="json")  # fmt: skip
    (run_id,) = crashes
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.version, run.lease_owner) == (RunStatus.RUNNING, 0, "")
    assert Thread.objects.filter(pk=thread_id, summary="", summary_runs=0).exists()  # nothing half-stored
    assert not run.steps.exists() and run.history[0].get("summary") is None and run.prompt_tokens == 0

    taken = drive.execute(run_id=run_id)  # the run's next take (a worker, the recovery sweep)

    assert (taken.status, taken.output) == ("done", "answer 4")
    assert len(model.summaries) == 2  # the lost call, made again
    assert model.summary_prompt(0) == model.summary_prompt(1)
    assert [s.kind for s in Run.objects.get(pk=run_id).steps.order_by("index")] == ["summary", "model"]
    assert Thread.objects.filter(pk=thread_id, summary="SUMMARY 2: question 1", summary_runs=1).exists()
    assert Run.objects.get(pk=run_id).prompt_tokens == 60  # the stored call counts; the lost one is gone with it


def test_a_summary_stored_meanwhile_is_not_overwritten(api, model, monkeypatch):
    """The thread's update is conditional on `summary_runs` being what was read: a summary stored in between (runs
    on a thread are serialised, so only by something else) wins; this run still sees its own."""
    thread_id = new_thread(api)
    converse(api, thread_id, [1, 2, 3], history="summarize")
    real = thread_runs.turns_between

    def and_meanwhile(*args, **kwargs):
        turns = real(*args, **kwargs)
        Thread.objects.filter(pk=thread_id).update(summary="stored meanwhile", summary_runs=F("summary_runs") + 1)
        return turns

    monkeypatch.setattr(thread_runs, "turns_between", and_meanwhile)
    fourth = ask(api, thread_id, 4, history="summarize")

    assert (thread_of(api, thread_id)["summary"], thread_of(api, thread_id)["summary_runs"]) == ("stored meanwhile", 1)
    assert model.seen()[:2] == summary_pair("SUMMARY 1: question 1", 1)
    assert steps_of(api, fourth)[0]["summary"] == "SUMMARY 1: question 1"


# --- traced; offline -------------------------------------------------------------------------------------------------


def test_the_summary_call_is_traced_as_a_span_of_its_own_with_its_chat_span(api, model):
    thread_id = new_thread(api)
    converse(api, thread_id, [1, 2, 3], history="summarize")
    traced = Traced()
    try:
        fourth = ask(api, thread_id, 4, history="summarize")
        (summarizing,) = traced.named("summarize_history")
        chats = traced.named("chat ")
        (agent,) = traced.named("invoke_agent")
    finally:
        traced.close()
    assert summarizing.attributes["reactsite.run.id"] == fourth["id"]
    assert summarizing.attributes["gen_ai.conversation.id"] == thread_id
    assert summarizing.parent.span_id == agent.context.span_id
    (summary_chat,) = [c for c in chats if c.parent.span_id == summarizing.context.span_id]
    assert summary_chat.attributes["gen_ai.usage.input_tokens"] == 50
    assert len(chats) == 2  # the summary's and the run's one turn


def test_the_demo_model_summarises_offline_and_extends_its_summary(api, settings):
    settings.AGENT_THREAD_HISTORY_CHARS = 40  # the two newest of these short turns fit
    thread_id = new_thread(api)
    inputs = ["What is 12*7, plus 1?", "now divide that by 5", "and add 2", "and add 2", "and add 2"]
    outputs = []
    for text in inputs:
        response = api.post(RUNS, {"input": text, "thread_id": thread_id, "history": "summarize"}, format="json")
        assert response.status_code == 201, response.data
        outputs.append(response.data["output"])

    assert outputs == ["85", "17", "19", "21", "23"]
    thread = thread_of(api, thread_id)
    assert thread["summary"] == (
        "Earlier in this conversation:\n"
        '- The user asked "What is 12*7, plus 1?"; the answer was "85".\n'
        '- The user asked "now divide that by 5"; the answer was "17".'
    )
    assert thread["summary_runs"] == 2
    assert Step.objects.filter(kind="summary").count() == 2
    assert Run.objects.aggregate(total=Sum("prompt_tokens"))["total"] > 0


def test_the_console_shows_the_summary_step_and_the_threads_summary(api, model):
    superuser = make_user("root", staff=True, superuser=True)
    thread_id = new_thread(api)
    converse(api, thread_id, [1, 2, 3], history="summarize")
    model.fail = 1
    failed = ask(api, thread_id, 4, history="summarize")
    fifth = ask(api, thread_id, 5, history="summarize")
    console = logged_in(superuser)

    page = console.get(f"/admin/agents/run/{fifth['id']}/change/").content.decode()
    assert "Summary of the thread's first 2 runs:" in page
    assert "SUMMARY 2: question 1, question 2" in page
    page = console.get(f"/admin/agents/run/{failed['id']}/change/").content.decode()
    assert "The summary of the thread's earlier turns failed" in page
    page = console.get(f"/admin/agents/thread/{thread_id}/change/").content.decode()
    assert "SUMMARY 2: question 1, question 2" in page
