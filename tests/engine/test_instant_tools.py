"""Instant tools (the calculator): a reply that asks only for them is recorded with their results in one unit, so the
host stores both in one commit; any other tool waits until the host has stored the reply (`reply_only`)."""

from __future__ import annotations

from dataclasses import replace

from agents.engine import Status, ToolCall, advance
from agents.providers.fake import ScriptedModel, calls, text
from tests.engine.conftest import echo_tool, kinds, new_state, toolset


def reply_only(state, model, tools, clock, interrupt=None):
    return advance(state, model, tools, clock, interrupt, reply_only=True)


def test_a_reply_asking_only_for_instant_tools_comes_with_their_results(clock, calculator):
    tools = toolset(calculator)
    model = ScriptedModel([calls(ToolCall("c1", "calculator", {"expression": "12*7"})), text("84")])
    state, events = reply_only(new_state(tools), model, tools, clock)
    assert kinds(events) == ["model", "tool"]
    assert events[1]["output"] == "84" and not events[1]["is_error"]
    assert state.status == Status.RUNNING


def test_a_reply_asking_for_any_other_tool_stops_at_the_reply(clock, calculator):
    log: list[dict] = []
    tools = toolset(calculator, echo_tool(log=log))
    model = ScriptedModel(
        [calls(ToolCall("c1", "calculator", {"expression": "1+1"}), ToolCall("e1", "echo", {"text": "hi"}))]
    )
    state, events = reply_only(new_state(tools), model, tools, clock)
    assert kinds(events) == ["model"] and log == []
    state, events = advance(state, model, tools, clock)  # the rest of the unit, once the host stored the reply
    assert kinds(events) == ["tool", "tool"] and log == [{"text": "hi"}]


def test_an_instant_tool_that_needs_approval_waits_for_it(clock, calculator):
    tools = toolset(calculator)
    model = ScriptedModel([calls(ToolCall("c1", "calculator", {"expression": "2*3"}))])
    state = new_state(tools, sensitive_tools=["calculator"])
    state, events = reply_only(state, model, tools, clock)
    assert kinds(events) == ["model"]
    state, events = advance(state, model, tools, clock)
    assert state.status == Status.AWAITING_APPROVAL and events == []


def test_an_echo_marked_instant_runs_with_its_reply(clock):
    """What makes a tool instant is its flag, not its name."""
    log: list[dict] = []
    tools = toolset(replace(echo_tool(log=log), instant=True))
    model = ScriptedModel([calls(ToolCall("e1", "echo", {"text": "now"}))])
    _, events = reply_only(new_state(tools), model, tools, clock)
    assert kinds(events) == ["model", "tool"] and log == [{"text": "now"}]


def test_no_cancellation_check_is_spent_on_an_instant_call(clock, calculator):
    """The host's check costs a query; before a call of microseconds it buys nothing (the commit finds a cancellation).
    Before the model call and before any other tool it is still asked."""
    asked: list[str] = []

    def interrupt() -> bool:
        asked.append("asked")
        return False

    tools = toolset(calculator, echo_tool())
    model = ScriptedModel(
        [calls(ToolCall("c1", "calculator", {"expression": "1+1"})), calls(ToolCall("e1", "echo", {"text": "x"}))]
    )
    state, _ = reply_only(new_state(tools), model, tools, clock, interrupt)
    assert asked == ["asked"]  # the model call only
    state, _ = reply_only(state, model, tools, clock, interrupt)
    state, _ = advance(state, model, tools, clock, interrupt)
    assert asked == ["asked", "asked", "asked"]  # the second model call, then the echo


def test_a_cancelled_run_calls_nothing_and_runs_nothing(clock, calculator):
    """The check before the model call still stops a cancelled run."""
    tools = toolset(calculator)
    model = ScriptedModel([calls(ToolCall("c1", "calculator", {"expression": "1+1"}))])
    state, events = reply_only(new_state(tools), model, tools, clock, lambda: True)
    assert state.status == Status.DONE and state.stop_reason == "cancelled"
    assert model.requests == [] and "tool" not in kinds(events)
