"""The react text protocol reads what real chat models write: emphasis on keywords, code fences, described tool
names. The line-anchored guarantee holds throughout: a keyword in the middle of a line is never an action."""

from __future__ import annotations

import pytest

from agents.engine import advance
from agents.engine.react import action_arguments, parse, resolve_name, tool_name, transcript_text
from agents.providers.fake import ScriptedModel, text
from tests.engine.conftest import echo_tool, kinds, new_state, run_until_stopped, toolset

QUERY = '{"query": "x"}'

# --- emphasis around keywords ---------------------------------------------------------------------------------

EMPHASIS = ["**{}:**", "**{}**:", "*{}:*", "*{}*:", "__{}:__", "__{}__:", "_{}:_", "***{}:***", "{}:"]


@pytest.mark.parametrize("shape", EMPHASIS)
def test_a_final_answer_with_emphasis_on_its_keyword_is_the_plain_answer(shape):
    parsed = parse(f"{shape.format('Thought')} done\n{shape.format('Final Answer')} 42")
    assert (parsed.thought, parsed.final_answer) == ("done", "42")


@pytest.mark.parametrize("shape", EMPHASIS)
def test_an_action_with_emphasis_on_its_keywords_sends_the_tool_exactly_its_input(shape):
    reply = f"{shape.format('Thought')} look it up\n{shape.format('Action')} search\n{shape.format('Action Input')} "
    parsed = parse(reply + QUERY)
    assert (parsed.thought, parsed.action, parsed.action_input) == ("look it up", "search", QUERY)
    assert action_arguments(parsed.action_input, None) == {"query": "x"}


def test_emphasis_that_belongs_to_the_value_stays_in_it():
    assert parse("Final Answer: **42**").final_answer == "**42**"
    assert parse("Final Answer: *very* sure").final_answer == "*very* sure"
    assert parse("**Final Answer:** the **bold** part").final_answer == "the **bold** part"


def test_an_emphasised_keyword_in_the_middle_of_a_line_is_not_an_action():
    for reply in (
        "Thought: the user wrote **Action:** delete_everything, which I must not do.",
        "I could reply with *Final Answer:* 3 but I am not sure.",
    ):
        parsed = parse(reply)
        assert parsed.action is None and parsed.final_answer is None, reply
        assert "middle of a line" in (parsed.error or ""), reply


# --- a reply inside one code fence ----------------------------------------------------------------------------

ACTION_LINES = f"Thought: look it up\nAction: search\nAction Input: {QUERY}"


@pytest.mark.parametrize("opener", ["```", "```text", "```markdown", "~~~", "````"])
def test_a_reply_wrapped_in_one_fence_is_read_inside_it(opener):
    closer = opener.rstrip("abcdefghijklmnopqrstuvwxyz")
    parsed = parse(f"{opener}\n{ACTION_LINES}\n{closer}\n")
    assert (parsed.action, parsed.action_input) == ("search", QUERY)
    assert action_arguments(parsed.action_input, None) == {"query": "x"}
    assert parse(f"{opener}\nThought: done\nFinal Answer: 42\n{closer}").final_answer == "42"


def test_a_fence_closing_after_a_preamble_does_not_reach_the_input():
    parsed = parse(f"Here is my next step:\n```\n{ACTION_LINES}\n```")
    assert parsed.action_input == QUERY


def test_a_wrapped_reply_whose_input_is_itself_fenced():
    parsed = parse(f"```\nThought: t\nAction: search\nAction Input: ```json\n{QUERY}\n```\n```")
    assert (parsed.action, parsed.action_input) == ("search", QUERY)
    parsed = parse(f"```\nThought: t\nAction: search\nAction Input:\n```json\n{QUERY}\n```\n```")
    assert (parsed.action, parsed.action_input) == ("search", QUERY)


def test_a_reply_with_two_separate_blocks_is_not_unwrapped():
    reply = "```python\nprint(1)\n```\nThought: shown\nFinal Answer: see\n```\nx = 1\n```"
    assert parse(reply).final_answer == "see\n```\nx = 1\n```"


# --- an Action Input inside a fence ---------------------------------------------------------------------------

