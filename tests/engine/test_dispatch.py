"""Failures of a tool call become error observations; failures of the model or the loop do not."""

from __future__ import annotations

import pytest

from agents.engine import ModelError, ModelReply, advance
from agents.providers.fake import ScriptedModel, calls, text
from agents.tools.registry import ToolError
from tests.engine.conftest import echo_tool, kinds, make_tool, new_state, run_until_stopped, toolset


def raising(exc: Exception):
    def func(arguments, context):
        raise exc

    return func


def one_bad_call(clock, tools, call):
    """Run [call, then 'recovered'] and return (final state, the tool step, the model's next request)."""
    model = ScriptedModel([calls(call), text("recovered")])
    state, events = run_until_stopped(new_state(tools), model, tools, clock)
    assert kinds(events) == ["model", "tool", "model"]
    assert (state.stop_reason, state.output) == ("final_answer", "recovered")
    return state, events[1], model.requests[1]


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (("missing", {"text": "x"}), "Unknown tool 'missing'. Available tools: boom, calculator, echo, value."),
        (("echo", {"text": 5}), "Invalid arguments for tool 'echo': text: 5 is not of type 'string'"),
        (("echo", {}), "Invalid arguments for tool 'echo': 'text' is a required property"),
        (("echo", {"text": "a", "extra": 1}), "Additional properties are not allowed"),
        (("calculator", {"expression": "__import__('os')"}), "Tool 'calculator' failed:"),
        (("boom", {}), "Tool 'boom' failed: upstream is down"),
        (("value", {}), "Tool 'value' failed: bad value"),
    ],
    ids=[
        "unknown-tool",
        "wrong-type",
        "missing-required",
        "extra-property",
        "calculator-refuses",
        "tool-error",
        "value-error",
    ],
)
def test_a_failing_call_is_an_error_observation_and_the_loop_goes_on(clock, calculator, call, expected):
    tools = toolset(
        echo_tool(),
        calculator,
        make_tool("boom", raising(ToolError("upstream is down"))),
        make_tool("value", raising(ValueError("bad value"))),
    )
    _, step, next_request = one_bad_call(clock, tools, call)

    assert step["is_error"] is True
    assert expected in step["output"]
    assert step["name"] == call[0] and step["arguments"] == call[1]
    result = next_request.messages[-1]
    assert (result["role"], result["tool_call_id"]) == ("tool", "fc_0")
    assert expected in result["content"]


def test_a_tool_returning_a_non_string_is_stringified(clock):
    tools = toolset(make_tool("num", lambda arguments, context: 42))
    _, step, _ = one_bad_call(clock, tools, ("num", {}))
    assert (step["output"], step["is_error"]) == ("42", False)


def test_the_tool_receives_the_host_context_not_model_arguments(clock):
    seen = []
    tools = toolset(make_tool("who", lambda arguments, context: seen.append(context) or "ok"))
    one_bad_call(clock, tools, ("who", {"user_id": 999}))
    assert [(c.user_id, c.run_id) for c in seen] == [(7, "r1")]


def test_model_error_stops_the_run_with_an_error_step(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([calls(("echo", {"text": "a"})), ModelError("provider unavailable (HTTP 503)")])
    state, events = run_until_stopped(new_state(tools), model, tools, clock)

    assert kinds(events) == ["model", "tool", "error"]
    assert events[-1]["message"] == "provider unavailable (HTTP 503)"
    assert (state.status, state.stop_reason, state.output) == ("done", "model_error", None)
    assert state.error == "provider unavailable (HTTP 503)"
    assert state.turns == 2


def test_a_model_error_without_message_still_explains(clock):
    tools = toolset(echo_tool())
    state, events = advance(new_state(tools), ScriptedModel([ModelError()]), tools, clock)
    assert state.stop_reason == "model_error"
    assert state.error == events[-1]["message"] != ""


class BrokenModel:
    def complete(self, request) -> ModelReply:
        raise RuntimeError("a bug in the provider code")


def test_a_bug_outside_the_tools_is_not_swallowed(clock):
    tools = toolset(echo_tool())
    state = new_state(tools)
    with pytest.raises(RuntimeError, match="a bug in the provider code"):
        advance(state, BrokenModel(), tools, clock)
    assert (state.status, state.steps, state.turns) == ("running", [], 0)
