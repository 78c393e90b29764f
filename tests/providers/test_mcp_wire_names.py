"""`<server>.<tool>` on the providers' wire (agents/providers/names.py): "." goes out as "__" and comes back."""

from __future__ import annotations

import json
import re

from agents.engine.types import ModelReply, ToolCall, ToolSpec
from agents.providers import anthropic_provider, openai_compat
from agents.providers.names import fits_the_wire, named_back, wire_name
from tests.providers import stub_llm as llm

# Both providers' rule for a function/tool name.
PROVIDER_RULE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
DOCS = ToolSpec("docs.search", "Search the docs.", {"type": "object", "properties": {"q": {"type": "string"}}})
CALC = ToolSpec("calculator", "Arithmetic.", {"type": "object", "properties": {"expression": {"type": "string"}}})
HISTORY = [
    {"role": "user", "content": "find it"},
    {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "docs.search", "arguments": {"q": "x"}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "docs.search", "content": "found"},
]


def test_the_wire_name_of_an_mcp_tool_fits_both_providers():
    assert wire_name("docs.search") == "docs__search" and wire_name("calculator") == "calculator"
    assert PROVIDER_RULE.match(wire_name("docs.files.read"))
    assert fits_the_wire("s." + "x" * 61) and not fits_the_wire("s." + "x" * 62)  # 64 characters once "." is "__"
    assert not fits_the_wire("s.a b")


def test_calls_come_back_under_the_registry_name():
    reply = ModelReply(tool_calls=(ToolCall("1", "docs__search", {}), ToolCall("2", "calculator", {})))
    back = named_back(reply, [DOCS, CALC])
    assert [c.name for c in back.tool_calls] == ["docs.search", "calculator"]
    unknown = ModelReply(tool_calls=(ToolCall("1", "other__tool", {}),))
    assert named_back(unknown, [DOCS]).tool_calls[0].name == "other__tool"  # not sent: the engine says unknown
    assert named_back(reply, [CALC]) is reply


def test_openai_sends_wire_names_in_tools_and_in_earlier_calls():
    body = json.loads(openai_compat.OpenAIProvider().payload(llm.request(HISTORY, tools=[CALC, DOCS])))
    assert [t["function"]["name"] for t in body["tools"]] == ["calculator", "docs__search"]
    assert body["messages"][1]["tool_calls"][0]["function"]["name"] == "docs__search"
    assert all(PROVIDER_RULE.match(t["function"]["name"]) for t in body["tools"])


def test_anthropic_sends_wire_names_in_tools_and_in_earlier_calls():
    kwargs = anthropic_provider.build_kwargs("claude-test", 100, llm.request(HISTORY, tools=[CALC, DOCS]))
    assert [t["name"] for t in kwargs["tools"]] == ["calculator", "docs__search"]
    uses = [b for m in kwargs["messages"] for b in m["content"] if b["type"] == "tool_use"]
    assert [b["name"] for b in uses] == ["docs__search"]


def test_both_providers_name_a_reply_call_back(settings, stub):
    settings.OPENAI_API_KEY, settings.OPENAI_BASE_URL = llm.fake_key(), stub.url + "/v1"
    settings.ANTHROPIC_API_KEY, settings.ANTHROPIC_BASE_URL = llm.fake_key("sk-ant-test-"), stub.url
    stub.add("POST", llm.OPENAI_PATH, json=llm.openai_tool_calls([("c1", "docs__search", {"q": "a"})]))
    stub.add("POST", llm.ANTHROPIC_PATH, json=llm.anthropic_tool_use([("t1", "docs__search", {"q": "b"})]))
    request = llm.request(tools=[DOCS, CALC], timeout_s=10)

    openai_reply = openai_compat.OpenAIProvider().complete(request)
    anthropic_reply = anthropic_provider.AnthropicProvider().complete(request)
    assert [(c.name, c.arguments) for c in openai_reply.tool_calls] == [("docs.search", {"q": "a"})]
    assert [(c.name, c.arguments) for c in anthropic_reply.tool_calls] == [("docs.search", {"q": "b"})]
