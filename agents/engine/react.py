"""The Thought / Action / Action Input / Final Answer text protocol, with line-anchored keywords."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN_TAIL = re.compile(r"<think>.*\Z", re.DOTALL | re.IGNORECASE)
# A line-anchored keyword, matched where its line starts: "Action Input" is tried before "Action".
_KEYWORD_BODY = (
    r"[ \t]*(?:\*\*)?(?:(?P<thought>thought)|(?P<action_input>action[ \t]+input)|(?P<action>action)"
    r"|(?P<final_answer>final[ \t]+answer)|(?P<observation>observation))(?:\*\*)?[ \t]*:[ \t]*"
)
_KEYWORD = re.compile(_KEYWORD_BODY, re.IGNORECASE)
# Later lines are found through their "\n", a literal the regex engine scans for fast (unlike a multiline "^").
_NEWLINE_KEYWORD = re.compile(r"\n" + _KEYWORD_BODY, re.IGNORECASE)
# The two shapes most replies take, keywords spelled as usual: a Thought line then either a Final Answer (what
# follows it cannot change the result) or exactly an Action line and an Action Input line. _KEYWORD reads each of
# these lines the same way, so the values are the ones the general scan would find, only found faster.
_USUAL_SHAPE = re.compile(
    r"Thought:([^\n]*)\n(?:Final Answer:(.*)|Action:([^\n]*)\nAction Input:([^\n]*)\Z)", re.DOTALL
)
_OBSERVATION = re.compile(r"^[ \t]*(?:\*\*)?observation(?:\*\*)?[ \t]*:", re.MULTILINE | re.IGNORECASE)
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)


class Parsed(NamedTuple):
    """What a react reply says: a final answer, an action, or neither (error)."""

    thought: str | None
    final_answer: str | None = None
    action: str | None = None
    action_input: str | None = None
    error: str | None = None
    think: str | None = None


def strip_think(text: str) -> tuple[str, str | None]:
    """Remove <think>…</think> blocks (and a dangling `…</think>` prefix); return (text, thoughts)."""
    if ">" not in text or "think>" not in text.lower():  # most replies have no ">": no need to lower them
        return text, None
    thoughts = [m.group(0)[7:-8].strip() for m in _THINK_BLOCK.finditer(text)]
    text = _THINK_BLOCK.sub("", text)
    if "</think>" in text.lower():  # some models omit the opening tag
        head, _, text = text.rpartition("</think>")
        thoughts.append(head.replace("<think>", "").strip())
    text = _THINK_OPEN_TAIL.sub("", text)
    joined = "\n".join(t for t in thoughts if t)
    return text, joined or None


def _fields(text: str) -> tuple[str | None, str | None, str | None, str | None]:
    """(thought, final answer, action, action input), stripped; None for a keyword the text lacks.

    Each is the value of the keyword's first occurrence; the final answer runs to the end of the text.
    """
    if shape := _USUAL_SHAPE.match(text):
        thought, final_answer, action, action_input = shape.groups()
        if final_answer is not None:
            return thought.strip(), final_answer.strip(), None, None
        return thought.strip(), None, action.strip(), action_input.strip()
    sections = _sections(text)

    def value(key: str) -> str | None:
        span = sections.get(key)
        return text[span[0] : span[1]].strip() if span else None

    final = sections.get("final_answer")
    final_answer = text[final[0] :].strip() if final else None
    return value("thought"), final_answer, value("action"), value("action_input")


def _sections(text: str) -> dict[str, tuple[int, int]]:
    """For each keyword's first line-anchored occurrence: (start of its value, start of the next keyword).

    A span may take in or leave out whitespace around the value (the newline before the next keyword, say): values
    are only ever used stripped.
    """
    sections: dict[str, tuple[int, int]] = {}
    key, value_start = None, 0
    for match in _keyword_matches(text):
        if key is not None and key not in sections:
            sections[key] = (value_start, match.start())
        key, value_start = match.lastgroup, match.end()
    if key is not None and key not in sections:
        sections[key] = (value_start, len(text))
    return sections


def _keyword_matches(text: str) -> Iterator[re.Match[str]]:
    """Every line-anchored keyword, in order: the first line's, then those after a newline."""
    first = _KEYWORD.match(text)
    if first:
        yield first
    yield from _NEWLINE_KEYWORD.finditer(text)


def parse(raw: str) -> Parsed:
    """Parse one react reply. Final Answer wins when a reply holds both."""
    text, think = strip_think(raw)
    thought, final_answer, action, action_input = _fields(text)
    thought = thought or think
    if final_answer is not None:
        # Everything after "Final Answer:" is the answer, even if it spans lines.
        return Parsed(thought=thought, final_answer=final_answer, think=think)
    if action:
        name = action.splitlines()[0].strip().strip("`*\"' ")
        return Parsed(thought=thought, action=name, action_input=action_input or "", think=think)
    return Parsed(thought=thought, error="no line starting with 'Action:' or 'Final Answer:' was found", think=think)


def has_final_answer(text: str) -> bool:
    return _fields(text)[1] is not None


def transcript_text(raw: str) -> str:
    """The assistant text to keep in the transcript: stop before a hallucinated Observation."""
    match = _OBSERVATION.search(raw)
    return (raw[: match.start()] if match else raw).rstrip()


def action_arguments(action_input: str, parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """A JSON object if the input parses as one, else the value of the single required string parameter."""
    text = action_input.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if isinstance(value, dict):
        return value
    single = _single_required_string(parameters or {})
    if single is None:
        return {"input": text}
    if isinstance(value, str):
        return {single: value}
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    return {single: text}


def _single_required_string(parameters: Mapping[str, Any]) -> str | None:
    """The name of the schema's only required parameter when it is a string."""
    required = list(parameters.get("required") or [])
    if len(required) != 1:
        return None
    spec = (parameters.get("properties") or {}).get(required[0], {})
    return required[0] if spec.get("type") == "string" else None
