"""Threads on the wire: each run of a conversation sends the thread's earlier turns in the provider's native shape.

Both SDK providers × both protocols, driven through the REST API against the stub. The stub's model answers from
the request it receives: "now divide that by 5" can only come out as 17 if the earlier answer 85 reached it.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.conftest import client_for
from tests.providers import stub_llm as llm
from tests.support.http_stub import RecordedRequest

QUESTION = "What is 12*7, plus 1?"
DIVIDE = "now divide that by 5"
ADD = "and add 2"
THREADS = "/api/v1/threads"
RUNS = "/api/v1/runs"
PATHS = {"openai": llm.OPENAI_PATH, "anthropic": llm.ANTHROPIC_PATH}
JSON = {"Content-Type": "application/json"}
UNKNOWN = "I cannot tell what 'that' refers to."

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_FOLLOW_UPS = [(re.compile(r"\bdivide (?:that|it) by (\d+)\b"), "/"), (re.compile(r"\badd (\d+)\b"), "+")]
_OBSERVED = re.compile(r"<<<TOOL_OUTPUT_START>>>\s*(-?\d+(?:\.\d+)?)\s*<<<TOOL_OUTPUT_END>>>")


@pytest.fixture
def providers(settings, stub):
    return llm.point_sdks_at(settings, stub, retries=0)


# --- a model that reads what it is sent ------------------------------------------------------------------------


class WireError(Exception):
    """The request breaks the provider's format or replays an earlier run's tool steps."""


@dataclass
class Entry:
    """One message of a request, provider-neutral: a user text, an assistant text with calls, or a tool result."""

    role: str  # "user", "assistant" or "result"
    text: str = ""
    calls: list[str] = field(default_factory=list)  # the ids of an assistant's tool calls
    call_id: str = ""  # the call a result answers


@dataclass
class Call:
    """One model call: the body received, the conversation read from it, the ids of the tool calls it made."""

    body: dict[str, Any]
    history: list[tuple[str, str]]
    input: str
    issued: list[str]


class ConversationModel:
    """Computes with the calculator from the conversation it receives, as a real model would.

    The question → calculator "12*7+1"; a follow-up ("divide that by 5", "add 2") → calculator on the last answer of
    the earlier turns (known only from them); an observation of its own call → that number as the final answer.
    The earlier turns must be plain user/assistant text; anything else is a problem, answered with HTTP 400.
    """

    def __init__(self, provider: str, protocol: str) -> None:
        self.provider, self.protocol = provider, protocol
        self.calls: list[Call] = []
        self.problems: list[str] = []
        self._ids = itertools.count(1)

    def __call__(self, request: RecordedRequest) -> tuple[int, dict[str, str], bytes]:
        body = request.json()
        try:
            entries = read_openai(body) if self.provider == "openai" else read_anthropic(body)
            start = self._input_index(entries)
            history = self._history(entries[:start])
            reply, issued = self._reply(history, entries[start].text, entries[start + 1 :])
        except (WireError, KeyError, TypeError, AttributeError) as exc:  # a shape it cannot read is a problem too
            problem = str(exc) if isinstance(exc, WireError) else f"unreadable request: {exc!r}"
            self.problems.append(problem)
            error = llm.openai_error(problem, "invalid_request_error")
            if self.provider == "anthropic":
                error = llm.anthropic_error("invalid_request_error", problem)
            return 400, JSON, json.dumps(error).encode()
        self.calls.append(Call(body, history, entries[start].text, issued))
        return 200, JSON, json.dumps(reply).encode()

    def _is_observation(self, entry: Entry) -> bool:
        if self.protocol == "react":
            return entry.role == "user" and entry.text.startswith("Observation:")
        return entry.role == "result"

    def _input_index(self, entries: list[Entry]) -> int:
        """The run's own input: the last user text that is not an observation."""
        for index in range(len(entries) - 1, -1, -1):
            if entries[index].role == "user" and not self._is_observation(entries[index]):
                return index
        raise WireError("no user input in the request")

    def _history(self, entries: list[Entry]) -> list[tuple[str, str]]:
        """The earlier turns as (input, answer) pairs; a replayed tool step or a broken alternation is an error."""
        if len(entries) % 2:
            raise WireError(f"earlier turns must come in user/assistant pairs, got {len(entries)} messages")
        turns = []
        for user, assistant in itertools.batched(entries, 2):
            if (user.role, assistant.role) != ("user", "assistant"):
                raise WireError(f"earlier turns out of order: {user.role}, {assistant.role}")
            if assistant.calls or self._is_observation(user) or "<<<TOOL_OUTPUT" in user.text + assistant.text:
                raise WireError("an earlier run's tool steps were replayed")
            turns.append((user.text, assistant.text))
        return turns

    def _previous_answer(self, history: list[tuple[str, str]]) -> str | None:
        if not history:
            return None
        answer = history[-1][1]
        if self.protocol == "react":
            answer = answer.removeprefix("Final Answer:").strip()
        return answer if _NUMBER.fullmatch(answer) else None

    def _expression(self, history: list[tuple[str, str]], goal: str) -> str | None:
        if goal == QUESTION:
            return "12*7+1"
        previous = self._previous_answer(history)
        for pattern, operator in _FOLLOW_UPS:
            match = pattern.search(goal.lower())
            if match and previous is not None:
                return f"{previous}{operator}{match.group(1)}"
        return None

    def _reply(self, history: list[tuple[str, str]], goal: str, own: list[Entry]) -> tuple[dict[str, Any], list[str]]:
        observations = [e for e in own if self._is_observation(e)]
        if observations:
            observed = _OBSERVED.search(observations[-1].text)
            return self._final(observed.group(1) if observed else "no number observed"), []
        expression = self._expression(history, goal)
        if expression is None:
            return self._final(UNKNOWN), []
        call_id = f"call_{next(self._ids)}"
        return self._action(call_id, expression), [call_id]

    def _final(self, answer: str) -> dict[str, Any]:
        return self._text(
            f"Thought: I know the answer.\nFinal Answer: {answer}" if self.protocol == "react" else answer
        )

    def _action(self, call_id: str, expression: str) -> dict[str, Any]:
        arguments = {"expression": expression}
        if self.protocol == "react":
            text = f"Thought: I compute {expression}.\nAction: calculator\nAction Input: {json.dumps(arguments)}"
            return self._text(text)
        if self.provider == "openai":
            return llm.openai_tool_calls([(call_id, "calculator", arguments)], usage=llm.openai_usage(10, 2))
        return llm.anthropic_tool_use([(call_id, "calculator", arguments)], usage=llm.anthropic_usage(10, 2))

    def _text(self, text: str) -> dict[str, Any]:
        if self.provider == "openai":
            return llm.openai_text(text, llm.openai_usage(10, 2))
        return llm.anthropic_text(text, llm.anthropic_usage(10, 2))


