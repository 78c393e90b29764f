"""The offline demo model: rule-based, no key, but it really drives the loop in both protocols."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings

from agents.engine import parts
from agents.engine import summary as thread_summary
from agents.engine.prompts import DENIED, JUDGE_MARK, REFLECT, RETRY
from agents.engine.types import CallStopped, ModelReply, ModelRequest, StopReason, ToolCall, Usage
from agents.engine.wrapping import unwrap
from agents.providers.base import Provider

_WORDS = [
    (r"\bmultiplied by\b", "*"),
    (r"\bdivided by\b", "/"),
    (r"\bto the power of\b", "**"),
    (r"\bsquared\b", "**2"),
    (r"\bplus\b", "+"),
    (r"\bminus\b", "-"),
    (r"\btimes\b", "*"),
    (r"\bmodulo\b", "%"),
]
_PREFIX = re.compile(r"^\s*(what is|what's|whats|calculate|compute|evaluate|how much is)\s*", re.I)
_FUNCTIONS = re.compile(r"\b(sqrt|sin|cos|tan|log10|log|exp|abs|round|floor|ceil|min|max|pi|tau)\b")
_ARITH = re.compile(r"^[\d\s.+\-*/%^()]+$")
_OP_START = re.compile(r"^\s*(\*\*|[+\-*/%^])")
_SPLIT = re.compile(r",|;|\bthen\b|\band then\b", re.I)
_RECALL = re.compile(r"^\s*what do you (?:remember|know|recall) about\s+(.+?)[?.!\s]*$", re.I | re.S)
_REMEMBER = re.compile(r"^\s*(?:please\s+)?remember(?:\s+that)?\s+(.+?)[.!\s]*$", re.I | re.S)
_SEARCH = re.compile(r"^\s*(?:please\s+)?(?:search|look up)(?:\s+the web)?(?:\s+for)?\s+(.+?)[?.!\s]*$", re.I | re.S)
# "Ask maths: what is 12*7?": hand the task to the agent `maths`, a sub-agent of the run (its tool agent_maths).
_ASK = re.compile(r"^\s*(?:please\s+)?ask\s+(?:the\s+agent\s+)?([A-Za-z0-9_-]+)\s*(?::|to\b)\s*(.+?)\s*$", re.I | re.S)
DENIED_PREFIX = DENIED.split("{")[0]
REFLECT_MARK = REFLECT.split("{")[0]
RETRY_MARK = RETRY.split("{")[0]
_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][+-]?\d+)?$")
_N = r"(?P<n>-?\d+(?:\.\d+)?)"
_IT = r"(?:it|that|this|the result|the answer)"

HELP = (
    "I can't answer that: I am the offline demo model, so I only know a few tricks: arithmetic with the calculator "
    '("What is 12*7, plus 1?"), "remember that …", "what do you remember about …?", "search …" and '
    '"ask <agent>: …" (a sub-agent). '
    "For real answers, configure a provider: set OPENAI_API_KEY (or ANTHROPIC_API_KEY, XAI_API_KEY, HF_TOKEN, "
    "OPENROUTER_API_KEY) and choose it with provider=openai (or anthropic, xai, huggingface, openrouter)."
)


@dataclass(frozen=True)
class _Plan:
    """What to do next: call a tool, or answer."""

    thought: str
    tool: str | None = None
    arguments: dict[str, Any] | None = None
    answer: str | None = None


_FOLLOW_UP = [  # "and add 2", "now divide that by 5", "multiply it by 3", "subtract 4 from that": (pattern, operator)
    (re.compile(rf"^(?:add|plus)\s+{_N}(?:\s+to\s+{_IT})?$", re.I), "+"),
    (re.compile(rf"^(?:subtract|minus|take away)\s+{_N}(?:\s+from\s+{_IT})?$", re.I), "-"),
    (re.compile(rf"^(?:multiply|times)\s+(?:{_IT}\s+)?(?:by\s+)?{_N}$", re.I), "*"),
    (re.compile(rf"^divide\s+(?:{_IT}\s+)?by\s+{_N}$", re.I), "/"),
]
_FOLLOW_UP_LEAD = re.compile(r"^\s*(?:and|then|now|ok|okay|,|\s)*", re.I)


def follow_up(goal: str, history: list[dict[str, Any]]) -> str:
    """In a thread, "and add 2" means: take the last answer and add 2 ("85+2"). Other goals are left as they are."""
    last = history[-1]["content"] if history and history[-1]["role"] == "assistant" else ""
    last = last.removeprefix("Final Answer:").strip()
    if not _NUMBER.match(last):
        return goal
    text = _FOLLOW_UP_LEAD.sub("", goal).strip().rstrip("?.! ")
    for pattern, op in _FOLLOW_UP:
        match = pattern.match(text)
        if match:
            return f"({last}){op}{match.group('n')}"
    return goal


def arithmetic_segments(goal: str) -> list[str] | None:
    """'What is 12*7, plus 1?' -> ['12*7', '+1']; None when the goal is not arithmetic."""
    text = goal.strip().rstrip("?.! ")
    for pattern, op in _WORDS:
        text = re.sub(pattern, op, text, flags=re.I)
    text = _PREFIX.sub("", text)
    parts = [p.strip() for p in _SPLIT.split(text) if p and p.strip()]
    if not parts or not _ARITH.match(_FUNCTIONS.sub("", parts[0])) or not re.search(r"\d", parts[0]):
        return None
    if any(not (_ARITH.match(p) and _OP_START.match(p)) for p in parts[1:]):
        return None
    return [p.replace(" ", "") for p in parts]


class DemoProvider(Provider):
    """Reads the goal and the observations so far from the transcript and plans the next step."""

    name = "demo"
    default_model = "demo-1"
    vision = True  # it cannot see, but it takes images and says what it was given
    documents = True  # it reads a text document's first line and names a PDF (docs/documents.md)

    def complete(self, request: ModelRequest) -> ModelReply:
        if REFLECT_MARK in str(request.messages[-1].get("content", "")):
            text = "I ran out of turns before reaching an answer. I should take fewer, larger steps."
            return replace(ModelReply(text=text), usage=estimated_usage(request, ModelReply(text=text)))
        if str(request.messages[0].get("content", "")).startswith(thread_summary.SUMMARY_MARK):
            text = summarized(parts.text_of(request.messages[-1]["content"]))
            return replace(ModelReply(text=text), usage=estimated_usage(request, ModelReply(text=text)))
        start = 1 + request.history_messages  # after the system prompt and a thread's earlier turns
        question = next((m["content"] for m in request.messages[start:] if m["role"] == "user"), "")
        goal = follow_up(parts.text_of(question).split(RETRY_MARK)[0], request.messages[1:start])
        observations = [o for o in map(_observation, request.messages[start + 1 :]) if o is not None]
        available = {spec.name for spec in request.tools}
        plan = self.plan(goal, observations, available)
        ignored = [
            f"{k}={v}"
            for k, v in (("temperature", request.temperature), ("max_output_tokens", request.max_output_tokens))
            if v is not None
        ]
        if ignored:  # an agent's sampling settings: shown in the trace, since this model cannot use them
            plan = replace(plan, thought=f"{plan.thought} (The demo model ignores {', '.join(ignored)}.)")
        given = parts.images(question)
        if given and plan.answer is not None:  # it cannot see them, but it says what it was given
            plan = replace(plan, answer=f"{images_given(given)} {plan.answer}")
        documents = parts.files(question)
        if documents and plan.answer is not None:  # it names each, and quotes a text document's first line
            plan = replace(plan, answer=f"{documents_given(documents)} {plan.answer}")
        reply = _render(plan, request.protocol, len(observations))
        if request.on_text is not None:
            self.write(reply.text, request)
        return replace(reply, usage=estimated_usage(request, reply))

    def write(self, text: str, request: ModelRequest) -> None:
        """A streamed call: the reply word by word, a pause between words (AGENT_DEMO_WORD_PAUSE_S), as a real
        model writes, so the playground and the CLI show it being written; a cancel stops it between words."""
        pause = settings.AGENT_DEMO_WORD_PAUSE_S
        assert request.on_text is not None
        for index, word in enumerate(re.findall(r"\S+\s*|\s+", text)):
            if index and pause > 0:
                time.sleep(pause)
                if request.interrupted is not None and request.interrupted():
                    raise CallStopped(StopReason.CANCELLED)
            request.on_text(word)

    def plan(self, goal: str, observations: list[str], available: set[str]) -> _Plan:
        if goal.startswith(JUDGE_MARK):
            return judged(goal)
        segments = arithmetic_segments(goal)
        if segments is not None:
            return _arithmetic(segments, observations, available)
        for pattern, tool, key in (
            (_RECALL, "recall", "query"),
            (_REMEMBER, "remember", "text"),
            (_SEARCH, "search", "query"),
        ):
            match = pattern.match(goal)
            if match:
                return _single_tool(tool, {key: match.group(1).strip()}, observations, available)
        ask = _ASK.match(goal)
        if ask:
            return _single_tool(f"agent_{ask.group(1)}", {"input": ask.group(2)}, observations, available)
        return _Plan(thought="This is not something the demo model can do.", answer=HELP)


_QUOTED = re.compile(r'"([^"]+)"|\u201c([^\u201d]+)\u201d')
_SECTION = re.compile(
    r"Rubric:\n(?P<rubric>.*?)\n\nThe task the answer was given:\n.*?\n\nThe answer to grade:\n(?P<answer>.*)"
    r"\n\nReply with only",
    re.S,
)
_STOP = frozenset(
    "the and that this with from answer should must mentions mention says about which their there".split()
)


def judged(prompt: str) -> _Plan:
    """An eval judge's verdict (agents/engine/prompts.py JUDGE), by rule: the share of the rubric's quoted terms (else
    its words of five letters or more) that the answer contains. Honest, offline, and enough to try `judge` checks."""
    match = _SECTION.search(prompt)
    rubric, answer = (match.group("rubric"), match.group("answer")) if match else ("", "")
    terms = [a or b for a, b in _QUOTED.findall(rubric)] or [
        w for w in dict.fromkeys(re.findall(r"[A-Za-z]{5,}", rubric.lower())) if w not in _STOP
    ]
    found = [t for t in terms if t.lower() in answer.lower()]
    score = round(len(found) / len(terms), 2) if terms else 0.0
    missing = [t for t in terms if t not in found]
    reason = (
        "It has "
        + (", ".join(found) or "none of the rubric's terms")
        + (f"; it lacks {', '.join(missing)}." if missing else ".")
    )
    return _Plan(
        thought="I compare the answer with the rubric's terms.", answer=json.dumps({"score": score, "reason": reason})
    )


_SUMMARY_TURN = re.compile(r"Turn \d+\nUser: (?P<input>.*?)\nAssistant: (?P<answer>.*?)(?=\n\nTurn \d+\n|\Z)", re.S)
SUMMARY_HEAD = "Earlier in this conversation:"
SUMMARY_LINE = 160  # characters of each question and answer a demo summary keeps


def summarized(prompt: str) -> str:
    """A thread's summary (agents/engine/summary.py), by rule: the summary so far, then a line per turn sent, what
    the user asked and what the answer was, each cut short. Extending keeps the earlier lines as they were."""
    lines: list[str] = []
    if prompt.startswith(thread_summary.SO_FAR):
        earlier = prompt.removeprefix(thread_summary.SO_FAR).split(f"\n\n{thread_summary.EXTEND}")[0].strip()
        lines = [line for line in earlier.splitlines() if line.strip() and line != SUMMARY_HEAD]
    for match in _SUMMARY_TURN.finditer(prompt):
        asked, answer = (" ".join(match.group(k).split()) for k in ("input", "answer"))
        lines.append(f'- The user asked "{_short(asked)}"; the answer was "{_short(answer)}".')
    return "\n".join([SUMMARY_HEAD, *lines])


def _short(text: str) -> str:
    return text if len(text) <= SUMMARY_LINE else text[: SUMMARY_LINE - 1] + "…"


CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text and JSON
IMAGE_TOKENS = 85  # what a small image costs at real providers (OpenAI's low detail)
PDF_TOKENS = 1500  # about what a page of a PDF costs at real providers (its text and its image)


def estimated_usage(request: ModelRequest, reply: ModelReply) -> Usage:
    """Tokens as a real model would count them, estimated from text length (~4 characters a token): the prompt is
    every message's text and tool calls, the tool specs sent (tools protocol), a text document's text and a fixed
    cost per image and per PDF; the completion is the reply's text, reasoning and tool calls. So usage, quotas and
    the console's chart work offline."""
    prompt = sum(_message_chars(m) for m in request.messages)
    if request.protocol == "tools":
        prompt += sum(len(s.name) + len(s.description) + len(json.dumps(s.parameters)) for s in request.tools)
    images = sum(len(parts.images(m.get("content"))) for m in request.messages)
    documents = [d for m in request.messages for d in parts.files(m.get("content"))]
    prompt += sum(len(parts.document_text(d) or "") for d in documents)  # a text document: its text
    pdfs = sum(1 for d in documents if parts.document_text(d) is None)
    calls = sum(len(c.name) + len(json.dumps(c.arguments)) for c in reply.tool_calls)
    completion = len(reply.text) + len(reply.reasoning or "") + calls
    fixed = images * IMAGE_TOKENS + pdfs * PDF_TOKENS
    return Usage(prompt_tokens=_tokens(prompt) + fixed, completion_tokens=_tokens(completion))


