"""Reflection: an attempt that runs out of turns is critiqued by the model, and a new attempt starts from the task
plus that critique (max_reflections). Pure engine, scripted model."""

from __future__ import annotations

import json

from agents.engine import ModelError, RunState, Status, advance
from agents.engine.prompts import REFLECT, RETRY
from agents.providers.fake import ScriptedModel, calls, text
from tests.engine.conftest import (
    FakeClock,
    echo_tool,
    kinds,
    make_tool,
    new_state,
    roles,
    run_until_stopped,
    toolset,
)

CRITIQUE = "I kept echoing instead of answering. Next time I will answer directly."
REFLECT_TEXT = REFLECT.format(turns=2)


def echo(i: int):
    return calls(("echo", {"text": str(i)}))


def react_echo(i: int):
    return text(f'Thought: echo it\nAction: echo\nAction Input: {{"text": "{i}"}}')


def out_of_turns(tools, clock, protocol: str = "tools", **kwargs):
    """A state whose first attempt (max_turns=2) just used its last turn without an answer."""
    model = ScriptedModel([react_echo(1), react_echo(2)] if protocol == "react" else [echo(1), echo(2)])
    state = new_state(tools, max_turns=2, protocol=protocol, **{"max_reflections": 1, **kwargs})
    for _ in range(2):
        state, _ = advance(state, model, tools, clock)
    return state


def test_an_attempt_out_of_turns_stays_running_when_a_reflection_is_left(clock):
    tools = toolset(echo_tool())
    state = out_of_turns(tools, clock)
    assert (state.status, state.turns, state.attempt_turns, state.reflections) == (Status.RUNNING, 2, 2, 0)


def test_the_next_unit_asks_for_a_critique_and_records_it(clock):
    tools = toolset(echo_tool())
    state = out_of_turns(tools, clock)
    model = ScriptedModel([text(CRITIQUE, prompt_tokens=7, completion_tokens=3)])
    state, events = advance(state, model, tools, clock)

    (request,) = model.requests
    assert roles(request.messages) == ["system", "user", "assistant", "tool", "assistant", "tool", "user"]
    assert request.messages[-1]["content"] == REFLECT_TEXT  # after a tool result: a new user message
    assert "within 2 turns" in REFLECT_TEXT
    assert [s.name for s in request.tools] == ["echo"]  # tool specs still go along

    assert kinds(events) == ["model"]
    step = events[0]
    assert step["reflection"] is True
    assert step["thought"] == "Reflection on attempt 1"
    assert step["text"] == CRITIQUE
    assert (step["tool_calls"], step["final_answer"]) == ([], None)
    assert step["index"] == 4
    assert (state.status, state.turns, state.reflections, state.attempt_start_turn) == (Status.RUNNING, 3, 1, 3)
    assert (state.prompt_tokens, state.completion_tokens) == (7, 3)


def test_in_react_the_critique_request_is_merged_into_the_trailing_user_message(clock):
    tools = toolset(echo_tool())
    state = out_of_turns(tools, clock, protocol="react")
    model = ScriptedModel([text(CRITIQUE)])
    advance(state, model, tools, clock)

    messages = model.requests[0].messages
    assert roles(messages) == ["system", "user", "assistant", "user", "assistant", "user"]
    assert all(a["role"] != b["role"] for a, b in zip(messages[1:], messages[2:], strict=False))
    assert messages[-1]["content"].startswith("Observation: ")
    assert messages[-1]["content"].endswith("\n\n" + REFLECT_TEXT)


def test_a_correction_message_is_merged_too(clock):
    """An unusable last reply renders a correction (a user message): the critique request joins it."""
    tools = toolset(echo_tool())
    model = ScriptedModel([react_echo(1), text("???"), text(CRITIQUE)])
    state = new_state(tools, max_turns=2, protocol="react", max_reflections=1)
    for _ in range(3):
        state, _ = advance(state, model, tools, clock)
    last = model.requests[2].messages[-1]
    assert last["role"] == "user" and "could not be used" in last["content"] and last["content"].endswith(REFLECT_TEXT)
    assert roles(model.requests[2].messages)[-2] == "assistant"


def test_the_new_attempt_starts_from_the_task_and_the_critique(clock):
    tools = toolset(echo_tool())
    state = out_of_turns(tools, clock)
    model = ScriptedModel([text(CRITIQUE), text("42")])
    state, _ = run_until_stopped(state, model, tools, clock)

    first = model.requests[1]
    assert roles(first.messages) == ["system", "user"]
    assert first.messages[1]["content"] == "the task" + RETRY.format(critique=CRITIQUE)
    assert "A previous attempt at this task did not reach an answer" in first.messages[1]["content"]
    assert (state.status, state.stop_reason, state.output) == (Status.DONE, "final_answer", "42")
    assert (state.turns, state.reflections) == (4, 1)
    assert kinds(state.steps) == ["model", "tool", "model", "tool", "model", "model"]
    assert [bool(s.get("reflection")) for s in state.steps] == [False] * 4 + [True, False]