def read_openai(body: dict[str, Any]) -> list[Entry]:
    """Chat Completions messages after the system prompt; tool results must answer the calls just made."""
    messages = body.get("messages") or []
    if not messages or messages[0].get("role") != "system" or not isinstance(messages[0].get("content"), str):
        raise WireError("the first message must be the system prompt")
    entries: list[Entry] = []
    pending: set[str] = set()
    for message in messages[1:]:
        role, content = message.get("role"), message.get("content")
        if role == "tool":
            if message.get("tool_call_id") not in pending:
                raise WireError(f"a tool result for {message.get('tool_call_id')!r}, which is not a pending call")
            pending.discard(message["tool_call_id"])
            entries.append(Entry("result", content, call_id=message["tool_call_id"]))
            continue
        if pending:
            raise WireError(f"calls {sorted(pending)} were not answered before a {role} message")
        if role == "user" and isinstance(content, str):
            entries.append(Entry("user", content))
        elif role == "assistant":
            calls = [c["id"] for c in message.get("tool_calls") or []]
            pending = set(calls)
            entries.append(Entry("assistant", content or "", calls))
        else:
            raise WireError(f"unexpected message after the system prompt: {message}")
    return entries


def read_anthropic(body: dict[str, Any]) -> list[Entry]:
    """Messages with a top-level system: strictly alternating, a user first, results answering the calls."""
    system = body.get("system")
    if isinstance(system, list):  # text blocks, the last with the prompt cache's breakpoint (on by default)
        system = "".join(block["text"] for block in system if block.get("type") == "text")
    if not isinstance(system, str) or not system:
        raise WireError("the system prompt must be the top-level `system` (a string or text blocks)")
    entries: list[Entry] = []
    calls: list[str] = []
    for position, message in enumerate(body.get("messages") or []):
        expected = "assistant" if position % 2 else "user"
        if message.get("role") != expected:
            raise WireError(f"message {position} is {message.get('role')!r}, expected {expected!r} (alternation)")
        blocks = message["content"]
        if expected == "assistant":
            text = "".join(b["text"] for b in blocks if b["type"] == "text")
            calls = [b["id"] for b in blocks if b["type"] == "tool_use"]
            entries.append(Entry("assistant", text, calls))
            continue
        results = [b["tool_use_id"] for b in blocks if b["type"] == "tool_result"]
        if results != calls or blocks[: len(results)] != [b for b in blocks if b["type"] == "tool_result"]:
            raise WireError(f"user message {position} must start with the results of {calls}, has {results}")
        entries += [Entry("result", b["content"], call_id=b["tool_use_id"]) for b in blocks[: len(results)]]
        entries += [Entry("user", b["text"]) for b in blocks[len(results) :] if b["type"] == "text"]
        calls = []
    return entries


