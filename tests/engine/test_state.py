"""RunState survives JSON, a run continues from it anywhere, and step indexes never have gaps."""

from __future__ import annotations

import json
import math

from agents.engine import RunState, Status, advance, decide
from agents.providers.fake import ScriptedModel, calls, text
from tests.engine.conftest import FakeClock, echo_tool, new_state, run_until_stopped, toolset


def script():
    """A fresh copy of the same conversation: two calls, a garbled reply, one call, the answer."""
    return [
        calls(("echo", {"text": "a"}), ("echo", {"text": "b"}), usage=None),
        text(""),
        calls(("echo", {"text": "c"})),
        text("all done", prompt_tokens=5, completion_tokens=2),
    ]


def through_json(state: RunState) -> RunState:
    return RunState.from_json(json.loads(json.dumps(state.to_json())))


def test_a_run_continued_from_json_ends_like_an_uninterrupted_one():
    tools = toolset(echo_tool())
    reference, _ = run_until_stopped(new_state(tools), ScriptedModel(script()), tools, FakeClock())

    first_model = ScriptedModel(script())
    state, _ = advance(new_state(tools), first_model, tools, FakeClock())
    state, _ = advance(state, first_model, tools, FakeClock())
    assert len(first_model.requests) == 2

    # Another process: new model (remaining replies only), new tools, new clock, state rebuilt from JSON.
    restored = through_json(state)
    fresh_tools = toolset(echo_tool())
    final, _ = run_until_stopped(restored, ScriptedModel(script()[2:]), fresh_tools, FakeClock())

    assert final.status == Status.DONE
    assert (final.stop_reason, final.output, final.turns) == ("final_answer", "all done", 4)
    assert final.to_json() == reference.to_json()


def test_the_model_sees_the_same_transcript_after_a_round_trip():
    tools = toolset(echo_tool())
    direct = ScriptedModel(script())
    run_until_stopped(new_state(tools), direct, tools, FakeClock())

    split_a, split_b = ScriptedModel(script()[:1]), ScriptedModel(script()[1:])
    state, _ = advance(new_state(tools), split_a, tools, FakeClock())
    run_until_stopped(through_json(state), split_b, tools, FakeClock())

    assert [r.messages for r in split_a.requests + split_b.requests] == [r.messages for r in direct.requests]


def test_a_paused_run_is_decided_after_a_round_trip(clock):
    log: list[dict] = []
    tools = toolset(echo_tool(log=log))
    state = new_state(tools, sensitive_tools=["echo"])
    state, _ = advance(state, ScriptedModel([calls(("echo", {"text": "x"}))]), tools, clock)
    assert state.status == Status.AWAITING_APPROVAL

    restored = through_json(state)
    assert restored.status == "awaiting_approval"
    state, events = decide(restored, tools, clock, approved=True, reviewer="ann")
    assert [e["kind"] for e in events] == ["approval", "tool"]
    assert log == [{"text": "x"}]


def test_infinite_deadline_survives_json():
    data = RunState(input="x").to_json()
    assert data["deadline"] is None
    assert json.loads(json.dumps(data))["deadline"] is None
    assert RunState.from_json(json.loads(json.dumps(data))).deadline == math.inf


def test_finite_deadline_and_counters_survive_json():
    state = RunState(input="x", protocol="react", max_turns=3, deadline=1234.5, tools=["a"], sensitive_tools=["a"])
    state.turns, state.prompt_tokens, state.completion_tokens = 2, 11, 4
    restored = through_json(state)
    assert restored == state
    assert (restored.deadline, restored.protocol, restored.usage.total_tokens) == (1234.5, "react", 15)


def test_from_json_does_not_share_lists_with_its_input():
    data = RunState(input="x", tools=["a"]).to_json()
    state = RunState.from_json(data)
    state.tools.append("b")
    state.steps.append({"index": 0})
    assert data["tools"] == ["a"] and data["steps"] == []


def test_advance_does_not_mutate_the_state_it_was_given(clock):
    tools = toolset(echo_tool())
    state = new_state(tools)
    before = state.to_json()
    advance(state, ScriptedModel([calls(("echo", {"text": "a"}))]), tools, clock)
    assert state.to_json() == before


def test_step_indexes_start_at_zero_without_gaps_across_units(clock):
    tools = toolset(echo_tool(), echo_tool("gate"))
    model = ScriptedModel(
        [
            calls(("echo", {"text": "1"}), ("gate", {"text": "2"})),
            text(""),
            calls(("gate", {"text": "3"})),
            text("end"),
        ]
    )
    state = new_state(tools, sensitive_tools=["gate"])
    seen: list[int] = []
    for _ in range(20):
        if state.status == Status.DONE:
            break
        if state.status == Status.AWAITING_APPROVAL:
            approve = len(seen) < 5
            state, events = decide(state, tools, clock, approved=approve, reviewer="r")
        else:
            state, events = advance(state, model, tools, clock)
        assert [e["index"] for e in events] == list(range(len(seen), len(seen) + len(events)))
        seen.extend(e["index"] for e in events)

    assert state.stop_reason == "final_answer"
    assert [s["index"] for s in state.steps] == list(range(len(state.steps))) == seen
    assert [s["kind"] for s in state.steps] == [
        "model", "tool", "approval", "tool",  # unit 1, paused before gate, approved
        "model", "error",  # empty reply
        "model", "approval",  # gate denied
        "model",  # final answer
    ]  # fmt: skip
