"""Sensitive tools pause the run for a human decision; approval (maybe with edits) or denial goes on from there."""

from __future__ import annotations

import pytest

from agents.engine import EngineError, ToolCall, advance, decide, pending_action, pending_calls
from agents.providers.fake import ScriptedModel, calls, text
from tests.engine.conftest import echo_tool, kinds, new_state, run_until_stopped, toolset


@pytest.fixture
def log() -> list[dict]:
    return []


@pytest.fixture
def gated(log):
    """A toolset with `echo` (free) and `send` (sensitive), and a state where `send` needs approval."""
    tools = toolset(echo_tool(log=log), echo_tool("send", log=log))
    return tools, new_state(tools, sensitive_tools=["send"])


def test_the_run_pauses_before_a_sensitive_call(clock, log, gated):
    tools, state = gated
    model = ScriptedModel([calls(ToolCall("call_9", "send", {"text": "hello"}))])
    state, events = advance(state, model, tools, clock)

    assert state.status == "awaiting_approval"
    assert state.stop_reason is None
    assert kinds(events) == ["model"]
    assert log == []  # the tool did not run
    assert pending_action(state) == {"call_id": "call_9", "tool": "send", "arguments": {"text": "hello"}}
    assert [c.id for c in pending_calls(state)] == ["call_9"]


def test_no_pending_action_while_running(gated):
    _, state = gated
    assert pending_action(state) is None


def test_approval_with_edited_arguments_runs_the_edited_call(clock, log, gated):
    tools, state = gated
    model = ScriptedModel([calls(ToolCall("call_1", "send", {"text": "to everyone"})), text("sent")])
    state, _ = advance(state, model, tools, clock)
    state, events = decide(
        state, tools, clock, approved=True, reviewer="alice", arguments={"text": "to the team"}, reason="narrowed"
    )

    assert kinds(events) == ["approval", "tool"]
    assert {k: v for k, v in events[0].items() if k not in ("index", "latency_ms")} == {
        "kind": "approval",
        "call_id": "call_1",
        "name": "send",
        "original_arguments": {"text": "to everyone"},
        "arguments": {"text": "to the team"},
        "approved": True,
        "reviewer": "alice",
        "reason": "narrowed",
    }
    assert (events[1]["call_id"], events[1]["arguments"], events[1]["output"]) == (
        "call_1",
        {"text": "to the team"},
        "send:to the team",
    )
    assert log == [{"text": "to the team"}]
    assert state.status == "running" and pending_action(state) is None

    state, _ = advance(state, model, tools, clock)
    assert state.output == "sent"
    assert model.requests[1].messages[-1]["content"].count("send:to the team") == 1


def test_approval_without_arguments_runs_the_original_call(clock, log, gated):
    tools, state = gated
    state, _ = advance(state, ScriptedModel([calls(("send", {"text": "as asked"}))]), tools, clock)
    state, events = decide(state, tools, clock, approved=True, reviewer="bob")
    assert events[0]["arguments"] == events[0]["original_arguments"] == {"text": "as asked"}
    assert events[0]["reason"] is None
    assert log == [{"text": "as asked"}]


def test_edited_arguments_are_still_validated(clock, log, gated):
    tools, state = gated
    state, _ = advance(state, ScriptedModel([calls(("send", {"text": "ok"}))]), tools, clock)
    state, events = decide(state, tools, clock, approved=True, reviewer="bob", arguments={"text": 1})
    assert events[1]["is_error"] is True
    assert "Invalid arguments" in events[1]["output"]
    assert log == []