# --- what the wire must carry ------------------------------------------------------------------------------------


def native_turns(provider: str, protocol: str, turns: list[tuple[str, str]], new_input: str) -> list[dict]:
    """The earlier turns and the new input exactly as each provider's API takes them (after the system prompt)."""
    texts: list[tuple[str, str]] = []
    for question, answer in turns:
        texts += [("user", question), ("assistant", f"Final Answer: {answer}" if protocol == "react" else answer)]
    texts.append(("user", new_input))
    if provider == "openai":
        return [{"role": role, "content": text} for role, text in texts]
    return [{"role": role, "content": [{"type": "text", "text": text}]} for role, text in texts]


def after_system(provider: str, body: dict[str, Any]) -> list[dict]:
    return body["messages"][1:] if provider == "openai" else body["messages"]


def wire_tool_ids(body: dict[str, Any]) -> set[str]:
    """Every tool call id a request mentions (calls and results, both formats)."""
    ids: set[str] = set()
    for message in body["messages"]:
        ids |= {c["id"] for c in message.get("tool_calls") or []}
        if message.get("tool_call_id"):
            ids.add(message["tool_call_id"])
        for block in message["content"] if isinstance(message.get("content"), list) else []:
            ids |= {block[k] for k in ("id", "tool_use_id") if k in block}
    return ids


def observation_count(provider: str, body: dict[str, Any]) -> int:
    """Wrapped tool outputs after the system prompt (whose data rule names the marker too)."""
    return json.dumps(after_system(provider, body)).count("<<<TOOL_OUTPUT_START>>>")


def converse(api, thread_id: str, provider: str, protocol: str, inputs: list[str], **fields) -> list[dict]:
    """One run per input in the thread, each through POST /api/v1/runs (sync): the run objects."""
    runs = []
    for text in inputs:
        body = {"input": text, "thread_id": thread_id, "provider": provider, "protocol": protocol, **fields}
        response = api.post(RUNS, {"tools": ["calculator"], **body}, format="json")
        assert response.status_code == 201, response.data
        runs.append(response.data)
    return runs


def new_thread(api) -> str:
    response = api.post(THREADS, {}, format="json")
    assert response.status_code == 201, response.data
    return response.data["id"]


