"""The loop's handling of what real APIs answer in the native protocol (issue 33, item 2): each behaviour goes back
to the model as an observation it can act on, or ends the run with a stop reason that names it."""

from __future__ import annotations

import pytest

from agents.engine import ModelReply, Status, ToolCall, Usage, advance
from agents.engine.prompts import CORRECTION_TOOLS
from agents.engine.types import Finish
from agents.providers.fake import ScriptedModel, calls, text
from tests.engine.conftest import echo_tool, kinds, new_state, run_until_stopped, toolset

THINKING = {"type": "thinking", "thinking": "I should echo it.", "signature": "sig-abc123"}
REDACTED = {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"}


def tool_message(request, call_id: str) -> str:
    return next(m["content"] for m in request.messages if m["role"] == "tool" and m["tool_call_id"] == call_id)


# --- observations the model can act on ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "what"),
    [
        (
            '{"text": "a",}',
            "they are not valid JSON (Expecting property name enclosed in double quotes at position 13)",
        ),
        ('["a"]', "they are a JSON array, not an object"),
        ('"a"', "they are a JSON string, not an object"),
    ],
)
def test_arguments_that_are_not_a_json_object_are_an_observation_and_the_tool_does_not_run(clock, raw, what):
    log: list[dict] = []
    tools = toolset(echo_tool(log=log))
    model = ScriptedModel([calls(ToolCall("c1", "echo", {"__raw__": raw})), text("gave up")])

    state, events = run_until_stopped(new_state(tools), model, tools, clock)

    assert log == []
    assert kinds(events) == ["model", "tool", "model"]
    assert events[1]["is_error"] is True
    assert events[1]["output"] == (
        f"The arguments of the call to 'echo' were not a JSON object: {what}. The tool did not run; call it again "
        "with its arguments as one JSON object."
    )
    assert what in tool_message(model.requests[1], "c1")
    assert (state.stop_reason, state.output) == ("final_answer", "gave up")


def test_unusable_arguments_of_a_sensitive_tool_need_no_reviewer(clock):
    tools = toolset(echo_tool(), echo_tool("send", sensitive=True))
    model = ScriptedModel([calls(ToolCall("c1", "send", {"__raw__": "{oops"})), text("done")])

    state, events = advance(new_state(tools), model, tools, clock)

    assert state.status == Status.RUNNING  # no pause for approval: nothing could run
    assert kinds(events) == ["model", "tool"] and "not a JSON object" in events[1]["output"]


def test_an_unknown_tool_is_told_the_closest_names_and_every_tool(clock):
    tools = toolset(echo_tool(), echo_tool("weather"), echo_tool("calendar"))
    model = ScriptedModel([calls(ToolCall("c1", "Wether", {"city": "Oslo"})), text("ok")])

    _, events = advance(new_state(tools), model, tools, clock)

    assert events[1]["is_error"] is True
    assert events[1]["output"] == (
        "Unknown tool 'Wether'. Did you mean 'weather'? Available tools: calendar, echo, weather."
    )


def test_an_unknown_tool_with_nothing_close_lists_the_tools_only(clock):
    tools = toolset(echo_tool())
    _, events = advance(new_state(tools), ScriptedModel([calls(("teleport", {}))]), tools, clock)
    assert events[1]["output"] == "Unknown tool 'teleport'. Available tools: echo."


def test_an_empty_reply_with_thinking_only_is_corrected_and_the_run_goes_on(clock):
    tools = toolset(echo_tool())
    empty = ModelReply(text="", reasoning="Hmm.", blocks=(THINKING,))
    model = ScriptedModel([empty, text("42")])

    state, events = run_until_stopped(new_state(tools), model, tools, clock)

    assert kinds(events) == ["model", "error", "model"]
    assert model.requests[1].messages[-1] == {"role": "user", "content": CORRECTION_TOOLS}
    assert (state.stop_reason, state.output) == ("final_answer", "42")


def test_parallel_calls_all_run_in_order_and_answer_by_id(clock):
    log: list[dict] = []
    tools = toolset(echo_tool(log=log), echo_tool("other"))
    reply = calls(
        ToolCall("a", "echo", {"text": "1"}),
        ToolCall("b", "other", {"text": "2"}),
        ToolCall("c", "echo", {"text": "3"}),
    )
    model = ScriptedModel([reply, text("done")])

    state, events = run_until_stopped(new_state(tools), model, tools, clock)

    assert kinds(events) == ["model", "tool", "tool", "tool", "model"]
    assert log == [{"text": "1"}, {"text": "3"}]
    assert [(m["role"], m.get("tool_call_id")) for m in model.requests[1].messages[-3:]] == [
        ("tool", "a"),
        ("tool", "b"),
        ("tool", "c"),
    ]


# --- replies that end the run --------------------------------------------------------------------------------------


def test_a_refusal_ends_the_run_as_refused_with_its_text_as_the_error(clock):
    log: list[dict] = []
    tools = toolset(echo_tool(log=log))
    refusal = ModelReply(text="I can't help with that.", finish=Finish.REFUSED, usage=Usage(5, 7))
    model = ScriptedModel([refusal])

    state, events = run_until_stopped(new_state(tools), model, tools, clock)

    assert (state.status, state.stop_reason, state.output) == ("done", "refused", None)
    assert state.error == "I can't help with that."
    assert kinds(events) == ["model", "error"]
    assert events[0]["finish"] == "refused" and events[0]["text"] == "I can't help with that."
    assert events[1]["message"] == "The model refused: I can't help with that."
    assert (state.turns, state.completion_tokens) == (1, 7)


