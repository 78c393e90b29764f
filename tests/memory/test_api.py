"""/api/v1/memory/facts: create, list (newest first or ranked by q), delete — always the caller's own facts."""

from __future__ import annotations

from datetime import datetime

import pytest
from rest_framework.test import APIClient

from memory.models import MAX_FACT_CHARS, Fact
from tests.memory.conftest import FACTS, fact_url, store

pytestmark = pytest.mark.django_db


def results(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [item["text"] for item in response.json()["results"]]


# --- create -------------------------------------------------------------------------------------------------------


def test_create_returns_201_with_the_fact(api, alice):
    response = api.post(FACTS, {"text": "  My favourite colour is teal "}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == {"id", "text", "created_at"}
    assert body["text"] == "My favourite colour is teal"
    assert datetime.fromisoformat(body["created_at"].replace("Z", "+00:00")).tzinfo is not None
    fact = Fact.objects.get(pk=body["id"])
    assert (fact.owner, fact.text, fact.run) == (alice, "My favourite colour is teal", None)


def test_create_the_same_text_again_returns_the_same_fact(api, alice):
    first = api.post(FACTS, {"text": "I live in Lyon"}, format="json").json()
    again = api.post(FACTS, {"text": "i live in LYON."}, format="json")
    assert again.status_code == 201
    assert again.json() == first
    assert Fact.objects.filter(owner=alice).count() == 1


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"text": ""},
        {"text": "   "},
        {"text": None},
        {"text": "x" * (MAX_FACT_CHARS + 1)},
        {"txt": "typo in the field name"},
        {"text": ["a", "list"]},
        {"text": {"an": "object"}},
    ],
)
def test_create_validation_is_400_and_stores_nothing(api, body):
    response = api.post(FACTS, body, format="json")
    assert response.status_code == 400, response.content
    assert "txt" in response.json() if "txt" in body else "text" in response.json()  # a typo is named, not lost
    assert Fact.objects.count() == 0


def test_create_accepts_text_at_the_limit(api):
    response = api.post(FACTS, {"text": "y" * MAX_FACT_CHARS}, format="json")
    assert response.status_code == 201
    assert len(response.json()["text"]) == MAX_FACT_CHARS


def test_a_non_json_body_is_rejected(api):
    response = api.post(FACTS, "text=hello", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert Fact.objects.count() == 0


# --- list ---------------------------------------------------------------------------------------------------------


def test_list_is_own_facts_newest_first_paginated(api, alice, bob):
    for i in range(5):
        store(alice, f"alice fact {i}", minutes_ago=10 - i)
    store(bob, "bob fact", minutes_ago=0)
    response = api.get(FACTS)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"count", "next", "previous", "results"}
    assert body["count"] == 5
    assert (body["next"], body["previous"]) == (None, None)
    assert [r["text"] for r in body["results"]] == [f"alice fact {i}" for i in (4, 3, 2, 1, 0)]
    assert all(set(r) == {"id", "text", "created_at"} for r in body["results"])


def test_list_pages_with_limit_and_offset(api, alice):
    for i in range(5):
        store(alice, f"alice fact {i}", minutes_ago=10 - i)
    page = api.get(FACTS, {"limit": 2, "offset": 2}).json()
    assert page["count"] == 5
    assert [r["text"] for r in page["results"]] == ["alice fact 2", "alice fact 1"]
    assert "limit=2" in page["next"] and "offset=4" in page["next"]
    assert "limit=2" in page["previous"]
    last = api.get(page["next"]).json()
    assert [r["text"] for r in last["results"]] == ["alice fact 0"]
    assert last["next"] is None


def test_list_limit_defaults_to_50_and_is_capped_at_200(api, alice):
    Fact.objects.bulk_create([Fact(owner=alice, text=f"fact {i}", digest=f"{i:064d}") for i in range(205)])
    assert len(api.get(FACTS).json()["results"]) == 50
    capped = api.get(FACTS, {"limit": 1000}).json()
    assert capped["count"] == 205
    assert len(capped["results"]) == 200
    ranked = api.get(FACTS, {"q": "fact", "limit": 1000, "mode": "text"}).json()
    assert ranked["count"] == 205
    assert len(ranked["results"]) == 200


def test_list_q_ranks_by_relevance(api, alice, bob):
    store(alice, "green tea every morning", minutes_ago=30)
    store(alice, "tea with a long list of other words in it", minutes_ago=1)
    store(alice, "green jasmine tea", minutes_ago=40)
    store(alice, "coffee", minutes_ago=0)
    store(bob, "green jasmine tea and more tea", minutes_ago=0)
    response = api.get(FACTS, {"q": "jasmine green teas", "mode": "text"})
    assert results(response) == [
        "green jasmine tea",
        "green tea every morning",
        "tea with a long list of other words in it",
    ]
    assert response.json()["count"] == 3


