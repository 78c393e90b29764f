"""A NUL character in a fact is refused in our own words, the same on SQLite and PostgreSQL (which cannot store it)."""

from __future__ import annotations

import pytest

from agents.engine.dispatch import Toolset, run_tool
from agents.runs.runtime import tool_registry
from agents.tools import ToolContext, ToolError
from memory import services
from memory.models import Fact
from tests.memory.conftest import FACTS

pytestmark = pytest.mark.django_db

REFUSAL = "A fact cannot contain the NUL character (U+0000)."
NUL_TEXTS = ["my cat\x00is called Tom", "\x00", "trailing nul\x00", "  \x00  spaced  "]


@pytest.mark.parametrize("text", NUL_TEXTS)
def test_the_service_refuses_a_nul(alice, text):
    with pytest.raises(services.MemoryError_, match=r"^A fact cannot contain the NUL character \(U\+0000\)\.$"):
        services.remember(alice, text)
    assert Fact.objects.count() == 0


def test_the_remember_tool_refuses_a_nul_in_our_own_words(alice):
    with pytest.raises(ToolError) as info:
        tool_registry().get("remember")({"text": "my cat\x00is called Tom"}, ToolContext(user_id=alice.pk))
    assert str(info.value) == REFUSAL
    assert info.value.__cause__ is None
    assert Fact.objects.count() == 0


def test_the_model_reads_the_refusal_as_an_error_result_and_can_go_on(alice):
    tools = Toolset(tools=tool_registry().select(["remember"]), context=ToolContext(user_id=alice.pk))
    refused = run_tool(tools, "remember", {"text": "my cat\x00is called Tom"}, timeout_s=10.0)
    assert (refused.is_error, refused.output) == (True, f"Tool 'remember' failed: {REFUSAL}")
    stored = run_tool(tools, "remember", {"text": "my cat is called Tom"}, timeout_s=10.0)
    assert (stored.is_error, stored.output) == (False, "Remembered: my cat is called Tom")
    assert list(Fact.objects.values_list("text", flat=True)) == ["my cat is called Tom"]


@pytest.mark.parametrize("text", NUL_TEXTS)
def test_the_api_answers_400_naming_the_field(api, text):
    response = api.post(FACTS, {"text": text}, format="json")
    assert response.status_code == 400, response.content
    (message,) = response.json()["text"]
    assert "null" in message.lower() or "nul" in message.lower()
    assert "0x00" not in message and "PostgreSQL" not in message
    assert Fact.objects.count() == 0


def test_after_a_refused_nul_the_api_still_stores_facts(api):
    assert api.post(FACTS, {"text": "a\x00b"}, format="json").status_code == 400
    response = api.post(FACTS, {"text": "a b"}, format="json")
    assert response.status_code == 201, response.content
    assert Fact.objects.get().text == "a b"


def test_recall_with_a_nul_in_the_query_answers_normally(alice, api):
    services.remember(alice, "my cat is called Tom")
    recall = tool_registry().get("recall")
    assert recall({"query": "cat\x00"}, ToolContext(user_id=alice.pk)).startswith("- my cat is called Tom (words: cat")
    response = api.get(FACTS, {"q": "cat\x00"})
    assert response.status_code == 200, response.content
    assert [f["text"] for f in response.json()["results"]] == ["my cat is called Tom"]