def test_a_refusal_without_text_still_names_itself(clock):
    tools = toolset(echo_tool())
    state, _ = run_until_stopped(new_state(tools), ScriptedModel([ModelReply(finish=Finish.REFUSED)]), tools, clock)
    assert (state.stop_reason, state.error) == ("refused", "the model refused to answer")


def test_tool_calls_cut_off_by_the_output_limit_never_run(clock):
    log: list[dict] = []
    tools = toolset(echo_tool(log=log))
    cut = ModelReply(
        tool_calls=(ToolCall("c1", "echo", {"text": "a"}), ToolCall("c2", "echo", {"__raw__": '{"text": "b'})),
        finish=Finish.TRUNCATED,
    )
    state, events = run_until_stopped(new_state(tools, max_output_tokens=64), ScriptedModel([cut]), tools, clock)

    assert log == []
    assert (state.stop_reason, state.output) == ("output_truncated", None)
    assert kinds(events) == ["model", "error"]
    assert events[0]["tool_calls"] == [] and events[0]["finish"] == "output_truncated"
    expected = (
        "The reply was cut off at the output token limit (max_output_tokens: 64); its 2 tool call(s) were cut off "
        "and not run."
    )
    assert state.error == events[1]["message"] == expected


@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_a_text_answer_cut_off_is_not_a_final_answer(clock, protocol):
    tools = toolset(echo_tool())
    cut = ModelReply(text="Final Answer: the first primes are 2, 3 and", finish=Finish.TRUNCATED)
    state, _ = run_until_stopped(new_state(tools, protocol=protocol), ScriptedModel([cut]), tools, clock)

    assert (state.stop_reason, state.output) == ("output_truncated", None)
    assert state.error == "The reply was cut off at the output token limit (the provider's default)."


def test_a_filtered_reply_ends_the_run_as_content_filtered(clock):
    tools = toolset(echo_tool())
    filtered = ModelReply(finish=Finish.FILTERED, tool_calls=(ToolCall("c1", "echo", {"text": "x"}),))
    state, events = run_until_stopped(new_state(tools), ScriptedModel([filtered]), tools, clock)

    assert (state.stop_reason, state.error) == ("content_filtered", "The provider's content filter stopped the reply.")
    assert "tool" not in kinds(events)


# --- a paused turn, thinking -------------------------------------------------------------------------------------


def test_a_paused_turn_goes_back_as_it_is_and_the_model_continues_it(clock):
    tools = toolset(echo_tool())
    server = [{"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {"query": "q"}}]
    paused = ModelReply(text="", finish=Finish.PAUSED, blocks=tuple(server))
    model = ScriptedModel([paused, text("found it")])

    state, events = run_until_stopped(new_state(tools), model, tools, clock)

    assert kinds(events) == ["model", "model"]
    assert events[0]["finish"] == "pause_turn" and events[0]["blocks"] == server
    assert model.requests[1].messages[-1] == {"role": "assistant", "content": "", "tool_calls": [], "blocks": server}
    assert (state.stop_reason, state.output, state.turns) == ("final_answer", "found it", 2)


def test_a_turn_paused_again_and_again_ends_at_max_turns(clock):
    tools = toolset(echo_tool())
    paused = ModelReply(finish=Finish.PAUSED, blocks=({"type": "text", "text": "still searching"},))
    state, events = run_until_stopped(new_state(tools, max_turns=3), ScriptedModel([paused] * 3), tools, clock)

    assert (state.stop_reason, state.turns) == ("max_turns", 3)
    assert kinds(events) == ["model", "model", "model"]


def test_thinking_blocks_are_stored_and_go_back_first_with_the_calls(clock):
    tools = toolset(echo_tool())
    call = {"type": "tool_use", "id": "tu_1", "name": "echo", "input": {"text": "a"}}
    reply = ModelReply(
        tool_calls=(ToolCall("tu_1", "echo", {"text": "a"}),),
        reasoning="I should echo it.",
        blocks=(THINKING, REDACTED, call),
    )
    model = ScriptedModel([reply, text("a")])

    state, events = run_until_stopped(new_state(tools), model, tools, clock)

    step = events[0]
    assert step["blocks"] == [THINKING, REDACTED, call]
    assert (step["thought"], step["thinking"]) == ("I should echo it.", True)
    assistant = model.requests[1].messages[2]
    assert assistant["blocks"][0] == THINKING and assistant["blocks"][0]["signature"] == "sig-abc123"
    assert assistant["tool_calls"] == [{"id": "tu_1", "name": "echo", "arguments": {"text": "a"}}]
    assert state.stop_reason == "final_answer"


def test_an_ordinary_reply_adds_no_field_to_its_step(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([calls(("echo", {"text": "a"}), text="Calling.")])
    _, events = advance(new_state(tools), model, tools, clock)
    assert set(events[0]) == {"index", "kind", "latency_ms", "thought", "text", "tool_calls", "final_answer", "usage"}