def _message_chars(message: dict[str, Any]) -> int:
    calls = message.get("tool_calls") or []
    return len(parts.text_of(message.get("content"))) + sum(len(json.dumps(c, default=str)) for c in calls)


def _tokens(chars: int) -> int:
    return max(1, -(-chars // CHARS_PER_TOKEN))  # rounded up; a reply is never free


def images_given(images: list[dict[str, Any]]) -> str:
    """'I was given 1 image (image/png, 1.2 KB).': what each image is (base64: its type and size; a URL: its host)."""
    described = "; ".join(_described(i) for i in images)
    return f"I was given {len(images)} image{'s' if len(images) != 1 else ''} ({described})."


def documents_given(documents: list[dict[str, Any]]) -> str:
    """'I was given 1 document (notes.txt, text/plain, 24 bytes, which begins "What is 12*7?").': each document's
    name, type and size, and a text document's first line (what a demo can read of it)."""
    described = "; ".join(_document(d) for d in documents)
    return f"I was given {len(documents)} document{'s' if len(documents) != 1 else ''} ({described})."


FIRST_LINE_CHARS = 60


def _document(document: dict[str, Any]) -> str:
    head = f"{document.get('name') or 'unnamed'}, {document.get('media_type')}, {_size(document)}"
    text = parts.document_text(document)
    if text is None:
        return head
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if len(line) > FIRST_LINE_CHARS:
        line = line[: FIRST_LINE_CHARS - 1].rstrip() + "…"
    return f'{head}, which begins "{line}"' if line else head


def _described(image: dict[str, Any]) -> str:
    if image.get("url"):
        return f"a link to {urlsplit(str(image['url'])).hostname}"
    return f"{image.get('media_type')}, {_size(image)}"


def _size(part: dict[str, Any]) -> str:
    """A base64 part's size once decoded, as people read it ("26 bytes", "1.2 KB")."""
    size = parts.decoded_size(str(part.get("data") or ""))
    if size < 1024:
        return f"{size} bytes"
    return f"{size / 1024:.1f} KB" if size < 1024**2 else f"{size / 1024**2:.1f} MB"


def _observation(message: dict[str, Any]) -> str | None:
    if message["role"] == "tool":
        return unwrap(message["content"])
    content = message["content"]
    if message["role"] == "user" and isinstance(content, str) and content.startswith("Observation:"):
        return unwrap(content[len("Observation:") :])
    return None


def _arithmetic(segments: list[str], observations: list[str], available: set[str]) -> _Plan:
    if "calculator" not in available:
        return _Plan(
            thought="I need the calculator, but it is not enabled.",
            answer="The calculator tool is not enabled for this run.",
        )
    done = len(observations)
    if done and not _NUMBER.match(observations[-1].strip()):
        return _Plan(thought="The calculator reported a problem.", answer=f"I could not compute it: {observations[-1]}")
    if done == len(segments):
        return _Plan(thought="I now know the final answer.", answer=observations[-1].strip())
    expression = segments[0] if done == 0 else f"{observations[-1].strip()}{segments[done]}"
    return _Plan(thought=f"I need to compute {expression}.", tool="calculator", arguments={"expression": expression})


def _single_tool(tool: str, arguments: dict[str, Any], observations: list[str], available: set[str]) -> _Plan:
    if tool not in available:
        return _Plan(
            thought=f"I would use {tool}, but it is not enabled.",
            answer=f"The {tool} tool is not enabled for this run.",
        )
    if not observations:
        return _Plan(thought=f"I will use the {tool} tool.", tool=tool, arguments=arguments)
    if observations[-1].startswith(DENIED_PREFIX):
        return _Plan(
            thought="A reviewer denied the call.",
            answer=f"I could not use the {tool} tool: a reviewer denied the call.",
        )
    return _Plan(thought="I have the tool's answer.", answer=observations[-1].strip())


def _render(plan: _Plan, protocol: str, step: int) -> ModelReply:
    if plan.answer is not None:
        if protocol == "react":
            return ModelReply(text=f"Thought: {plan.thought}\nFinal Answer: {plan.answer}")
        return ModelReply(text=plan.answer, reasoning=plan.thought)
    arguments = plan.arguments or {}
    if protocol == "react":
        text = f"Thought: {plan.thought}\nAction: {plan.tool}\nAction Input: {json.dumps(arguments)}"
        return ModelReply(text=text)
    return ModelReply(tool_calls=(ToolCall(f"demo_{step}", plan.tool or "", arguments),), reasoning=plan.thought)
