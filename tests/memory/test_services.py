"""memory.services.remember: storing, de-duplication, validation, ownership and the run link."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agents.models import Run
from memory import services
from memory.models import MAX_FACT_CHARS, Fact

pytestmark = pytest.mark.django_db


def make_run(owner) -> Run:
    return Run.objects.create(
        owner=owner,
        input="remember that x",
        provider="demo",
        model="demo-1",
        tools=["remember"],
        sensitive_tools=[],
        deadline=timezone.now() + timedelta(seconds=60),
    )


def test_remember_stores_a_fact_for_the_user(alice):
    fact, created = services.remember(alice, "  My favourite   colour is teal ")
    assert created is True
    stored = Fact.objects.get(pk=fact.pk)
    assert stored.owner == alice
    assert stored.text == "My favourite colour is teal"  # whitespace collapsed and trimmed
    assert stored.created_at is not None
    assert stored.run is None
    assert Fact.objects.count() == 1


@pytest.mark.parametrize(
    "again",
    [
        "My favourite colour is teal",
        "my FAVOURITE colour is TEAL",
        "My   favourite\tcolour\nis teal",
        "My favourite colour is teal.",
        "  my favourite colour is teal . ",
    ],
)
def test_the_same_text_twice_keeps_one_fact(alice, again):
    first, created = services.remember(alice, "My favourite colour is teal")
    assert created is True
    second, created_again = services.remember(alice, again)
    assert created_again is False
    assert second.pk == first.pk
    assert second.text == "My favourite colour is teal"  # the first wording is kept
    assert Fact.objects.filter(owner=alice).count() == 1


def test_a_different_text_is_a_new_fact(alice):
    services.remember(alice, "My favourite colour is teal")
    _, created = services.remember(alice, "My favourite colour is red")
    assert created is True
    assert Fact.objects.filter(owner=alice).count() == 2


def test_the_same_text_for_two_users_is_two_facts(alice, bob):
    a, created_a = services.remember(alice, "I live in Lyon")
    b, created_b = services.remember(bob, "I live in Lyon.")
    assert created_a and created_b
    assert a.pk != b.pk
    assert (a.owner, b.owner) == (alice, bob)


def test_normalise():
    assert services.normalise("  Hello   WORLD. ") == "hello world"
    assert services.normalise("Straße!?") == "strasse"
    assert services.normalise("ｔｅａ") == "tea"  # NFKC folds full-width letters


@pytest.mark.parametrize("text", ["", "   ", "\n\t "])
def test_empty_text_is_rejected(alice, text):
    with pytest.raises(services.MemoryError_):
        services.remember(alice, text)
    assert Fact.objects.count() == 0


def test_over_long_text_is_rejected(alice):
    with pytest.raises(services.MemoryError_):
        services.remember(alice, "x" * (MAX_FACT_CHARS + 1))
    assert Fact.objects.count() == 0


def test_text_at_the_limit_is_accepted(alice):
    fact, created = services.remember(alice, "x" * MAX_FACT_CHARS)
    assert created
    assert len(fact.text) == MAX_FACT_CHARS


def test_the_limit_counts_collapsed_whitespace(alice):
    # 1000 characters of text once the inner run of spaces is collapsed: accepted.
    fact, _ = services.remember(alice, "a" * 500 + " " * 50 + "b" * 499)
    assert len(fact.text) == MAX_FACT_CHARS


def test_deleting_a_user_deletes_their_facts(alice, bob):
    services.remember(alice, "alice likes tea")
    services.remember(alice, "alice lives in Lyon")
    kept, _ = services.remember(bob, "bob likes tea")
    User.objects.filter(pk=alice.pk).delete()
    assert list(Fact.objects.all()) == [kept]
    # and the search index forgot them too
    assert [f.pk for f in services.recall(bob, "tea lyon", limit=10)] == [kept.pk]


def test_the_run_link_is_nullable_and_set_when_given(alice):
    run = make_run(alice)
    without, _ = services.remember(alice, "no run here")
    with_run, _ = services.remember(alice, "stored during a run", run=run)
    assert Fact.objects.get(pk=without.pk).run_id is None
    assert Fact.objects.get(pk=with_run.pk).run_id == run.pk
    assert list(run.facts.all()) == [with_run]


def test_deleting_the_run_keeps_the_fact(alice):
    run = make_run(alice)
    fact, _ = services.remember(alice, "outlives its run", run=run)
    run.delete()
    fact.refresh_from_db()
    assert fact.run_id is None
