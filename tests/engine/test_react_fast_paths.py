"""The react parser's fast paths give exactly what one multiline regex over the whole reply gives."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.engine.react import has_final_answer, parse, strip_think

# --- the reference: the parser as it was before the fast paths, one MULTILINE regex scan -------------------------

_KEYWORDS = re.compile(
    r"^[ \t]*(?:\*\*)?(?:(?P<thought>thought)|(?P<action_input>action[ \t]+input)|(?P<action>action)"
    r"|(?P<final_answer>final[ \t]+answer)|(?P<observation>observation))(?:\*\*)?[ \t]*:[ \t]*",
    re.MULTILINE | re.IGNORECASE,
)


def _reference_sections(text: str) -> dict[str, tuple[int, int]]:
    sections: dict[str, tuple[int, int]] = {}
    key, value_start = None, 0
    for match in _KEYWORDS.finditer(text):
        if key is not None and key not in sections:
            sections[key] = (value_start, match.start())
        key, value_start = match.lastgroup, match.end()
    if key is not None and key not in sections:
        sections[key] = (value_start, len(text))
    return sections


def reference_parse(raw: str) -> tuple[str | None, ...]:
    """(thought, final_answer, action, action_input, error, think) as the single-regex parser gave them."""
    text, think = strip_think(raw)
    sections = _reference_sections(text)

    def value(key: str) -> str | None:
        span = sections.get(key)
        return text[span[0] : span[1]].strip() if span else None

    thought = value("thought") or think
    if "final_answer" in sections:
        return (thought, text[sections["final_answer"][0] :].strip(), None, None, None, think)
    action = value("action")
    if action:
        name = action.splitlines()[0].strip().strip("`*\"' ")
        return (thought, None, name, value("action_input") or "", None, think)
    return (thought, None, None, None, "no line starting with 'Action:' or 'Final Answer:' was found", think)


def assert_same_as_reference(raw: str) -> None:
    parsed = parse(raw)
    got = (parsed.thought, parsed.final_answer, parsed.action, parsed.action_input, parsed.error, parsed.think)
    assert got == reference_parse(raw), raw
    text = strip_think(raw)[0]
    assert has_final_answer(text) == ("final_answer" in _reference_sections(text)), raw


# --- cases ---------------------------------------------------------------------------------------------------------

ACTION = 'Thought: I need to compute 12*7.\nAction: calculator\nAction Input: {"expression": "12*7"}'
FINAL = "Thought: I now know the final answer.\nFinal Answer: 85"

NEAR_SHAPES = [
    ACTION,
    FINAL,
    ACTION + "\n",
    ACTION + "\nFinal Answer: 84",
    ACTION + "\nObservation: 84",
    ACTION + "\n\nmore",
    FINAL + "\nmore lines\nAction: calculator",
    FINAL + "\nThought: later thought",
    "Thought:\nFinal Answer: 85",
    "Thought:   \nFinal Answer:   ",
    "Thought: a\nFinal Answer:",
    "Thought: a\nAction: \nAction Input: 1+1",
    "Thought: a\nAction: calc\rulator\nAction Input: x",
    "Thought: a\nAction: `calculator`\nAction Input: x",
    "Thought: a\nAction: **calculator**\nAction Input:",
    "Thought: a\r\nAction: calculator\r\nAction Input: 1+1\r",
    "Thought: a\r\nFinal Answer: 1\r\n",
    "Thought: x: y\nAction: a: b\nAction Input: c: d",
    "Thought: a\nAction Input: 1\nAction: calculator",
    "Thought: a\nAction: calculator\nAction Input: 1\nAction Input: 2",
    "Thought: a\nThought: b\nFinal Answer: c",
    "Final Answer: 85",
    "Final Answer: 85\nThought: after",
    "Action: calculator\nAction Input: 1",
    "thought: a\nfinal answer: b",
    "Thought: a\n  Final Answer: b",
    "Thought: a\n**Final Answer**: b",
    "Thought : a\nFinal Answer : b",
    "Thought: a\nFinal  Answer: b",
    "Thought: a\nFinal answer: b",
    "Thought: a\nFinal Answers: b",
    "Thought: a\nActıon: calculator\nActıon Input: 1",  # dotless i: the regex ignores case the Unicode way
    "Thought: a\nAction: calculator\nAction\tInput: 1",
    "<think>Action: x\nAction Input: y</think>\nThought: a\nFinal Answer: b",
    "<think>pondering</think>Thought: \nFinal Answer: b",
    "<think>pondering</think>Thought: a\nAction: calculator\nAction Input: 1",
    "reasoning</think>Thought: a\nAction: calculator\nAction Input: 1",
    "Thought: a\nAction: calculator\nAction Input: 1<think>unterminated",
    "no keywords at all",
    "",
    "\n",
    "Thought",
    "Thought: only",
]


@pytest.mark.parametrize("raw", NEAR_SHAPES, ids=lambda raw: repr(raw)[:40])
def test_near_shapes_parse_as_the_reference_does(raw: str) -> None:
    assert_same_as_reference(raw)


def test_a_long_multi_line_reply_parses_as_the_reference_does() -> None:
    body = "\n".join(f"line {i}: some words, Action: not at line start" for i in range(200))
    for raw in (
        f"Thought: long\n{body}\nFinal Answer: {body}",
        f"Thought: {body}\nAction: calculator\nAction Input: 1",
    ):
        assert_same_as_reference(raw)


KEYWORDS = [
    "Thought",
    "thought",
    "THOUGHT",
    "Thoughts",
    "Action",
    "action",
    "Actions",
    "Action Input",
    "action input",
    "Action  Input",
    "Action\tInput",
    "ActionInput",
    "Final Answer",
    "final answer",
    "FINAL ANSWER",
    "Final  Answer",
    "Observation",
    "Actıon",
]
VALUES = ["", " ", " x", " calculator", ' {"expression": "12*7"}', " 85", "  spaced  ", " a: b", " `calc`", "\r", " *"]


@st.composite
def lines(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return draw(st.sampled_from(["", "free text", "  indented text", "x: y", "**", "<think>t</think>", "</think>"]))
    indent = draw(st.sampled_from(["", "", " ", "\t", "  "]))
    bold_open, bold_close = draw(st.sampled_from([("", ""), ("", ""), ("**", "**"), ("**", ""), ("", "**")]))
    colon = draw(st.sampled_from([":", ":", " :", ""]))
    return f"{indent}{bold_open}{draw(st.sampled_from(KEYWORDS))}{bold_close}{colon}{draw(st.sampled_from(VALUES))}"


REPLIES = st.tuples(
    st.sampled_from(["", "", "<think>Action: hidden</think>", "hidden</think>"]),
    st.lists(lines(), max_size=7),
    st.sampled_from(["\n", "\n", "\r\n"]),
    st.sampled_from(["", "", "\n", "<think>tail"]),
).map(lambda parts: parts[0] + parts[2].join(parts[1]) + parts[3])


@settings(max_examples=600, deadline=None)
@given(REPLIES)
def test_property_generated_replies_parse_as_the_reference_does(raw: str) -> None:
    assert_same_as_reference(raw)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="TtAaFfOoIi hgucnsrwe:\n\r\t*<>/k", max_size=120))
def test_property_arbitrary_text_parses_as_the_reference_does(raw: str) -> None:
    assert_same_as_reference(raw)
