"""A tool whose result comes later (ToolWaits: a sub-agent's child run): the call stays pending and the unit ends
with `state.waiting` naming what it waits for; the next advance calls the tool again, with the same call id, and
goes on with its answer. Pure engine, scripted model."""

from __future__ import annotations

from typing import Any

from agents.engine import Status, ToolCall, ToolWaits, advance, pending_calls
from agents.providers.fake import ScriptedModel, calls, text
from tests.engine.conftest import STRING_PARAM, kinds, make_tool, new_state, toolset


def test_a_tool_that_waits_ends_the_unit_and_its_call_stays_pending(clock):
    seen: list[tuple[str | None, dict[str, Any]]] = []
    ready = {"answer": None}

    def slow(arguments: dict[str, Any], context: Any) -> str:
        seen.append((context.call_id, dict(arguments)))
        if ready["answer"] is None:
            raise ToolWaits("child-1")
        return ready["answer"]

    tools = toolset(make_tool("agent_helper", slow, STRING_PARAM))
    model = ScriptedModel([calls(ToolCall("k1", "agent_helper", {"text": "sum it"})), text("it said 42")])

    state, events = advance(new_state(tools), model, tools, clock)

    assert kinds(events) == ["model"]  # the reply only: no tool step for a call that waits
    assert (state.status, state.waiting) == (Status.RUNNING, "child-1")
    assert [c.id for c in pending_calls(state)] == ["k1"]

    state, events = advance(state, model, tools, clock)  # taken up again, the result still not there
    assert (events, state.waiting) == ([], "child-1")

    ready["answer"] = "42"
    state, events = advance(state, model, tools, clock)

    assert kinds(events) == ["tool"]
    assert (events[0]["call_id"], events[0]["output"], events[0]["is_error"]) == ("k1", "42", False)
    assert (state.status, state.waiting) == (Status.RUNNING, None)
    state, events = advance(state, model, tools, clock)
    assert (kinds(events), state.status, state.output) == (["model"], Status.DONE, "it said 42")
    assert seen == [("k1", {"text": "sum it"})] * 3  # the same call, with its id, each time
    assert len(model.requests) == 2  # no model call while waiting