def test_list_q_pages(api, alice):
    for i in range(7):
        store(alice, f"tea note {i}", minutes_ago=10 - i)
    store(alice, "unrelated", minutes_ago=0)
    page = api.get(FACTS, {"q": "tea", "limit": 3, "offset": 3, "mode": "text"}).json()
    assert page["count"] == 7
    assert [r["text"] for r in page["results"]] == ["tea note 3", "tea note 2", "tea note 1"]
    assert page["next"] is not None and page["previous"] is not None
    assert [r["text"] for r in api.get(page["next"]).json()["results"]] == ["tea note 0"]


def test_list_q_without_matches_is_empty(api, alice):
    store(alice, "tea")
    body = api.get(FACTS, {"q": "volcano", "mode": "text"}).json()
    assert (body["count"], body["results"], body["next"]) == (0, [], None)


def test_list_q_without_search_terms_is_newest_first_in_text_mode(api, alice):
    store(alice, "older", minutes_ago=5)
    store(alice, "newer", minutes_ago=1)
    body = api.get(FACTS, {"q": "the of and", "mode": "text"}).json()
    assert body["count"] == 2
    assert [r["text"] for r in body["results"]] == ["newer", "older"]


@pytest.mark.parametrize("q", ["", "   "])
def test_a_blank_q_is_400_and_naming_no_q_lists_newest_first(api, alice, q):
    store(alice, "older", minutes_ago=5)
    store(alice, "newer", minutes_ago=1)
    response = api.get(FACTS, {"q": q})
    assert response.status_code == 400
    assert "q needs some text" in response.json()["q"][0]
    assert [r["text"] for r in api.get(FACTS).json()["results"]] == ["newer", "older"]


def test_list_q_too_long_is_400(api):
    assert api.get(FACTS, {"q": "a" * 501}).status_code == 400
    assert api.get(FACTS, {"q": "a" * 500}).status_code == 200


# --- delete -------------------------------------------------------------------------------------------------------


def test_delete_own_fact_is_204_and_it_is_gone(api, alice):
    fact = store(alice, "my old address")
    response = api.delete(fact_url(fact.pk))
    assert response.status_code == 204
    assert not Fact.objects.filter(pk=fact.pk).exists()
    assert api.get(FACTS, {"q": "address"}).json()["count"] == 0
    assert api.delete(fact_url(fact.pk)).status_code == 404


def test_delete_another_users_fact_is_404_and_it_still_exists(api, bob):
    theirs = store(bob, "bob's secret")
    response = api.delete(fact_url(theirs.pk))
    assert response.status_code == 404
    assert Fact.objects.filter(pk=theirs.pk, owner=bob).exists()


def test_delete_unknown_or_malformed_id_is_404(api):
    assert api.delete(fact_url(999999)).status_code == 404
    assert api.delete(fact_url("abc")).status_code == 404


def test_no_retrieve_or_put_of_a_single_fact(api, alice):
    fact = store(alice, "unchangeable")
    assert api.get(fact_url(fact.pk)).status_code == 405
    assert api.put(fact_url(fact.pk), {"text": "changed"}, format="json").status_code == 405
    assert Fact.objects.get(pk=fact.pk).text == "unchangeable"


# --- auth and routing ---------------------------------------------------------------------------------------------


def test_unauthenticated_is_401(alice):
    fact = store(alice, "private")
    anonymous = APIClient()
    assert anonymous.get(FACTS).status_code == 401
    assert anonymous.post(FACTS, {"text": "x"}, format="json").status_code == 401
    assert anonymous.delete(fact_url(fact.pk)).status_code == 401
    bad_token = APIClient()
    bad_token.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    assert bad_token.get(FACTS).status_code == 401
    assert Fact.objects.count() == 1


def test_trailing_slash_is_optional(api, alice):
    created = api.post(FACTS + "/", {"text": "slashed"}, format="json")
    assert created.status_code == 201
    assert api.post(FACTS, {"text": "unslashed"}, format="json").status_code == 201
    assert api.get(FACTS + "/").json()["count"] == 2
    assert api.get(FACTS).json()["count"] == 2
    assert api.delete(fact_url(created.json()["id"]) + "/").status_code == 204
    other = Fact.objects.get(text="unslashed")
    assert api.delete(fact_url(other.pk)).status_code == 204
    assert not Fact.objects.exists()


@pytest.mark.parametrize("params", [{}, {"mode": "text"}, {"q": "fact", "mode": "text"}, {"q": "fact"}])
def test_the_list_answers_what_the_schema_says(api, alice, params):
    """`mode` without `q` lists plainly (no `similarity`, no `words`): the schema's RankedFact requires neither, and
    declares every field a result has."""
    store(alice, "a fact", minutes_ago=1)
    schema = api.get("/api/v1/schema", {"format": "json"}).json()["components"]["schemas"]["RankedFact"]
    assert not {"similarity", "words"} & set(schema["required"])
    results = api.get(FACTS, params).json()["results"]
    assert len(results) == 1
    for result in results:
        assert set(schema["required"]) <= set(result) <= set(schema["properties"])
        assert ("similarity" in result) == ("q" in params)
