"""One user's memory is invisible to every other user: through runs, the tools, and anything a client sends."""

from __future__ import annotations

import re

import pytest

from agents.engine.dispatch import Toolset, run_tool
from agents.models import Run
from agents.runs.runtime import tool_registry
from agents.tools import ToolContext
from memory import tools as memory_tools
from memory.models import Fact
from tests.conftest import client_for
from tests.memory.conftest import FACTS, RUNS, store

pytestmark = pytest.mark.django_db

REMEMBER_TEAL = "remember that my favourite colour is teal"
ASK_COLOUR = "what do you remember about my favourite colour?"
NOTHING = "No matching facts remembered."


def run(client, text: str, **extra):
    response = client.post(RUNS, {"input": text, **extra}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["status"], body["stop_reason"], body["ok"]) == ("done", "final_answer", True), body
    return body


def tool_steps(run_id: str) -> list[dict]:
    return [s.data | {"kind": s.kind} for s in Run.objects.get(pk=run_id).steps.order_by("index") if s.kind == "tool"]


def memory_toolset(user_id, run_id=None) -> Toolset:
    tools = tool_registry().select(["remember", "recall"])
    return Toolset(tools=tools, context=ToolContext(user_id=user_id, run_id=run_id))


@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_a_fact_from_one_run_is_recalled_in_a_later_run_of_the_same_user_only(alice, bob, protocol):
    alice_api, bob_api = client_for(alice), client_for(bob)

    stored = run(alice_api, REMEMBER_TEAL, protocol=protocol)
    assert [s["name"] for s in tool_steps(stored["id"])] == ["remember"]
    assert stored["output"] == "Remembered: my favourite colour is teal"
    fact = Fact.objects.get()
    assert (fact.owner, fact.text, str(fact.run_id)) == (alice, "my favourite colour is teal", stored["id"])

    asked_by_bob = run(bob_api, ASK_COLOUR, protocol=protocol)
    assert [s["name"] for s in tool_steps(asked_by_bob["id"])] == ["recall"]
    assert asked_by_bob["output"] == NOTHING
    assert "teal" not in str(Run.objects.get(pk=asked_by_bob["id"]).steps.values_list("data", flat=True))

    asked_by_alice = run(alice_api, ASK_COLOUR, protocol=protocol)
    assert [s["name"] for s in tool_steps(asked_by_alice["id"])] == ["recall"]
    assert "teal" in asked_by_alice["output"]
    assert re.fullmatch(
        r"- my favourite colour is teal \((words: [a-z, ]+)?(; )?(meaning: -?\d\.\d\d)?\)", asked_by_alice["output"]
    )


def test_remembering_twice_in_runs_keeps_one_fact(alice):
    api = client_for(alice)
    run(api, REMEMBER_TEAL)
    again = run(api, "Remember that my favourite colour is TEAL.")
    assert again["output"] == "Already remembered: my favourite colour is teal"
    assert Fact.objects.filter(owner=alice).count() == 1


@pytest.mark.parametrize(
    "claim",
    [
        lambda alice: ({"HTTP_X_MEMORY_NAMESPACE": "alice"}, {}),
        lambda alice: ({"HTTP_X_USER_ID": str(alice.pk), "HTTP_X_MEMORY_OWNER": str(alice.pk)}, {}),
        lambda alice: ({}, {"user": alice.pk}),
        lambda alice: ({}, {"namespace": "alice"}),
        lambda alice: ({}, {"user_id": alice.pk, "owner": alice.pk, "memory_namespace": "alice"}),
        lambda alice: ({}, {"context": {"user_id": alice.pk}}),
    ],
    ids=["namespace-header", "user-headers", "user-field", "namespace-field", "owner-fields", "context-field"],
)
def test_a_header_or_body_field_naming_another_user_changes_nothing(alice, bob, claim):
    store(alice, "my favourite colour is teal")
    headers, extra = claim(alice)
    bob_api = client_for(bob)

    response = bob_api.post(RUNS, {"input": ASK_COLOUR, **extra}, format="json", **headers)
    if response.status_code == 201:  # an unknown field may be ignored or rejected, never obeyed
        body = response.json()
        assert body["output"] == NOTHING
        assert "teal" not in response.content.decode()
    else:
        assert response.status_code == 400, response.content

    listed = bob_api.get(FACTS, {"q": "favourite colour"}, **headers)
    assert listed.status_code == 200
    assert listed.json()["count"] == 0

    created = bob_api.post(FACTS, {"text": "bob's own fact", **extra}, format="json", **headers)
    if created.status_code == 201:
        assert Fact.objects.get(pk=created.json()["id"]).owner == bob
    else:
        assert created.status_code == 400
    assert Fact.objects.filter(owner=alice).count() == 1

    # and a bob's remember run with the same header/fields stores the fact as bob's
    remembered = bob_api.post(RUNS, {"input": "remember that my dog is called Rex", **extra}, format="json", **headers)
    if remembered.status_code == 201:
        assert Fact.objects.get(text="my dog is called Rex").owner == bob
    assert not Fact.objects.filter(owner=alice, text__icontains="rex").exists()


