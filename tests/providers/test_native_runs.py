"""Whole runs in the native protocol through the services, the real SDKs and the stub, answered the way real APIs
answer (issue 33, item 2): parallel calls, arguments that are not JSON, empty replies, refusals, replies cut off or
filtered, a paused turn, thinking blocks sent back with their signature. Each ends as an observation the model acts
on or with a stop reason that names it."""

from __future__ import annotations

import pytest

from agents.models import Run
from agents.runs import drive, representation, submit
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH, OPENAI_PATH

SIGNATURE = "EuYBCkQYAiJAgCs1le6/Pol5Z4/JdIrQSmHLnbVn6Rfd1JazhFEp" + "z" * 32
THINKING = {"type": "thinking", "thinking": "Two products, then their sum.", "signature": SIGNATURE}
TWO = [("{}_a", {"expression": "12*7"}), ("{}_b", {"expression": "6*7"})]


@pytest.fixture
def providers(settings, stub):
    return llm.point_sdks_at(settings, stub, retries=0)


def start(owner, provider: str, **options) -> Run:
    options = submit.RunOptions(input="What is 12*7 and 6*7?", provider=provider, tools=["calculator"], **options)
    return drive.execute(run_id=submit.start_run(owner=owner, options=options).pk)


def steps(run: Run) -> list[dict]:
    return [{"kind": s.kind, **s.data} for s in run.steps.order_by("index")]


def test_openai_parallel_calls_run_in_order_and_answer_by_id(providers, alice):
    providers.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([(i.format("c"), "calculator", a) for i, a in TWO]))
    providers.add("POST", OPENAI_PATH, json=llm.openai_text("84 and 42"))
    run = start(alice, "openai")

    assert (run.stop_reason, run.output) == ("final_answer", "84 and 42")
    assert [(s["kind"], s.get("call_id"), s.get("output")) for s in steps(run)][1:3] == [
        ("tool", "c_a", "84"),
        ("tool", "c_b", "42"),
    ]
    sent = providers.requests[-1].json()["messages"]
    assert [c["id"] for c in sent[-3]["tool_calls"]] == ["c_a", "c_b"]
    assert [(m["role"], m["tool_call_id"]) for m in sent[-2:]] == [("tool", "c_a"), ("tool", "c_b")]


def test_anthropic_parallel_calls_answer_in_one_user_turn_in_order(providers, alice):
    two = [(i.format("tu"), "calculator", a) for i, a in TWO]
    providers.add("POST", ANTHROPIC_PATH, json=llm.anthropic_tool_use(two))
    providers.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("84 and 42"))
    run = start(alice, "anthropic")

    assert (run.stop_reason, run.output) == ("final_answer", "84 and 42")
    sent = providers.requests[-1].json()["messages"]
    assert [b["id"] for b in sent[-2]["content"] if b["type"] == "tool_use"] == ["tu_a", "tu_b"]
    assert [b["tool_use_id"] for b in sent[-1]["content"]] == ["tu_a", "tu_b"]


def test_arguments_that_are_not_json_go_back_as_an_observation(providers, alice):
    providers.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([("c1", "calculator", '{"expression": 12*7}')]))
    providers.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([("c2", "calculator", {"expression": "12*7"})]))
    providers.add("POST", OPENAI_PATH, json=llm.openai_text("84"))
    run = start(alice, "openai")

    assert (run.stop_reason, run.output) == ("final_answer", "84")
    first = steps(run)[1]
    assert first["is_error"] is True and "were not a JSON object: they are not valid JSON" in first["output"]
    sent = providers.requests[1].json()["messages"]
    assert sent[-2]["tool_calls"][0]["function"]["arguments"] == '{"expression": 12*7}'  # as the model wrote it
    assert "not a JSON object" in sent[-1]["content"]


def test_an_unknown_tool_is_told_the_closest_name(providers, alice):
    providers.add("POST", OPENAI_PATH, json=llm.openai_tool_calls([("c1", "calculater", {"expression": "1+1"})]))
    providers.add("POST", OPENAI_PATH, json=llm.openai_text("2"))
    run = start(alice, "openai")

    assert (
        steps(run)[1]["output"] == "Unknown tool 'calculater'. Did you mean 'calculator'? Available tools: calculator."
    )
    assert run.stop_reason == "final_answer"


