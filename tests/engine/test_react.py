"""The react text protocol: the line-anchored parser and whole runs driven by it."""

from __future__ import annotations

import re

from agents.engine import Status, advance, decide
from agents.engine.react import action_arguments, parse, strip_think
from agents.providers.fake import ScriptedModel, text
from tests.engine.conftest import echo_tool, kinds, new_state, roles, run_until_stopped, toolset

CALC_PARAMS = {
    "type": "object",
    "properties": {"expression": {"type": "string"}},
    "required": ["expression"],
}
MID_LINE = (
    "Thought: the ticket says Action: delete_everything, which I must not do.\n"
    "Action: calculator\n"
    'Action Input: {"expression": "2+2"}'
)


def react_reply(action: str, action_input: str, thought: str = "next step") -> str:
    return f"Thought: {thought}\nAction: {action}\nAction Input: {action_input}"


# --- the parser -------------------------------------------------------------------------------------------------


def test_unanchored_pattern_would_misparse_a_mid_line_action():
    naive = re.search(r"Action:\s*(.*)", MID_LINE)
    assert naive is not None and naive.group(1).startswith("delete_everything")  # the bug the anchoring prevents

    parsed = parse(MID_LINE)
    assert parsed.action == "calculator"
    assert parsed.action_input == '{"expression": "2+2"}'
    assert parsed.thought == "the ticket says Action: delete_everything, which I must not do."


def test_a_thought_mentioning_an_action_mid_line_is_not_an_action():
    reply = "Thought: maybe action: foo would help, or Action: bar; I am unsure."
    assert re.search(r"Action:\s*(.*)", reply) is not None  # a naive parser would act here
    parsed = parse(reply)
    assert parsed.action is None and parsed.final_answer is None
    assert parsed.error is not None and "Action:" in parsed.error


def test_keywords_are_line_anchored_but_tolerate_case_indent_and_bold():
    parsed = parse("thought: hm\n  **Action**: calculator\naction input: 1+1")
    assert (parsed.thought, parsed.action, parsed.action_input) == ("hm", "calculator", "1+1")


def test_think_blocks_are_stripped_before_parsing():
    reply = (
        '<think>\nAction: calculator\nAction Input: {"expression": "6*7"}\n</think>\n'
        "Thought: I remember it.\nFinal Answer: 42"
    )
    parsed = parse(reply)
    assert parsed.action is None
    assert parsed.final_answer == "42"
    assert parsed.think == 'Action: calculator\nAction Input: {"expression": "6*7"}'


def test_an_action_only_inside_a_think_block_is_ignored():
    parsed = parse("<think>Action: calculator\nAction Input: 1+1</think>\nThought: still thinking")
    assert parsed.action is None and parsed.final_answer is None and parsed.error


def test_strip_think_handles_several_blocks_and_a_missing_opening_tag():
    assert strip_think("<think>a</think>x<THINK>b</THINK>y") == ("xy", "a\nb")
    assert strip_think("reasoning here</think>Final Answer: 1") == ("Final Answer: 1", "reasoning here")
    assert strip_think("Final Answer: 1<think>unterminated") == ("Final Answer: 1", None)


def test_final_answer_wins_over_an_action():
    parsed = parse(react_reply("calculator", '{"expression": "1+1"}') + "\nFinal Answer: 2")
    assert parsed.final_answer == "2"
    assert parsed.action is None


def test_final_answer_keeps_every_line_after_it():
    assert parse("Thought: ok\nFinal Answer: line one\nline two").final_answer == "line one\nline two"


def test_action_input_as_json_object():
    assert action_arguments('{"expression": "3*3"}', CALC_PARAMS) == {"expression": "3*3"}
    assert action_arguments('```json\n{"expression": "3*3"}\n```', CALC_PARAMS) == {"expression": "3*3"}


def test_action_input_as_plain_text_fills_the_single_required_string():
    assert action_arguments("12*7", CALC_PARAMS) == {"expression": "12*7"}
    assert action_arguments('"12*7"', CALC_PARAMS) == {"expression": "12*7"}
    assert action_arguments("'12*7'", CALC_PARAMS) == {"expression": "12*7"}


def test_action_input_text_without_a_single_required_string_is_kept_as_input():
    two = {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "string"}}, "required": ["a", "b"]}
    assert action_arguments("hello", two) == {"input": "hello"}
    assert action_arguments("hello", None) == {"input": "hello"}


# --- whole runs -------------------------------------------------------------------------------------------------


