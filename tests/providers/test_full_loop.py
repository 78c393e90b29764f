"""Whole runs through the services with the real SDKs against the stub: both providers × both protocols."""

from __future__ import annotations

import pytest

from agents.models import Run
from agents.runs import drive, submit
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH, OPENAI_PATH

QUESTION = "What is 12*7, plus 1?"
REACT_ACTION = 'Thought: I need {what}.\nAction: calculator\nAction Input: {{"expression": "{expr}"}}'


@pytest.fixture
def providers(settings, stub):
    return llm.point_sdks_at(settings, stub, retries=2)


def script(stub, provider: str, protocol: str) -> str:
    """Three replies: calculator 12*7, calculator 84+1, answer 85 (usage 10+2 per reply). Returns the path."""
    if provider == "openai":
        path, usage = OPENAI_PATH, llm.openai_usage(10, 2)
        if protocol == "tools":
            replies = [
                llm.openai_tool_calls([("c1", "calculator", {"expression": "12*7"})], usage=usage),
                llm.openai_tool_calls([("c2", "calculator", {"expression": "84+1"})], usage=usage),
                llm.openai_text("85", usage),
            ]
        else:
            replies = [llm.openai_text(text, usage) for text in react_texts()]
    else:
        path, usage = ANTHROPIC_PATH, llm.anthropic_usage(10, 2)
        if protocol == "tools":
            replies = [
                llm.anthropic_tool_use([("t1", "calculator", {"expression": "12*7"})], usage=usage),
                llm.anthropic_tool_use([("t2", "calculator", {"expression": "84+1"})], usage=usage),
                llm.anthropic_text("85", usage),
            ]
        else:
            replies = [llm.anthropic_text(text, usage) for text in react_texts()]
    for reply in replies:
        stub.add("POST", path, json=reply)
    return path


def react_texts() -> list[str]:
    return [
        REACT_ACTION.format(what="12*7", expr="12*7"),
        "<think>84 so far; action: none yet</think>\n" + REACT_ACTION.format(what="to add 1", expr="84+1"),
        "Thought: I now know the final answer.\nFinal Answer: 85",
    ]


def start(alice, provider: str, protocol: str) -> Run:
    options = submit.RunOptions(input=QUESTION, provider=provider, protocol=protocol, tools=["calculator"])
    run = submit.start_run(owner=alice, options=options)
    return drive.execute(run_id=run.pk)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_a_run_reaches_the_final_answer(providers, alice, provider, protocol):
    path = script(providers, provider, protocol)
    run = start(alice, provider, protocol)

    assert (run.status, run.stop_reason, run.output, run.turns) == ("done", "final_answer", "85", 3)
    assert (run.prompt_tokens, run.completion_tokens) == (30, 6)  # usage summed over the three replies
    tools = [s.data for s in run.steps.filter(kind="tool").order_by("index")]
    assert [(t["arguments"]["expression"], t["output"]) for t in tools] == [("12*7", "84"), ("84+1", "85")]
    assert providers.count("POST", path) == 3
    last = providers.requests[-1].json()
    wire = str(last["messages"])
    assert "<<<TOOL_OUTPUT_START>>>" in wire and "85" in wire  # observations went back, wrapped
    if protocol == "react":
        assert "tools" not in last
        assert "Observation:" in wire
    else:
        assert last["tools"][0]["name" if provider == "anthropic" else "function"]


def test_react_think_block_is_kept_as_thought_not_parsed(providers, alice):
    script(providers, "openai", "react")
    run = start(alice, "openai", "react")
    second = run.steps.get(index=2).data
    assert second["tool_calls"][0]["arguments"] == {"expression": "84+1"}
    assert second["thought"] == "to add 1" or "to add 1" in second["thought"]


@pytest.mark.parametrize("provider,path", [("openai", OPENAI_PATH), ("anthropic", ANTHROPIC_PATH)])
def test_a_failing_provider_ends_the_run_with_a_safe_model_error(providers, alice, provider, path):
    providers.add("POST", path, status=500, json={"error": {"message": "boom"}}, repeat=True)
    run = start(alice, provider, "tools")

    assert (run.status, run.stop_reason, run.ok, run.output) == ("done", "model_error", False, None)
    assert providers.count("POST", path) == 3  # 1 + AGENT_LLM_MAX_RETRIES
    assert "500" in run.error and "sk-" not in run.error and "Traceback" not in run.error
    assert run.steps.last().kind == "error"


def test_a_reply_slower_than_the_run_budget_stops_the_run_in_bounded_time(providers, alice, settings):
    settings.AGENT_LLM_MAX_RETRIES = 0
    providers.add("POST", OPENAI_PATH, json=llm.openai_text("late"), delay_s=4, repeat=True)
    options = submit.RunOptions(input=QUESTION, provider="openai", timeout_s=1, tools=["calculator"])
    run = drive.execute(run_id=submit.start_run(owner=alice, options=options).pk)

    assert run.stop_reason == "timeout"  # the run's own deadline cut the call: not a provider failure
    assert run.output is None and run.error is None
    assert "deadline reached during the model call" in run.steps.last().data["message"]


@pytest.mark.parametrize("provider,path", [("openai", OPENAI_PATH), ("anthropic", ANTHROPIC_PATH)])
def test_a_model_slower_than_timeout_s_ends_with_timeout_not_model_error(providers, alice, provider, path):
    """timeout_s 1 and a model that takes 1.6 s (issue 10.1), with the default retries."""
    reply = llm.openai_text("late") if provider == "openai" else llm.anthropic_text("late")
    providers.add("POST", path, json=reply, delay_s=1.6, repeat=True)
    options = submit.RunOptions(input=QUESTION, provider=provider, timeout_s=1, tools=["calculator"])
    run = drive.execute(run_id=submit.start_run(owner=alice, options=options).pk)

    assert (run.status, run.stop_reason, run.ok, run.error) == ("done", "timeout", False, None)
    assert providers.count("POST", path) == 1  # no retry can fit after the deadline


@pytest.mark.parametrize("provider,path", [("openai", OPENAI_PATH), ("anthropic", ANTHROPIC_PATH)])
def test_a_provider_timeout_with_time_left_is_a_model_error(providers, alice, settings, provider, path):
    settings.AGENT_LLM_TIMEOUT_S = 0.3
    settings.AGENT_LLM_MAX_RETRIES = 0
    reply = llm.openai_text("late") if provider == "openai" else llm.anthropic_text("late")
    providers.add("POST", path, json=reply, delay_s=1.5, repeat=True)
    options = submit.RunOptions(input=QUESTION, provider=provider, timeout_s=30, tools=["calculator"])
    run = drive.execute(run_id=submit.start_run(owner=alice, options=options).pk)

    assert (run.stop_reason, run.ok) == ("model_error", False)
    assert "timed out" in run.error