TRICKY = "Thought: not mine\nAction: delete_everything\nFinal Answer: nope\nObservation: fake"


@pytest.mark.parametrize(
    "layout",
    [
        "Action Input: ```json\n{body}\n```",
        "Action Input:\n```json\n{body}\n```",
        "Action Input:\n\n```\n{body}\n```",
        "**Action Input:**\n```json\n{body}\n```",
        "Action Input: ~~~\n{body}\n~~~",
    ],
)
def test_a_fenced_input_keeps_its_keyword_like_lines(layout):
    reply = "Thought: write the note\nAction: write_note\n" + layout.format(body=TRICKY)
    parsed = parse(reply)
    assert parsed.final_answer is None  # a Final Answer line inside the input block is the input's
    assert (parsed.action, parsed.action_input) == ("write_note", TRICKY)
    assert action_arguments(
        parsed.action_input, {"required": ["text"], "properties": {"text": {"type": "string"}}}
    ) == {"text": TRICKY}


def test_a_fenced_json_input_with_keyword_lines_in_its_strings_reaches_the_tool_whole():
    body = '{\n  "text": "line one\nAction: not a keyword"\n}'
    parsed = parse(f"Action: write_note\nAction Input:\n```json\n{body}\n```\nObservation: made up")
    assert parsed.action_input == body


def test_what_follows_a_closed_input_block_is_not_part_of_the_input():
    parsed = parse(f"Action: search\nAction Input: ```json\n{QUERY}\n```\nI will wait for the result.")
    assert parsed.action_input == QUERY
    parsed = parse(f"Action: search\nAction Input: ```json\n{QUERY}\n```\nFinal Answer: later")
    assert parsed.final_answer == "later"  # a Final Answer after the block still wins


def test_an_input_block_never_closed_runs_to_the_end():
    assert parse(f"Action: search\nAction Input: ```json\n{QUERY}").action_input == QUERY


def test_an_input_on_one_line_inside_backticks():
    parsed = parse(f"Action: search\nAction Input: ```{QUERY}```")
    assert action_arguments(parsed.action_input, None) == {"query": "x"}


def test_a_json_object_followed_by_prose_is_the_object():
    assert action_arguments(f"{QUERY}\nNow I wait for the observation.", None) == {"query": "x"}
    assert action_arguments(f"{QUERY}   ", None) == {"query": "x"}
    assert action_arguments(f"{QUERY} and more", None) == {"input": f"{QUERY} and more"}  # not on its own line


# --- tool names -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "written",
    [
        "add",
        "add (add two numbers)",
        "add(a, b)",
        "add - add two numbers",
        "add -- adds",
        "add \u2013 adds",
        "add\u2014adds",
        "add: adds two numbers",
        "`add`",
        "`add` (adds)",
        "**add**",
        '"add"',
        "'add'",
        "[add]",
        "add.",
        "add,",
        "add!",
        "`add`.",
    ],
)
def test_a_tool_name_is_read_without_its_description_or_punctuation(written):
    assert tool_name(written) == "add"
    assert parse(f"Thought: sum\nAction: {written}\nAction Input: {{}}").action == "add"


def test_names_with_dashes_and_underscores_are_kept_whole():
    assert tool_name("web-search") == "web-search"
    assert tool_name("web_search (the web)") == "web_search"
    assert tool_name("mcp.files-read") == "mcp.files-read"


def test_a_name_is_resolved_against_the_run_s_tools():
    known = ["calculator", "web_search"]
    assert resolve_name("calculator", known) == "calculator"
    assert resolve_name("Calculator", known) == "calculator"
    assert resolve_name("use the calculator tool", known) == "calculator"
    assert resolve_name("calculator or web_search", known) == "calculator or web_search"  # two: not guessed
    assert resolve_name("nope", known) == "nope"


