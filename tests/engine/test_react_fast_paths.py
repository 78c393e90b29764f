"""The react parser's fast path gives exactly what the general line-by-line scan gives."""

from __future__ import annotations

import re
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.engine import react
from agents.engine.react import has_final_answer, parse, strip_think

# --- the reference: the general line-by-line scan alone, the fast path switched off -------------------------------

_NEVER = re.compile(r"(?!)")


def reference_parse(raw: str) -> tuple[str | None, ...]:
    """(thought, final_answer, action, action_input, error, think) as the general scan gives them."""
    with mock.patch.object(react, "_USUAL_SHAPE", _NEVER):
        parsed = parse(raw)
    return (parsed.thought, parsed.final_answer, parsed.action, parsed.action_input, parsed.error, parsed.think)


def assert_same_as_reference(raw: str) -> None:
    parsed = parse(raw)
    got = (parsed.thought, parsed.final_answer, parsed.action, parsed.action_input, parsed.error, parsed.think)
    assert got == reference_parse(raw), raw
    text = strip_think(raw)[0]
    assert has_final_answer(text) == (react.scan(text)[1] is not None), raw


def test_the_reference_is_the_general_scan() -> None:
    """The fast path is what is switched off: a reply in the usual shape takes it, and the reference does not."""
    calls = []
    real = react.scan
    with mock.patch.object(react, "scan", lambda text: calls.append(text) or real(text)):
        parse(ACTION)
        assert calls == []
        reference_parse(ACTION)
        assert calls == [ACTION]


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
    "Thought: a\n**Final Answer:** b",
    "Thought: a\n**Action:** calculator\n**Action Input:** 1",
    "Thought: a\nAction: calculator\nAction Input: ```json",
    'Thought: a\nAction: calculator\nAction Input: ```{"expression": "1"}```',
    "Thought: a\nAction: calculator (does sums)\nAction Input: 1",
    "Thought: a\nAction: calculator.\nAction Input: 1",
    "Thought: a\nFinal Answer: ```\ncode\n```",
    "Thought: a\nAction: calculator\nAction Input: ~~~",
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
VALUES = [
    "",
    " ",
    " x",
    " calculator",
    ' {"expression": "12*7"}',
    " 85",
    "  spaced  ",
    " a: b",
    " `calc`",
    "\r",
    " *",
    " ```json",
    " calc (sums)",
    " calc.",
]


@st.composite
def lines(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        return draw(
            st.sampled_from(
                ["", "free text", "  indented text", "x: y", "**", "<think>t</think>", "</think>", "```", "```json"]
            )
        )
    indent = draw(st.sampled_from(["", "", " ", "\t", "  "]))
    bold_open, bold_close = draw(
        st.sampled_from([("", ""), ("", ""), ("**", "**"), ("**", ""), ("", "**"), ("*", "*"), ("__", "__")])
    )
    colon = draw(st.sampled_from([":", ":", " :", "", ":**", ":*"]))
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
@given(st.text(alphabet="TtAaFfOoIi hgucnsrwe:\n\r\t*<>/k`_~{}", max_size=120))
def test_property_arbitrary_text_parses_as_the_reference_does(raw: str) -> None:
    assert_same_as_reference(raw)
