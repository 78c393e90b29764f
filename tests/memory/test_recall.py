"""memory.services.recall / count_matches in text mode: ranking that means the same on SQLite (FTS5) and PostgreSQL
(tsvector). Recall by meaning and hybrid recall: tests/memory/test_semantic.py.

The contract: any query term matches (OR); a fact matching more distinct query terms ranks higher; facts matching
as many terms rank newest first (length and repetition do not matter); words are stemmed; a query without
searchable words gives the most recent facts; only the caller's facts, ever.
"""

from __future__ import annotations

import pytest
from django.db import connection

from memory import services
from memory.models import Fact
from tests.memory.conftest import store, texts

pytestmark = pytest.mark.django_db


def recall_texts(user, query: str, limit: int = 50, offset: int = 0) -> list[str]:
    return texts(services.recall(user, query, limit=limit, offset=offset, mode="text"))


def test_the_backend_under_test_is_the_one_configured():
    # Both vendors run this suite in CI; this makes a run on the wrong database visible in the report.
    assert connection.vendor in {"sqlite", "postgresql"}


def test_query_terms_drop_stop_words_case_and_repeats():
    assert services.query_terms("What do you remember about MY favourite Colour, colour?") == ["favourite", "colour"]
    assert services.query_terms("the of and") == []
    assert services.query_terms("") == []
    assert services.query_terms(None) == []
    assert len(services.query_terms(" ".join(f"word{i}" for i in range(40)))) == services.MAX_QUERY_TERMS


def test_more_matching_terms_rank_higher(alice):
    store(alice, "green tea every morning with breakfast", minutes_ago=30)  # 2 terms, oldest
    store(alice, "tea", minutes_ago=1)  # 1 term, newest and shortest
    store(alice, "green", minutes_ago=2)  # 1 term
    store(alice, "green tea with jasmine is my favourite drink on cold winter evenings", minutes_ago=20)  # 3 terms
    store(alice, "coffee black", minutes_ago=0)  # no term
    assert recall_texts(alice, "jasmine green tea") == [
        "green tea with jasmine is my favourite drink on cold winter evenings",
        "green tea every morning with breakfast",
        "tea",
        "green",
    ]


def test_more_terms_win_even_against_rare_terms_and_short_facts(alice):
    # A term shared by many facts must not count for less than a rare one: matches are counted, not weighted.
    for i in range(8):
        store(alice, f"garden note {i} about roses", minutes_ago=100 + i)
    store(alice, "roses", minutes_ago=1)
    store(alice, "tulips", minutes_ago=0)
    store(alice, "my garden has roses and tulips along the long southern wall by the old shed", minutes_ago=50)
    ranked = recall_texts(alice, "roses tulips")
    assert ranked[0] == "my garden has roses and tulips along the long southern wall by the old shed"
    assert set(ranked[1:]) == {"tulips", "roses", *(f"garden note {i} about roses" for i in range(8))}


def test_ties_are_newest_first_whatever_the_length_or_repetition(alice):
    store(alice, "tea", minutes_ago=40)
    store(alice, "tea tea tea, I really love tea", minutes_ago=30)
    store(alice, "I drink tea in the afternoon with a biscuit and a long read of the paper", minutes_ago=10)
    store(alice, "iced tea", minutes_ago=20)
    assert recall_texts(alice, "tea") == [
        "I drink tea in the afternoon with a biscuit and a long read of the paper",
        "iced tea",
        "tea tea tea, I really love tea",
        "tea",
    ]


def test_same_created_at_ties_break_by_newest_id(alice):
    first = store(alice, "apples are red")
    second = store(alice, "apples are green and sour")
    Fact.objects.filter(pk__in=[first.pk, second.pk]).update(created_at=first.created_at)
    assert recall_texts(alice, "apples") == ["apples are green and sour", "apples are red"]


@pytest.mark.parametrize(
    ("stored", "query"),
    [
        ("my favourite colour is teal", "colours"),
        ("I like to run in the park", "running"),
        ("I went running yesterday", "run"),
        ("she collects old maps", "collecting map"),
    ],
)
def test_stemming(alice, stored, query):
    store(alice, stored)
    store(alice, "unrelated words only")
    assert recall_texts(alice, query) == [stored]


def test_any_term_matches(alice):
    store(alice, "I have a cat", minutes_ago=3)
    store(alice, "I have a dog", minutes_ago=2)
    store(alice, "I have a parrot", minutes_ago=1)
    assert recall_texts(alice, "cat dog") == ["I have a dog", "I have a cat"]
    assert recall_texts(alice, "elephant giraffe") == []


def test_query_case_and_punctuation_do_not_matter(alice):
    store(alice, "My sister lives in Berlin")
    assert recall_texts(alice, "BERLIN?!") == ["My sister lives in Berlin"]
    assert recall_texts(alice, '"berlin" OR NOT (sister*) -- \' ;') == ["My sister lives in Berlin"]