def test_the_react_paper_s_numbered_steps_and_inline_calls():
    parsed = parse("Thought 1: I need to search Apple Remote.\nAction 1: Search[Apple Remote]\nObservation 1: x")
    assert (parsed.thought, parsed.action, parsed.action_input) == (
        "I need to search Apple Remote.",
        "Search",
        "Apple Remote",
    )
    assert parse("Thought 3: found it\nAction 3: Finish[1,800 to 7,000 ft]").final_answer == "1,800 to 7,000 ft"
    assert parse("Action: Search[NBA]\nAction Input: the league").action_input == "the league"  # a given input wins
    assert parse("Thought: a\nAction 12: calc\nAction Input 12: 1+1").action_input == "1+1"
    assert transcript_text("Action 1: Search[x]\nObservation 1: made up") == "Action 1: Search[x]"


def test_llamaindex_s_answer_line_is_a_final_answer_only_without_an_action():
    reply = "Thought: I can answer without using any more tools.\nAnswer: 5"
    parsed = parse(reply)
    assert (parsed.thought, parsed.final_answer) == ("I can answer without using any more tools.", "5")
    assert parse("**Answer:** 5\nand more").final_answer == "5\nand more"
    acting = parse('Thought: t\nAnswer: not yet\nAction: search\nAction Input: {"q": 1}')
    assert (acting.final_answer, acting.action) == (None, "search")  # an Action wins over an Answer line
    assert parse("Thought: the answer: maybe later").final_answer is None  # mid-line, as ever
    assert parse("Thought: t\nAnswer:   ").error is not None  # an empty one is no answer


def test_a_single_quoted_object_is_read_when_it_holds_no_double_quote():
    assert action_arguments("{'a': 2, 'b': 'three'}", None) == {"a": 2, "b": "three"}
    assert action_arguments("{'q': \"it's\"}", None) == {"input": "{'q': \"it's\"}"}  # mixed quotes: left as text
    assert action_arguments("['a']", None) == {"input": "['a']"}  # not an object


# --- what the model is told when a reply is unusable -----------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("I think a tool would help.", "no line starting with 'Action:' or 'Final Answer:' was found"),
        ("Thought: hm\nAction:\nAction Input: {}", "the 'Action:' line names no tool"),
        ("Thought: hm\nAction Input: {}", "no 'Action:' line naming the tool"),
        ("Thought: I will use Action: search", "'Action:' appears in the middle of a line"),
        ("Thought: maybe Final Answer: 3", "'Final Answer:' appears in the middle of a line"),
    ],
)
def test_an_unusable_reply_is_told_exactly_what_was_wrong_and_the_shape_once(clock, reply, problem):
    tools = toolset(echo_tool())
    model = ScriptedModel([text(reply), text("Final Answer: ok")])
    state, events = run_until_stopped(new_state(tools, protocol="react"), model, tools, clock)

    assert kinds(events)[:2] == ["model", "error"] and problem in events[1]["message"]
    nudge = model.requests[1].messages[-1]["content"]
    assert nudge.startswith("Your last reply could not be used: ") and problem in nudge
    assert "Unusable reply" not in nudge
    assert nudge.count("\nAction Input:") == 1 and nudge.count("\nFinal Answer:") == 1  # the shape, once
    assert state.output == "ok"


# --- whole runs -------------------------------------------------------------------------------------------------


def test_a_run_reads_markdown_replies_and_the_tool_gets_clean_arguments(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel(
        [
            text('```\n**Thought:** echo it\n**Action:** `echo` (repeats text)\n**Action Input:** {"text": "hi"}\n```'),
            text('Thought: again\nAction: echo\nAction Input:\n```json\n{"text": "Final Answer: no"}\n```'),
            text("**Thought:** done\n**Final Answer:** hi"),
        ]
    )
    state, events = run_until_stopped(new_state(tools, protocol="react"), model, tools, clock)

    assert kinds(events) == ["model", "tool", "model", "tool", "model"]
    assert (events[1]["name"], events[1]["arguments"]) == ("echo", {"text": "hi"})
    assert events[3]["arguments"] == {"text": "Final Answer: no"}
    assert (state.stop_reason, state.output) == ("final_answer", "hi")


def test_a_tool_named_in_words_runs_the_one_tool_it_names(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([text('Action: Use the echo tool\nAction Input: {"text": "x"}'), text("Final Answer: x")])
    state, events = advance(new_state(tools, protocol="react"), model, tools, clock)
    assert kinds(events) == ["model", "tool"]
    assert (events[1]["name"], events[1]["is_error"]) == ("echo", False)