def test_denial_skips_the_tool_tells_the_model_and_goes_on(clock, log, gated):
    tools, state = gated
    model = ScriptedModel([calls(ToolCall("call_2", "send", {"text": "x"})), text("understood")])
    state, _ = advance(state, model, tools, clock)
    state, events = decide(
        state, tools, clock, approved=False, reviewer="carol", arguments={"text": "ignored"}, reason="not allowed"
    )

    assert kinds(events) == ["approval"]
    assert events[0]["approved"] is False
    assert events[0]["arguments"] == {"text": "x"}  # a denial runs nothing, edits or not
    assert (events[0]["reviewer"], events[0]["reason"]) == ("carol", "not allowed")
    assert log == []
    assert state.status == "running"

    state, events = advance(state, model, tools, clock)
    assert kinds(events) == ["model"]
    assert (state.stop_reason, state.output) == ("final_answer", "understood")
    told = model.requests[1].messages[-1]
    assert (told["role"], told["tool_call_id"], told["name"]) == ("tool", "call_2", "send")
    assert "denied" in told["content"] and "not allowed" in told["content"]
    assert not any(s["kind"] == "tool" for s in state.steps)


def test_a_free_call_runs_before_the_pause_and_the_sensitive_one_after(clock, log, gated):
    tools, state = gated
    model = ScriptedModel(
        [calls(ToolCall("a", "echo", {"text": "first"}), ToolCall("b", "send", {"text": "second"})), text("fin")]
    )
    state, events = advance(state, model, tools, clock)
    assert kinds(events) == ["model", "tool"]
    assert log == [{"text": "first"}]
    assert pending_action(state)["call_id"] == "b"

    state, events = decide(state, tools, clock, approved=True, reviewer="dan")
    assert kinds(events) == ["approval", "tool"]
    assert events[1]["call_id"] == "b"
    assert log == [{"text": "first"}, {"text": "second"}]

    state, _ = advance(state, model, tools, clock)
    assert state.output == "fin"
    assert [m.get("tool_call_id") for m in model.requests[1].messages[3:]] == ["a", "b"]


def test_two_sensitive_calls_pause_twice(clock, log, gated):
    tools, state = gated
    model = ScriptedModel([calls(ToolCall("a", "send", {"text": "1"}), ToolCall("b", "send", {"text": "2"}))])
    state, _ = advance(state, model, tools, clock)
    assert pending_action(state)["call_id"] == "a"

    state, events = decide(state, tools, clock, approved=False, reviewer="r")
    assert kinds(events) == ["approval"]
    assert state.status == "awaiting_approval"
    assert pending_action(state)["call_id"] == "b"

    state, events = decide(state, tools, clock, approved=True, reviewer="r")
    assert kinds(events) == ["approval", "tool"]
    assert log == [{"text": "2"}]
    assert state.status == "running"


def test_the_last_decided_call_respects_max_turns(clock, gated):
    tools, state = gated
    state.max_turns = 1
    state, _ = advance(state, ScriptedModel([calls(("send", {"text": "x"}))]), tools, clock)
    state, _ = decide(state, tools, clock, approved=True, reviewer="r")
    assert (state.status, state.stop_reason) == ("done", "max_turns")


def test_advance_on_an_awaiting_run_raises(clock, gated):
    tools, state = gated
    state, _ = advance(state, ScriptedModel([calls(("send", {"text": "x"}))]), tools, clock)
    model = ScriptedModel([text("never")])
    with pytest.raises(EngineError, match="awaiting approval"):
        advance(state, model, tools, clock)
    assert model.requests == []


def test_decide_on_a_running_run_raises(clock, gated):
    tools, state = gated
    with pytest.raises(EngineError, match="not awaiting approval"):
        decide(state, tools, clock, approved=True, reviewer="r")


def test_decide_on_a_done_run_raises(clock, gated):
    tools, state = gated
    state, _ = run_until_stopped(state, ScriptedModel([text("bye")]), tools, clock)
    with pytest.raises(EngineError):
        decide(state, tools, clock, approved=True, reviewer="r")


def test_a_tool_marked_sensitive_pauses_even_if_the_run_does_not_list_it(clock, log):
    tools = toolset(echo_tool("send", log=log, sensitive=True))
    state = new_state(tools, sensitive_tools=[])
    state, _ = advance(state, ScriptedModel([calls(("send", {"text": "x"}))]), tools, clock)
    assert state.status == "awaiting_approval"
    assert log == []