def test_react_run_with_plain_text_input_uses_the_real_calculator(clock, calculator):
    tools = toolset(calculator)
    model = ScriptedModel([text(react_reply("calculator", "12*7")), text("Thought: done\nFinal Answer: 84")])
    state, events = run_until_stopped(new_state(tools, protocol="react"), model, tools, clock)

    assert kinds(events) == ["model", "tool", "model"]
    assert events[1]["arguments"] == {"expression": "12*7"}
    assert (events[1]["output"], events[1]["is_error"]) == ("84", False)
    assert events[0]["thought"] == "next step"
    assert (state.stop_reason, state.output) == ("final_answer", "84")


def test_observations_go_back_as_user_messages(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([text(react_reply("echo", '{"text": "hi"}')), text("Final Answer: hi")])
    run_until_stopped(new_state(tools, protocol="react"), model, tools, clock)

    messages = model.requests[1].messages
    assert roles(messages) == ["system", "user", "assistant", "user"]
    assert messages[3]["content"].startswith("Observation:")
    assert "echo:hi" in messages[3]["content"]
    assert "tool_calls" not in messages[2]
    assert not any(m["role"] == "tool" for m in messages)


def test_the_system_prompt_lists_the_tools_and_the_format(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([text("Final Answer: x")])
    advance(new_state(tools, protocol="react"), model, tools, clock)
    system = model.requests[0].messages[0]
    assert system["role"] == "system"
    assert "- echo: The echo tool." in system["content"]
    assert "Action Input:" in system["content"] and "Final Answer:" in system["content"]


def test_a_hallucinated_observation_is_cut_from_the_transcript(clock):
    tools = toolset(echo_tool())
    reply = react_reply("echo", '{"text": "hi"}') + "\nObservation: echo:made-up\nFinal Answer: made-up"
    model = ScriptedModel([text(reply), text("Final Answer: real")])
    state, events = run_until_stopped(new_state(tools, protocol="react"), model, tools, clock)

    assert state.output == "made-up"  # Final Answer wins, even here
    assert kinds(events) == ["model"]


def test_an_unparseable_reply_is_an_error_step_a_nudge_and_a_turn(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel(
        [
            text("I think I should maybe use a tool."),
            text(react_reply("echo", '{"text": "x"}')),
            text("Thought: done\nFinal Answer: x"),
        ]
    )
    state, events = advance(new_state(tools, protocol="react"), model, tools, clock)
    assert kinds(events) == ["model", "error"]
    assert events[1]["message"].startswith("Unusable reply:")
    assert (state.status, state.turns) == ("running", 1)

    state, _ = run_until_stopped(state, model, tools, clock)
    nudge = model.requests[1].messages[-1]
    assert nudge["role"] == "user"
    assert nudge["content"].startswith("Your last reply could not be used")
    assert "Final Answer:" in nudge["content"]
    assert (state.stop_reason, state.output, state.turns) == ("final_answer", "x", 3)


def test_an_empty_final_answer_is_unusable(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([text("Thought: hm\nFinal Answer:   "), text("Final Answer: 3")])
    state, events = run_until_stopped(new_state(tools, protocol="react"), model, tools, clock)
    assert kinds(events) == ["model", "error", "model"]
    assert state.output == "3"


def test_roles_alternate_in_every_request_of_a_react_run(clock):
    tools = toolset(echo_tool(), echo_tool("gate"))
    model = ScriptedModel(
        [
            text(react_reply("gate", '{"text": "secret"}')),  # denied
            text("no keywords at all"),  # parse error
            text(react_reply("echo", "plain words")),  # plain-text input
            text(react_reply("nope", "{}")),  # unknown tool
            text("Thought: enough\nFinal Answer: done"),
        ]
    )
    state = new_state(tools, protocol="react", sensitive_tools=["gate"])
    state, _ = run_until_stopped(state, model, tools, clock)
    assert state.status == Status.AWAITING_APPROVAL
    state, events = decide(state, tools, clock, approved=False, reviewer="rev", reason="no secrets")
    assert kinds(events) == ["approval"]
    state, _ = run_until_stopped(state, model, tools, clock)

    assert (state.stop_reason, state.output, state.turns) == ("final_answer", "done", 5)
    assert len(model.requests) == 5
    for request in model.requests:
        sequence = roles(request.messages)
        assert sequence[:2] == ["system", "user"]
        assert all(a != b for a, b in zip(sequence, sequence[1:], strict=False)), sequence
        assert sequence[-1] == "user"

    last = model.requests[-1].messages
    assert roles(last) == ["system"] + ["user", "assistant"] * 4 + ["user"]
    assert "denied" in last[3]["content"] and "no secrets" in last[3]["content"]
    assert last[5]["content"].startswith("Your last reply could not be used")
    assert last[7]["content"].startswith("Observation:") and "echo:plain words" in last[7]["content"]
    assert last[9]["content"].startswith("Observation:") and "Unknown tool 'nope'" in last[9]["content"]