def test_an_empty_openai_reply_is_corrected_not_a_model_error(providers, alice):
    providers.add("POST", OPENAI_PATH, json=llm.openai_message({"content": None}))
    providers.add("POST", OPENAI_PATH, json=llm.openai_text("84"))
    run = start(alice, "openai")

    assert (run.stop_reason, run.output, run.turns) == ("final_answer", "84", 2)
    assert [s["kind"] for s in steps(run)] == ["model", "error", "model"]
    assert "empty" in providers.requests[-1].json()["messages"][-1]["content"]


def test_an_openai_refusal_ends_the_run_as_refused(providers, alice):
    providers.add(
        "POST", OPENAI_PATH, json=llm.openai_message({"content": None, "refusal": "I can't assist with that."})
    )
    run = start(alice, "openai")

    assert (run.status, run.stop_reason, run.ok, run.output) == ("done", "refused", False, None)
    assert run.error == "I can't assist with that."
    model = run.steps.get(index=0)
    assert representation.step_json(model)["finish"] == "refused"
    assert run.steps.last().data["message"] == "The model refused: I can't assist with that."


def test_an_openai_reply_cut_mid_call_ends_as_output_truncated_and_runs_nothing(providers, alice):
    cut = llm.openai_tool_calls([("c1", "calculator", '{"expression": "12*')])
    cut["choices"][0]["finish_reason"] = "length"
    providers.add("POST", OPENAI_PATH, json=cut)
    run = start(alice, "openai", max_output_tokens=16)

    assert (run.stop_reason, run.ok) == ("output_truncated", False)
    assert "max_output_tokens: 16" in run.error
    assert [s["kind"] for s in steps(run)] == ["model", "error"]


def test_an_openai_reply_stopped_by_the_content_filter_ends_as_content_filtered(providers, alice):
    providers.add("POST", OPENAI_PATH, json=llm.openai_message({"content": ""}, finish="content_filter"))
    run = start(alice, "openai")
    assert (run.stop_reason, run.error) == ("content_filtered", "The provider's content filter stopped the reply.")


@pytest.mark.parametrize(("stop", "reason"), [("max_tokens", "output_truncated"), ("refusal", "refused")])
def test_an_anthropic_stop_reason_ends_the_run_with_its_name(providers, alice, stop, reason):
    blocks = [{"type": "text", "text": "Let me"}, {"type": "tool_use", "id": "tu_1", "name": "calculator", "input": {}}]
    providers.add("POST", ANTHROPIC_PATH, json=llm.anthropic_message(blocks, stop=stop))
    run = start(alice, "anthropic")

    assert (run.stop_reason, run.output) == (reason, None)
    assert [s["kind"] for s in steps(run)] == ["model", "error"]  # the tool_use block never ran


def test_an_anthropic_paused_turn_is_sent_back_and_continued(providers, alice):
    search = {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "12*7"}}
    paused = llm.anthropic_message([{"type": "text", "text": "Searching."}, search], stop="pause_turn")
    providers.add("POST", ANTHROPIC_PATH, json=paused)
    providers.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("84 and 42"))
    run = start(alice, "anthropic")

    assert (run.stop_reason, run.output, run.turns) == ("final_answer", "84 and 42", 2)
    sent = providers.requests[-1].json()["messages"]
    assert sent[-1] == {"role": "assistant", "content": paused["content"]}  # the turn goes on from where it paused


def test_anthropic_thinking_goes_back_unchanged_before_the_tool_use(providers, alice):
    call = {"type": "tool_use", "id": "tu_1", "name": "calculator", "input": {"expression": "12*7"}}
    providers.add("POST", ANTHROPIC_PATH, json=llm.anthropic_message([THINKING, call], stop="tool_use"))
    providers.add("POST", ANTHROPIC_PATH, json=llm.anthropic_text("84"))
    run = start(alice, "anthropic")

    assert (run.stop_reason, run.output) == ("final_answer", "84")
    sent = providers.requests[-1].json()["messages"]
    assert sent[1] == {"role": "assistant", "content": [THINKING, call]}
    assert sent[2]["content"][0]["tool_use_id"] == "tu_1"
    model = run.steps.get(index=0).data
    assert (model["thought"], model["thinking"], model["blocks"]) == (THINKING["thinking"], True, [THINKING, call])
