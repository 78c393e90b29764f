"""A thread's earlier runs as turns before the new input: bounds and rendering (pure engine, no database)."""

from __future__ import annotations

from agents.engine import RunState
from agents.engine import history as h
from agents.engine.prompts import render_messages
from agents.engine.types import ToolSpec

SPECS = [ToolSpec("calculator", "Evaluate arithmetic.", {"type": "object", "properties": {}})]


def turn(i: int, output: str | None = None, stop_reason: str = "final_answer", size: int = 0) -> dict:
    return {
        "input": f"q{i}" + "x" * size,
        "output": output if output is not None else f"a{i}",
        "stop_reason": stop_reason,
    }


def test_bounded_keeps_the_newest_runs_oldest_first():
    turns = [turn(i) for i in range(5)]
    assert h.bounded(turns, max_runs=3, max_chars=10_000) == turns[2:]
    assert h.bounded(turns, max_runs=0, max_chars=10_000) == []
    assert h.bounded([], max_runs=20, max_chars=10_000) == []


def test_bounded_by_characters_leaves_out_the_oldest_whole_runs():
    turns = [turn(0, size=100), turn(1, size=100), turn(2, size=100)]
    each = h.size(turns[0])
    assert h.bounded(turns, max_runs=20, max_chars=2 * each) == turns[1:]
    assert h.bounded(turns, max_runs=20, max_chars=2 * each - 1) == turns[2:]
    # Even the newest alone is too long: nothing of the past, rather than half a run.
    assert h.bounded(turns, max_runs=20, max_chars=each - 1) == []


def test_a_run_without_a_final_answer_contributes_its_input_and_stop_reason():
    rendered = h.messages([turn(0, output=None, stop_reason="max_turns")], "tools")
    assert rendered[0] == {"role": "user", "content": "q0"}
    assert rendered[1]["role"] == "assistant"
    assert "max_turns" in rendered[1]["content"]
    # A blank answer is never an empty assistant turn (Anthropic refuses empty text blocks).
    blank = h.messages([turn(0, output="  ")], "tools")
    assert blank[1]["content"].strip()


def test_messages_alternate_and_react_answers_read_as_final_answer_lines():
    turns = [turn(0), turn(1, output=None, stop_reason="timeout")]
    tools = h.messages(turns, "tools")
    assert [m["role"] for m in tools] == ["user", "assistant", "user", "assistant"]
    assert tools[1]["content"] == "a0"
    react = h.messages(turns, "react")
    assert react[1]["content"] == "Final Answer: a0"
    assert not react[3]["content"].startswith("Final Answer:")  # no answer: not dressed up as one


def test_render_puts_the_history_between_the_system_prompt_and_the_new_input():
    state = RunState(input="and add 2", history=[turn(0, "85"), turn(1, "17")])
    messages = render_messages(state, SPECS)
    assert messages[0]["role"] == "system"
    assert [m["content"] for m in messages[1:]] == ["q0", "85", "q1", "17", "and add 2"]


def test_a_reflection_attempt_keeps_the_history():
    state = RunState(
        input="and add 2",
        history=[turn(0, "85")],
        steps=[{"index": 0, "kind": "model", "text": "I should retry.", "reflection": True, "tool_calls": []}],
    )
    messages = render_messages(state, SPECS)
    assert [m["content"] for m in messages[1:3]] == ["q0", "85"]
    assert messages[3]["content"].startswith("and add 2")
    assert "I should retry." in messages[3]["content"]


def test_history_survives_the_state_round_trip():
    state = RunState(input="x", history=[turn(0)])
    assert RunState.from_json(state.to_json()).history == [turn(0)]
    assert state.copy().history == [turn(0)]