# --- the tests ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_a_three_run_conversation_is_answered_from_the_earlier_turns(providers, alice, provider, protocol):
    model = ConversationModel(provider, protocol)
    providers.add("POST", PATHS[provider], handler=model, repeat=True)
    api = client_for(alice)
    thread_id = new_thread(api)

    runs = converse(api, thread_id, provider, protocol, [QUESTION, DIVIDE, ADD])

    assert model.problems == []
    assert [(r["status"], r["stop_reason"], r["output"]) for r in runs] == [
        ("done", "final_answer", "85"),
        ("done", "final_answer", "17"),
        ("done", "final_answer", "19"),
    ]
    assert {r["thread_id"] for r in runs} == {thread_id}
    assert [r["turns"] for r in runs] == [2, 2, 2]  # each run: a calculator call, then the answer
    assert len(model.calls) == 6
    thread = api.get(f"{THREADS}/{thread_id}").data
    assert [(r["input"], r["output"]) for r in thread["runs"]] == [(QUESTION, "85"), (DIVIDE, "17"), (ADD, "19")]
    assert thread["title"] == QUESTION


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_each_request_carries_the_earlier_turns_in_native_shape_and_no_earlier_tool_steps(
    providers, alice, provider, protocol
):
    model = ConversationModel(provider, protocol)
    providers.add("POST", PATHS[provider], handler=model, repeat=True)
    api = client_for(alice)
    converse(api, new_thread(api), provider, protocol, [QUESTION, DIVIDE, ADD])
    assert model.problems == [] and len(model.calls) == 6

    earlier: list[tuple[str, str]] = []
    for number, (text, answer) in enumerate([(QUESTION, "85"), (DIVIDE, "17"), (ADD, "19")]):
        first, second = model.calls[2 * number : 2 * number + 2]
        expected = native_turns(provider, protocol, earlier, text)
        # The run's first call: system prompt, the earlier turns oldest first, the new input last. Nothing else.
        assert after_system(provider, first.body) == expected
        if provider == "openai":
            assert first.body["messages"][0]["role"] == "system"
            assert all(m["role"] != "system" for m in first.body["messages"][1:])
        else:
            assert first.body["system"][0]["text"].startswith("You are a careful assistant")
        # Its second call: the same, then only this run's own call and its result.
        assert after_system(provider, second.body)[: len(expected)] == expected
        assert len(after_system(provider, second.body)) == len(expected) + 2
        assert wire_tool_ids(first.body) == set()
        assert wire_tool_ids(second.body) == (set(first.issued) if protocol == "tools" else set())
        assert (observation_count(provider, first.body), observation_count(provider, second.body)) == (0, 1)
        seen = [(q, f"Final Answer: {a}" if protocol == "react" else a) for q, a in earlier]
        assert (first.history, second.history, first.input) == (seen, seen, text)
        earlier.append((text, answer))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_oldest_turns_are_left_out_first(providers, alice, settings, provider):
    """AGENT_THREAD_HISTORY_RUNS=1: the third run sees only the second one, which is all "add 2" needs."""
    model = ConversationModel(provider, "tools")
    providers.add("POST", PATHS[provider], handler=model, repeat=True)
    api = client_for(alice)
    thread_id = new_thread(api)
    converse(api, thread_id, provider, "tools", [QUESTION, DIVIDE])
    settings.AGENT_THREAD_HISTORY_RUNS = 1

    (third,) = converse(api, thread_id, provider, "tools", [ADD])

    assert model.problems == []
    assert third["output"] == "19"
    assert after_system(provider, model.calls[4].body) == native_turns(provider, "tools", [(DIVIDE, "17")], ADD)


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_run_without_an_answer_is_sent_as_how_it_stopped(providers, alice, provider):
    """An earlier run that hit max_turns gives no number: "divide that by 5" has nothing to divide (react)."""
    model = ConversationModel(provider, "react")
    providers.add("POST", PATHS[provider], handler=model, repeat=True)
    api = client_for(alice)
    thread_id = new_thread(api)
    (first,) = converse(api, thread_id, provider, "react", [QUESTION], max_turns=1)
    assert (first["stop_reason"], first["output"]) == ("max_turns", None)

    (second,) = converse(api, thread_id, provider, "react", [DIVIDE])

    assert model.problems == []
    assert second["output"] == UNKNOWN
    stopped = "(No final answer: that run stopped with max_turns.)"
    # A stop reason is not an answer: no "Final Answer:" prefix even in react (so: rendered as in tools).
    expected = native_turns(provider, "tools", [(QUESTION, stopped)], DIVIDE)
    assert after_system(provider, model.calls[-1].body) == expected


def ask(model: ConversationModel, messages: list[dict]) -> tuple[int, dict]:
    status, _, body = model(RecordedRequest("POST", llm.OPENAI_PATH, {}, json.dumps({"messages": messages}).encode()))
    return status, json.loads(body)


def test_the_stub_model_needs_the_earlier_turns_and_refuses_replayed_tool_steps():
    """The checker checked: without the earlier answer it has no number; tool steps among the earlier turns are a
    400, so a run that replays them ends with a model error instead of an answer."""
    model = ConversationModel("openai", "tools")
    system = {"role": "system", "content": "s"}
    call = {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": "{}"}}

    status, alone = ask(model, [system, {"role": "user", "content": DIVIDE}])
    assert (status, alone["choices"][0]["message"]["content"]) == (200, UNKNOWN)

    status, told = ask(model, [system, *native_turns("openai", "tools", [(QUESTION, "85")], DIVIDE)])
    arguments = told["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"]
    assert (status, json.loads(arguments)) == (200, {"expression": "85/5"})

    replayed = [
        system,
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "<<<TOOL_OUTPUT_START>>>\n85\n<<<TOOL_OUTPUT_END>>>"},
        {"role": "assistant", "content": "85"},
        {"role": "user", "content": DIVIDE},
    ]
    status, _ = ask(model, replayed)
    assert status == 400
    assert model.problems == ["an earlier run's tool steps were replayed"]