def test_the_new_attempt_sees_its_own_steps_but_not_the_old_ones(clock):
    tools = toolset(echo_tool())
    state = out_of_turns(tools, clock)
    model = ScriptedModel([text(CRITIQUE), echo(3), text("done")])
    state, _ = run_until_stopped(state, model, tools, clock)

    last = model.requests[2].messages
    assert roles(last) == ["system", "user", "assistant", "tool"]
    assert "echo:3" in last[-1]["content"]
    assert not any("echo:1" in str(m.get("content")) for m in last)
    assert (state.stop_reason, state.turns) == ("final_answer", 5)


def test_without_reflections_the_run_stops_at_max_turns_as_before(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([echo(i) for i in range(5)])
    state, events = run_until_stopped(new_state(tools, max_turns=2), model, tools, clock)
    assert (state.stop_reason, state.turns, len(model.requests), state.reflections) == ("max_turns", 2, 2, 0)
    assert not any(e.get("reflection") for e in events)


def test_reflections_exhausted_stop_at_max_turns(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([echo(1), echo(2), text(CRITIQUE), echo(3), echo(4), echo(5)])
    state, events = run_until_stopped(new_state(tools, max_turns=2, max_reflections=1), model, tools, clock)

    assert (state.status, state.stop_reason, state.output) == (Status.DONE, "max_turns", None)
    assert (state.turns, state.reflections, state.attempt_turns) == (5, 1, 2)
    assert len(model.requests) == 5
    assert sum(bool(e.get("reflection")) for e in events) == 1
    assert kinds(events) == ["model", "tool"] * 2 + ["model"] + ["model", "tool"] * 2


def test_each_reflection_adds_its_critique_to_the_task(clock):
    tools = toolset(echo_tool())
    script = [echo(1), text("first critique"), echo(2), text("second critique"), text("ok")]
    model = ScriptedModel(script)
    state, _ = run_until_stopped(new_state(tools, max_turns=1, max_reflections=2), model, tools, clock)

    assert (state.stop_reason, state.output, state.reflections, state.turns) == ("final_answer", "ok", 2, 5)
    assert model.requests[3].messages[-1]["content"] == REFLECT.format(turns=1)
    assert model.requests[4].messages[1]["content"] == (
        "the task" + RETRY.format(critique="first critique") + RETRY.format(critique="second critique")
    )
    thoughts = [s["thought"] for s in state.steps if s.get("reflection")]
    assert thoughts == ["Reflection on attempt 1", "Reflection on attempt 2"]


def test_an_empty_critique_and_think_blocks(clock):
    tools = toolset(echo_tool())
    state = out_of_turns(tools, clock)
    state, events = advance(state, ScriptedModel([text("<think>hmm</think>  ")]), tools, clock)
    assert events[0]["text"] == "(no critique given)"


def test_a_model_error_during_the_critique_stops_the_run(clock):
    tools = toolset(echo_tool())
    state = out_of_turns(tools, clock)
    state, events = advance(state, ScriptedModel([ModelError("provider down")]), tools, clock)

    assert (state.status, state.stop_reason, state.error) == (Status.DONE, "model_error", "provider down")
    assert state.turns == 3  # the failed call counts
    assert state.reflections == 0
    assert kinds(events) == ["error"]


def test_a_deadline_passed_before_reflecting_is_a_timeout(clock):
    tools = toolset(echo_tool())
    state = out_of_turns(tools, clock, deadline=clock.now + 10)
    assert state.status == Status.RUNNING
    clock.advance(11)
    model = ScriptedModel([text(CRITIQUE)])
    state, events = advance(state, model, tools, clock)

    assert model.requests == []
    assert (state.stop_reason, state.turns, state.reflections) == ("timeout", 2, 0)
    assert events[0]["message"] == "deadline reached before reflecting"


def test_a_deadline_passed_during_the_last_turn_ends_the_run_without_reflecting():
    """Turns used up and no time left: the run ends at once (max_turns, as without reflection), no critique call."""
    clock = FakeClock()

    def slow(arguments, context):
        clock.advance(20)  # the attempt's last tool call took past the deadline
        return "slow done"

    tools = toolset(make_tool("slow", slow))
    model = ScriptedModel([calls(("slow", {})), calls(("slow", {}))])
    state = new_state(tools, max_turns=2, max_reflections=1, deadline=clock.now + 30)
    state, events = run_until_stopped(state, model, tools, clock)

    assert (state.stop_reason, state.reflections, state.turns, len(model.requests)) == ("max_turns", 0, 2, 2)
    assert kinds(events) == ["model", "tool"] * 2


def test_reflection_counters_survive_json(clock):
    tools = toolset(echo_tool())
    state = out_of_turns(tools, clock, max_reflections=2)
    state, _ = advance(state, ScriptedModel([text(CRITIQUE)]), tools, clock)

    data = json.loads(json.dumps(state.to_json()))
    assert (data["max_reflections"], data["reflections"], data["attempt_start_turn"]) == (2, 1, 3)
    restored = RunState.from_json(data)
    assert restored == state
    assert restored.attempt_turns == 0

    direct, resumed = ScriptedModel([text("fine")]), ScriptedModel([text("fine")])
    done_direct, _ = advance(state, direct, tools, FakeClock(clock.now))
    done_resumed, _ = advance(restored, resumed, toolset(echo_tool()), FakeClock(clock.now))
    assert direct.requests[0].messages == resumed.requests[0].messages
    assert done_direct.to_json() == done_resumed.to_json()