@pytest.mark.parametrize("query", ["", "   ", "the of and", "What do you remember about it?", "?!"])
def test_a_query_without_search_terms_gives_the_most_recent_facts(alice, bob, query):
    store(alice, "oldest", minutes_ago=30)
    store(alice, "newest", minutes_ago=1)
    store(alice, "middle", minutes_ago=10)
    store(bob, "bob's newest", minutes_ago=0)
    assert recall_texts(alice, query) == ["newest", "middle", "oldest"]
    assert recall_texts(alice, query, limit=2) == ["newest", "middle"]
    assert recall_texts(alice, query, limit=2, offset=2) == ["oldest"]
    assert services.count_matches(alice, query, mode="text") == 3


def test_the_limit_and_offset_are_honoured(alice):
    for i in range(12):
        store(alice, f"note {i} about tea", minutes_ago=100 - i)
    assert len(services.recall(alice, "tea", mode="text")) == 5  # the default
    assert recall_texts(alice, "tea", limit=3) == ["note 11 about tea", "note 10 about tea", "note 9 about tea"]
    assert recall_texts(alice, "tea", limit=3, offset=3) == ["note 8 about tea", "note 7 about tea", "note 6 about tea"]
    assert len(services.recall(alice, "tea", limit=50, mode="text")) == 12
    assert services.recall(alice, "tea", limit=5, offset=12, mode="text") == []


def test_other_users_facts_are_never_returned(alice, bob):
    store(alice, "alice's favourite colour is teal", minutes_ago=5)
    store(bob, "bob's favourite colour is orange", minutes_ago=1)
    store(bob, "bob likes colour and favourite and teal", minutes_ago=2)
    assert recall_texts(alice, "favourite colour teal orange") == ["alice's favourite colour is teal"]
    assert recall_texts(alice, "") == ["alice's favourite colour is teal"]
    assert recall_texts(bob, "teal") == ["bob likes colour and favourite and teal"]
    assert services.count_matches(alice, "orange", mode="text") == 0
    assert services.count_matches(bob, "teal", mode="text") == 1


def test_a_user_without_facts_gets_nothing(alice, bob):
    store(alice, "something about tea")
    assert services.recall(bob, "tea", mode="text") == []
    assert services.recall(bob, "", mode="text") == []
    assert services.count_matches(bob, "tea", mode="text") == 0
    assert services.count_matches(bob, "", mode="text") == 0


@pytest.mark.parametrize("query", ["tea", "green tea", "green jasmine", "coffee", "nothing here", "", "the"])
def test_count_matches_agrees_with_the_full_recall(alice, bob, query):
    for text in ["green tea", "jasmine tea", "black coffee", "green apples", "tea and coffee", "sunny day"]:
        store(alice, text)
    store(bob, "bob's green tea and coffee")
    assert services.count_matches(alice, query, mode="text") == len(
        services.recall(alice, query, limit=1000, mode="text")
    )


def test_the_index_follows_an_updated_text(alice):
    fact = store(alice, "my car is blue")
    fact.text = "my bicycle is yellow"
    fact.save()
    assert recall_texts(alice, "car blue") == []
    assert services.count_matches(alice, "car blue", mode="text") == 0
    assert recall_texts(alice, "bicycle") == ["my bicycle is yellow"]
    Fact.objects.filter(pk=fact.pk).update(text="my boat is green")
    assert recall_texts(alice, "bicycle yellow") == []
    assert recall_texts(alice, "boat") == ["my boat is green"]


def test_a_deleted_fact_is_not_returned(alice):
    gone = store(alice, "my old phone number is 555 0100", minutes_ago=5)
    kept = store(alice, "my new phone number is 555 0199", minutes_ago=1)
    gone.delete()
    assert recall_texts(alice, "phone number") == [kept.text]
    assert services.count_matches(alice, "phone", mode="text") == 1
    Fact.objects.filter(pk=kept.pk).delete()
    assert recall_texts(alice, "phone number") == []
    assert services.count_matches(alice, "phone", mode="text") == 0
    store(alice, "my new phone number is 555 0199")  # same text again after delete: stored afresh and found
    assert recall_texts(alice, "phone") == ["my new phone number is 555 0199"]


def test_numbers_and_non_latin_words_are_searchable(alice):
    store(alice, "my locker is 4711", minutes_ago=2)
    store(alice, "mein Lieblingsessen ist Käsespätzle", minutes_ago=1)
    assert recall_texts(alice, "4711") == ["my locker is 4711"]
    assert recall_texts(alice, "käsespätzle") == ["mein Lieblingsessen ist Käsespätzle"]
