"""The Thought / Action / Action Input / Final Answer text protocol, with line-anchored keywords."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_THINK_OPEN_TAIL = re.compile(r"<think>.*\Z", re.DOTALL | re.IGNORECASE)
# Markdown emphasis a chat model puts around a keyword: **Thought:**, *Action:*, __Final Answer:__, **Action**:.
_EMPHASIS = r"(?:\*{1,3}|_{1,2})"
# A line-anchored keyword, matched where its line starts: "Action Input" is tried before "Action". An emphasis
# marker closed after the colon (**Final Answer:** 42) is part of the keyword; one never opened is the value's. A
# step number after the keyword ("Thought 1:", "Action 2:", as the ReAct paper's prompts number them) is ignored.
_KEYWORD_BODY = (
    r"[ \t]*(" + _EMPHASIS + r")?"
    r"(?:(?P<thought>thought)|(?P<action_input>action[ \t]+input)|(?P<action>action)"
    r"|(?P<final_answer>final[ \t]+answer)|(?P<observation>observation))"
    r"(?:[ \t]+\d{1,3})?(" + _EMPHASIS + r")?[ \t]*:(?(1)(?(7)|(?:[ \t]*" + _EMPHASIS + r")?))[ \t]*"
)
_KEYS = ("thought", "action_input", "action", "final_answer", "observation")
_KEYWORD = re.compile(_KEYWORD_BODY, re.IGNORECASE)
_OBSERVATION = re.compile(
    r"^[ \t]*" + _EMPHASIS + r"?observation(?:[ \t]+\d{1,3})?" + _EMPHASIS + r"?[ \t]*:", re.MULTILINE | re.IGNORECASE
)
# The two shapes most replies take, keywords spelled as usual: a Thought line then either a Final Answer (what
# follows it cannot change the result) or exactly an Action line and an Action Input line (not a fence). The general
# scan reads each of these lines the same way, so the values are the ones it would find, only found faster.
_USUAL_SHAPE = re.compile(
    r"Thought:([^\n]*)\n(?:Final Answer:(.*)|Action:([^\n]*)\nAction Input:(?![ \t]*[`~])([^\n]*)\Z)", re.DOTALL
)
# A code fence line: ``` or ~~~ (three or more), an optional language; a bare one (no language) can close a block.
_FENCE_LINE = re.compile(r"[ \t]*(`{3,}|~{3,})[ \t]*([\w+.#-]*)[ \t]*\r?\Z")
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)
# A keyword in the middle of a line (never an action: said in the correction so the model can fix its layout).
# LlamaIndex's prompt ends with "Answer:" rather than "Final Answer:": read as one only in a reply with no Action.
_ANSWER = re.compile(
    r"(?:\A|\n)[ \t]*("
    + _EMPHASIS
    + r")?answer("
    + _EMPHASIS
    + r")?[ \t]*:(?(1)(?(2)|(?:[ \t]*"
    + _EMPHASIS
    + r")?))[ \t]*",
    re.IGNORECASE,
)
_MID_LINE = re.compile(r"\S[^\n]*?\b(action|final answer)\b\**[ \t]*:", re.IGNORECASE)
# Where a tool name's description starts: "add (adds numbers)", "add - adds", "add: adds", "add — adds".
_NAME_END = re.compile(r"\s*[(\[]|\s+[-\u2013\u2014]+\s|\s*[\u2013\u2014]|:\s|:\Z")
# The ReAct paper's inline form: "Action: Search[Apple Remote]", "Action: Finish[the answer]".
_INLINE_CALL = re.compile(r"([\w.-]+)\[(.*)\]", re.DOTALL)
_NAME_TRIM = "`*_\"'[] \t"


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
    return scan(text)


def _key(match: re.Match[str]) -> str:
    return next(k for k in _KEYS if match.group(k) is not None)


def _bare_fence(line: str) -> bool:
    fence = _FENCE_LINE.match(line)
    return fence is not None and not fence.group(2)


def scan(text: str) -> tuple[str | None, str | None, str | None, str | None]:
    """The general reading of a reply, line by line: (thought, final answer, action, action input), stripped.

    A keyword counts only where its line starts. A reply wrapped whole in one code fence is read inside it. An
    Action Input given as a fenced block (on its line or the next) is the block's content: its lines belong to the
    input even when they look like keywords. A value's stray closing fence (a fence opened before the keywords
    began) is dropped.
    """
    text = _unwrap(text)
    values: dict[str, str] = {}
    key, value_start = None, 0
    fence: str | None = None  # the marker that closes the Action Input's fenced block we are in
    fence_start, record = 0, False
    pos, size = 0, len(text)
    while pos <= size:
        end = text.find("\n", pos)
        if end < 0:
            end = size
        line = text[pos:end]
        if fence is not None:
            closing = _FENCE_LINE.match(line)
            if closing and not closing.group(2) and closing.group(1).startswith(fence):
                if record:
                    values["action_input"] = text[fence_start:pos]
                fence, key = None, None  # what follows the block, up to the next keyword, is no one's
        elif (match := _KEYWORD.match(line)) is not None:
            if key is not None and key not in values:
                values[key] = text[value_start:pos]
            key, value_start = _key(match), pos + match.end()
            if key == "final_answer":
                values.setdefault("final_answer", text[value_start:])
                break
            if key == "action_input":
                opener = _FENCE_LINE.match(line, match.end())
                if opener:
                    fence, fence_start, record = opener.group(1), end + 1, "action_input" not in values
        elif key == "action_input" and not text[value_start:pos].strip() and _FENCE_LINE.match(line):
            fence = _FENCE_LINE.match(line).group(1)  # type: ignore[union-attr]
            fence_start, record = end + 1, "action_input" not in values
        pos = end + 1
    if fence is not None and record:  # a block never closed runs to the end, as Markdown reads it
        values["action_input"] = text[min(fence_start, size) :]
        key = None
    if key is not None and key not in values:
        values[key] = text[value_start:]
    return _values(values)


def _values(values: dict[str, str]) -> tuple[str | None, str | None, str | None, str | None]:
    """(thought, final answer, action, action input) as `scan` answers them: stripped, without a stray closing
    fence; None for a keyword the text lacks."""

    def read(name: str) -> str | None:
        found = values.get(name)
        return None if found is None else _drop_stray_closer(found).strip()

    return read("thought"), read("final_answer"), read("action"), read("action_input")


def _unwrap(text: str) -> str:
    """The inside of a reply that is one code fence (```, then the reply, then ```); any other text as it is."""
    stripped = text.strip()
    if not stripped.startswith(("```", "~~~")):
        return text
    lines = stripped.split("\n")
    first = _FENCE_LINE.match(lines[0])
    if len(lines) < 3 or first is None or not _bare_fence(lines[-1]):
        return text
    depth, after_input = 1, False
    for line in lines[1:-1]:
        fence = _FENCE_LINE.match(line)
        if fence is not None:
            if fence.group(2) or after_input:  # a block with a language, or an Action Input's block, opens
                depth += 1
            else:
                depth -= 1
                if depth == 0:  # the first fence closed before the end: the reply is not one block
                    return text
        keyword = _KEYWORD.match(line)
        after_input = keyword is not None and _key(keyword) == "action_input" and not line[keyword.end() :].strip()
        if keyword is not None and _key(keyword) == "action_input" and _FENCE_LINE.match(line, keyword.end()):
            depth += 1
    return "\n".join(lines[1:-1])


def _drop_stray_closer(value: str) -> str:
    """A value whose last line is a bare fence with no opener in the value: without that line."""
    stripped = value.rstrip()
    if "`" not in stripped[-3:] and "~" not in stripped[-3:]:
        return value
    lines = stripped.split("\n")
    fences = sum(1 for line in lines if _FENCE_LINE.match(line))
    if fences % 2 == 1 and _bare_fence(lines[-1]):
        return "\n".join(lines[:-1])
    return value


def tool_name(action: str) -> str:
    """The tool an Action line names: its first line without backticks, emphasis, quotes or brackets around it, a
    description or bracketed input after it ("add (adds two numbers)", "add - adds", "add: adds", "Search[x]") or
    trailing punctuation."""
    name = action.split("\n", 1)[0].strip().strip(_NAME_TRIM)
    cut = _NAME_END.search(name)
    if cut:
        name = name[: cut.start()]
    return name.strip(_NAME_TRIM).rstrip(".,;:!?").strip(_NAME_TRIM)


def resolve_name(name: str, known: Collection[str]) -> str:
    """`name` when it is a known tool; else the one known name it spells in another case, or the one known name
    it holds as a word ("use the search tool"); else `name` unchanged (the caller reports it unknown)."""
    if name in known:
        return name
    folded = {k.lower(): k for k in known}
    if name.lower() in folded:
        return folded[name.lower()]
    words = set(re.findall(r"[\w.-]+", name.lower()))
    held = [k for k in known if k.lower() in words]
    return held[0] if len(held) == 1 else name


def parse(raw: str) -> Parsed:
    """Parse one react reply. Final Answer wins when a reply holds both."""
    text, think = strip_think(raw)
    thought, final_answer, action, action_input = _fields(text)
    thought = thought or think
    if final_answer is not None:
        # Everything after "Final Answer:" is the answer, even if it spans lines.
        return Parsed(thought=thought, final_answer=final_answer, think=think)
    if action:
        inline = _INLINE_CALL.fullmatch(action.split("\n", 1)[0].strip()) if action_input is None else None
        if inline is not None:  # the paper's Search[entity]: the brackets hold the input; Finish[answer] answers
            if inline.group(1).lower() == "finish":
                return Parsed(thought=thought, final_answer=inline.group(2).strip(), think=think)
            action_input = inline.group(2).strip()
        name = tool_name(action)
        if name:
            return Parsed(thought=thought, action=name, action_input=action_input or "", think=think)
        return Parsed(thought=thought, error="the 'Action:' line names no tool", think=think)
    if action is None and action_input is None and (answer := _ANSWER.search(text)) is not None:
        final = _drop_stray_closer(text[answer.end() :]).strip()  # to the end, as a Final Answer runs
        if final:
            before = scan(text[: answer.start()])[0]
            return Parsed(thought=before or think, final_answer=final, think=think)
    return Parsed(thought=thought, error=_missing(text, action is not None, action_input is not None), think=think)


def _missing(text: str, action: bool, action_input: bool) -> str:
    """What a reply with neither a Final Answer nor a named Action lacks, said so the model can fix it."""
    if action:
        return "the 'Action:' line names no tool"
    if action_input:
        return "it has an 'Action Input:' line but no 'Action:' line naming the tool"
    mid = _MID_LINE.search(text)
    if mid is not None:
        keyword = "Final Answer:" if mid.group(1).lower().startswith("final") else "Action:"
        return (
            f"no line starting with 'Action:' or 'Final Answer:' was found ('{keyword}' appears in the middle of a "
            "line; each keyword must start its own line)"
        )
    return "no line starting with 'Action:' or 'Final Answer:' was found"


def has_final_answer(text: str) -> bool:
    return _fields(text)[1] is not None


def transcript_text(raw: str) -> str:
    """The assistant text to keep in the transcript: stop before a hallucinated Observation."""
    match = _OBSERVATION.search(raw)
    return (raw[: match.start()] if match else raw).rstrip()


def unfence(text: str) -> str:
    """The text stripped, and without a code fence around it all (```json … ```), as models wrap JSON."""
    text = text.strip()
    fenced = _FENCE.match(text)
    return fenced.group(1).strip() if fenced else text


def action_arguments(action_input: str, parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """A JSON object if the input parses as one, else the value of the single required string parameter."""
    text = unfence(action_input)
    try:
        value = json.loads(text)
    except ValueError:
        value = _leading_object(text) or _single_quoted_object(text)
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


def _leading_object(text: str) -> dict[str, Any] | None:
    """A JSON object that opens the text and is followed only by lines of prose ("{...}\nI will wait."), or None."""
    if not text.startswith("{"):
        return None
    try:
        value, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    rest = text[end:]
    if not isinstance(value, dict) or (rest.strip() and not rest.lstrip(" \t").startswith(("\n", "\r"))):
        return None
    return value


def _single_quoted_object(text: str) -> dict[str, Any] | None:
    """An object written with single quotes, as models trained on Python often write it ({'a': 2, 'b': 'x'}): read
    as JSON with the quotes swapped, only when it has no double quote (an apostrophe inside a value defeats it)."""
    if not text.startswith("{") or '"' in text or "'" not in text:
        return None
    try:
        value = json.loads(text.replace("'", '"'))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _single_required_string(parameters: Mapping[str, Any]) -> str | None:
    """The name of the schema's only required parameter when it is a string."""
    required = list(parameters.get("required") or [])
    if len(required) != 1:
        return None
    spec = (parameters.get("properties") or {}).get(required[0], {})
    return required[0] if spec.get("type") == "string" else None
