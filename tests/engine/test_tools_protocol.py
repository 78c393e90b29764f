"""The native tool-calling protocol: several calls per reply, tool-result messages, final answer, usage."""

from __future__ import annotations

from agents.engine import ToolCall, Usage, advance
from agents.engine.wrapping import wrap
from agents.providers.fake import ScriptedModel, calls, text
from tests.engine.conftest import echo_tool, kinds, new_state, roles, run_until_stopped, toolset


def test_several_calls_in_one_reply_run_in_order_and_come_back_as_tool_messages(clock):
    log: list[dict] = []
    tools = toolset(echo_tool(log=log))
    model = ScriptedModel(
        [
            calls(ToolCall("id_a", "echo", {"text": "first"}), ToolCall("id_b", "echo", {"text": "second"})),
            text("both done"),
        ]
    )
    state, events = advance(new_state(tools), model, tools, clock)

    assert kinds(events) == ["model", "tool", "tool"]
    assert [(e["call_id"], e["output"], e["is_error"]) for e in events[1:]] == [
        ("id_a", "echo:first", False),
        ("id_b", "echo:second", False),
    ]
    assert log == [{"text": "first"}, {"text": "second"}]

    state, _ = advance(state, model, tools, clock)
    messages = model.requests[1].messages
    assert roles(messages) == ["system", "user", "assistant", "tool", "tool"]
    assert messages[2]["tool_calls"] == [
        {"id": "id_a", "name": "echo", "arguments": {"text": "first"}},
        {"id": "id_b", "name": "echo", "arguments": {"text": "second"}},
    ]
    assert [(m["tool_call_id"], m["name"], m["content"]) for m in messages[3:]] == [
        ("id_a", "echo", wrap("echo:first")),
        ("id_b", "echo", wrap("echo:second")),
    ]


def test_calls_without_ids_get_unique_ones(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([calls(ToolCall("", "echo", {"text": "a"}), ToolCall("", "echo", {"text": "b"}))])
    state, events = advance(new_state(tools), model, tools, clock)
    ids = [c["id"] for c in events[0]["tool_calls"]]
    assert all(ids) and len(set(ids)) == 2
    assert [e["call_id"] for e in events[1:]] == ids


def test_final_answer_stops_the_run_with_its_output(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([calls(("echo", {"text": "x"})), text("  The answer is 42.  ")])
    state, events = run_until_stopped(new_state(tools), model, tools, clock)

    assert (state.status, state.stop_reason, state.output, state.turns) == (
        "done",
        "final_answer",
        "The answer is 42.",
        2,
    )
    assert state.error is None
    assert events[-1]["kind"] == "model"
    assert events[-1]["final_answer"] == "The answer is 42."
    assert events[-1]["tool_calls"] == []


def test_final_answer_prefix_is_removed_in_the_tools_protocol(clock):
    tools = toolset(echo_tool())
    state, _ = run_until_stopped(
        new_state(tools), ScriptedModel([text("Thought: easy\nFinal Answer: 7")]), tools, clock
    )
    assert state.output == "7"


def test_usage_is_summed_over_replies(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel(
        [
            calls(("echo", {"text": "a"}), usage=Usage(10, 3)),
            calls(("echo", {"text": "b"}), usage=Usage(20, 4)),
            text("done", prompt_tokens=30, completion_tokens=5),
        ]
    )
    state, events = run_until_stopped(new_state(tools), model, tools, clock)

    assert (state.prompt_tokens, state.completion_tokens) == (60, 12)
    assert state.usage.total_tokens == 72
    assert [e["usage"] for e in events if e["kind"] == "model"] == [
        {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
        {"prompt_tokens": 20, "completion_tokens": 4, "total_tokens": 24},
        {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35},
    ]


def test_model_step_records_thought_text_and_calls(clock):
    tools = toolset(echo_tool())
    reply = calls(("echo", {"text": "a"}), text="<think>plan it</think>Calling echo.")
    _, events = advance(new_state(tools), ScriptedModel([reply]), tools, clock)
    model_step = events[0]
    assert model_step["thought"] == "plan it"
    assert model_step["text"] == "<think>plan it</think>Calling echo."
    assert model_step["final_answer"] is None
    assert model_step["tool_calls"] == [{"id": "fc_0", "name": "echo", "arguments": {"text": "a"}}]


def test_an_empty_reply_is_an_error_step_and_a_nudge(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([text(""), text("ok")])
    state, events = run_until_stopped(new_state(tools), model, tools, clock)

    assert kinds(events) == ["model", "error", "model"]
    assert (state.stop_reason, state.output, state.turns) == ("final_answer", "ok", 2)
    assert model.requests[1].messages[-1]["role"] == "user"
    assert "empty" in model.requests[1].messages[-1]["content"]


def test_request_carries_the_enabled_tool_specs_and_protocol(clock):
    tools = toolset(echo_tool(), echo_tool("other"))
    model = ScriptedModel([text("hi")])
    advance(new_state(tools, tools=["echo"]), model, tools, clock)
    request = model.requests[0]
    assert [s.name for s in request.tools] == ["echo"]
    assert request.protocol == "tools"
    assert roles(request.messages) == ["system", "user"]
    assert request.messages[1]["content"] == "the task"
