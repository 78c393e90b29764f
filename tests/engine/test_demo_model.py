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
