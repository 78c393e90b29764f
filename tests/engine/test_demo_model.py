"""The offline demo model drives the real loop with the real calculator, in both protocols."""

from __future__ import annotations

import pytest

from agents.engine import advance, decide, pending_action
from agents.providers.demo import DemoProvider
from tests.engine.conftest import kinds, make_tool, new_state, run_until_stopped, toolset

SEARCH_PARAMS = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}


@pytest.fixture
def searched() -> list[str]:
    return []


@pytest.fixture
def search(searched):
    """A stand-in for the web search tool, marked sensitive like the real one."""

    def func(arguments, context):
        searched.append(arguments["query"])
        return f"Top result for {arguments['query']}: it is sunny."

    return make_tool("search", func, SEARCH_PARAMS, sensitive=True)


@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_arithmetic_takes_two_calculator_calls_and_three_turns(clock, calculator, protocol):
    tools = toolset(calculator)
    state = new_state(tools, input="What is 12*7, plus 1?", protocol=protocol)
    state, events = run_until_stopped(state, DemoProvider(), tools, clock)

    assert (state.status, state.stop_reason, state.output, state.turns) == ("done", "final_answer", "85", 3)
    assert kinds(events) == ["model", "tool", "model", "tool", "model"]
    tool_steps = [e for e in events if e["kind"] == "tool"]
    assert [(t["name"], t["arguments"], t["output"], t["is_error"]) for t in tool_steps] == [
        ("calculator", {"expression": "12*7"}, "84", False),
        ("calculator", {"expression": "84+1"}, "85", False),
    ]
    assert events[-1]["final_answer"] == "85"


@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_a_non_arithmetic_question_gets_an_honest_answer(clock, calculator, protocol):
    tools = toolset(calculator)
    state = new_state(tools, input="Who wrote Hamlet?", protocol=protocol)
    state, events = run_until_stopped(state, DemoProvider(), tools, clock)

    assert (state.stop_reason, state.turns) == ("final_answer", 1)
    assert kinds(events) == ["model"]
    assert "offline demo model" in state.output
    assert "configure a provider" in state.output
    assert "OPENAI_API_KEY" in state.output


def test_arithmetic_without_the_calculator_says_so(clock):
    tools = toolset()
    state, _ = run_until_stopped(new_state(tools, input="What is 2+2?"), DemoProvider(), tools, clock)
    assert state.output == "The calculator tool is not enabled for this run."


@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_search_pauses_for_approval_then_answers(clock, search, searched, protocol):
    tools = toolset(search)
    state = new_state(tools, input="search the weather in Oslo", protocol=protocol, sensitive_tools=["search"])
    state, events = run_until_stopped(state, DemoProvider(), tools, clock)

    assert state.status == "awaiting_approval"
    assert kinds(events) == ["model"]
    action = pending_action(state)
    assert (action["tool"], action["arguments"]) == ("search", {"query": "the weather in Oslo"})
    assert searched == []

    state, _ = decide(state, tools, clock, approved=True, reviewer="ops")
    state, _ = advance(state, DemoProvider(), tools, clock)
    assert searched == ["the weather in Oslo"]
    assert (state.stop_reason, state.output) == ("final_answer", "Top result for the weather in Oslo: it is sunny.")


@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_usage_is_estimated_from_text_length(clock, calculator, protocol):
    """~4 characters a token, as real models count: each call's prompt grows with the transcript, so the usage chart
    and quotas can be seen offline."""
    tools = toolset(calculator)
    state = new_state(tools, input="What is 12*7, plus 1?", protocol=protocol)
    state, events = run_until_stopped(state, DemoProvider(), tools, clock)

    usages = [e["usage"] for e in events if e["kind"] == "model"]
    prompts = [u["prompt_tokens"] for u in usages]
    assert all(u["completion_tokens"] > 0 for u in usages)
    assert prompts == sorted(prompts) and prompts[0] < prompts[-1]  # every call sends everything said so far
    assert state.usage.total_tokens == sum(u["total_tokens"] for u in usages)


def test_usage_counts_characters_of_the_prompt_and_the_reply():
    from agents.engine.types import ModelReply, ModelRequest, ToolCall
    from agents.providers.demo import estimated_usage

    request = ModelRequest(messages=[{"role": "user", "content": "x" * 400}], tools=[], protocol="react", timeout_s=5)
    assert estimated_usage(request, ModelReply(text="y" * 41)).as_dict() == {
        "prompt_tokens": 100,
        "completion_tokens": 11,
        "total_tokens": 111,
    }
    call = ToolCall("c1", "calculator", {"expression": "12*7"})  # 10 + 22 characters
    assert estimated_usage(request, ModelReply(tool_calls=(call,))).completion_tokens == 8
    image = {"type": "image", "media_type": "image/png", "data": "AAAA"}
    with_image = ModelRequest(
        messages=[{"role": "user", "content": [{"type": "text", "text": "x" * 40}, image]}],
        tools=[],
        protocol="react",
        timeout_s=5,
    )
    assert estimated_usage(with_image, ModelReply(text="ok")).prompt_tokens == 10 + 85