def test_tool_arguments_naming_another_user_are_rejected_by_the_schema(alice, bob):
    store(alice, "my favourite colour is teal")
    toolset = memory_toolset(bob.pk)
    for name, arguments in [
        ("recall", {"query": "favourite colour", "user_id": alice.pk}),
        ("recall", {"query": "favourite colour", "owner": "alice"}),
        ("recall", {"query": "favourite colour", "namespace": "alice"}),
        ("remember", {"text": "teal is awful", "user_id": alice.pk}),
    ]:
        result = run_tool(toolset, name, arguments, timeout_s=5)
        assert result.is_error, (name, arguments)
        assert "Invalid arguments" in result.output
        assert "my favourite colour" not in result.output
    assert Fact.objects.filter(owner=alice).count() == 1
    assert not Fact.objects.filter(owner=bob).exists()

    plain = run_tool(toolset, "recall", {"query": "favourite colour teal"}, timeout_s=5)
    assert (plain.is_error, plain.output) == (False, NOTHING)
    alices = run_tool(memory_toolset(alice.pk), "recall", {"query": "favourite colour"}, timeout_s=5)
    assert not alices.is_error
    assert alices.output.startswith("- my favourite colour is teal (words: favourite, colour")


def test_the_tool_functions_take_the_user_from_the_context_only(alice, bob):
    store(alice, "my favourite colour is teal")
    bobs = ToolContext(user_id=bob.pk, extra={"user_id": alice.pk})
    # even called directly, past the schema, an argument naming alice is ignored
    assert memory_tools.recall({"query": "favourite colour", "user_id": alice.pk}, bobs) == NOTHING
    assert memory_tools.remember({"text": "I like jazz", "user_id": alice.pk}, bobs) == "Remembered: I like jazz"
    assert Fact.objects.get(text="I like jazz").owner == bob


@pytest.mark.parametrize("context", [None, ToolContext(), ToolContext(user_id=987654)])
def test_the_tools_need_a_real_signed_in_user(alice, context):
    store(alice, "my favourite colour is teal")
    toolset = Toolset(tools=tool_registry().select(["remember", "recall"]), context=context)
    for name, arguments in [("recall", {"query": "colour"}), ("remember", {"text": "orphan fact"})]:
        result = run_tool(toolset, name, arguments, timeout_s=5)
        assert result.is_error
        assert "signed-in user" in result.output
    assert Fact.objects.count() == 1


def test_the_recall_tool_honours_its_limit_and_ranks(alice):
    for i in range(7):
        store(alice, f"tea note {i}", minutes_ago=10 - i)
    store(alice, "green tea note", minutes_ago=60)
    toolset = memory_toolset(alice.pk)
    out = run_tool(toolset, "recall", {"query": "green tea", "limit": 3}, timeout_s=5).output
    lines = out.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("- green tea note (words: green, tea")  # both words, and the nearest in meaning
    assert all(line.startswith("- tea note ") and "words: tea" in line for line in lines[1:])
    assert len(run_tool(toolset, "recall", {"query": "tea"}, timeout_s=5).output.splitlines()) == 5
    assert run_tool(toolset, "recall", {"query": "tea", "limit": 21}, timeout_s=5).is_error
    assert run_tool(toolset, "recall", {"query": "tea", "limit": 0}, timeout_s=5).is_error


def test_the_remember_tool_rejects_empty_and_over_long_text(alice):
    toolset = memory_toolset(alice.pk)
    for arguments in [{"text": ""}, {"text": "   "}, {"text": "x" * 1001}, {}]:
        assert run_tool(toolset, "remember", arguments, timeout_s=5).is_error, arguments
    assert not Fact.objects.exists()


def test_the_remember_tool_links_the_run(alice):
    api = client_for(alice)
    body = run(api, "remember that I was born in Porto")
    assert str(Fact.objects.get(owner=alice).run_id) == body["id"]
    # a context run id that does not exist is tolerated (no link)
    toolset = memory_toolset(alice.pk, run_id="00000000-0000-0000-0000-000000000000")
    assert not run_tool(toolset, "remember", {"text": "runless fact"}, timeout_s=5).is_error
    assert Fact.objects.get(text="runless fact").run_id is None
