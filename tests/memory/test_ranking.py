"""Recall's ranking at speed (issue 52): the SQLite scan of sqlite-vec's chunks against sqlite-vec's own search,
hybrid's candidates by words and its fusion, hydration by id, and each user's isolation through all of them."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from django.db import connection

from memory import backfill, embeddings, services, vectors
from memory.models import Fact
from tests.memory.conftest import store, texts

pytestmark = pytest.mark.django_db


@pytest.fixture
def sqlite_vec(index):
    if index != "sqlite-vec":
        pytest.skip("sqlite-vec only")
    return index


def _many(user, count: int, offset: int = 0) -> list[Fact]:
    """`count` facts of distinct wording (more than one chunk's 1,024 slots when asked)."""
    texts_ = [
        f"note {offset + n}: item {(offset + n) * 7919 % 10007} of colour {(offset + n) % 13}" for n in range(count)
    ]
    facts = Fact.objects.bulk_create(Fact(owner=user, text=t, digest=services._digest(t)) for t in texts_)
    backfill.embed_missing()
    return facts


def _hamming(a: np.ndarray, b: np.ndarray) -> int:
    return int(np.bitwise_count(np.bitwise_xor(vectors.sign_bits(a), vectors.sign_bits(b))).sum())


def test_the_sign_bits_are_packed_as_sqlite_vec_packs_them(sqlite_vec):
    vector = embeddings.embed_one("My car is a red Volvo")
    with connection.cursor() as cursor:
        cursor.execute("SELECT vec_quantize_binary(%s)", [embeddings.to_bytes(vector)])
        assert bytes(cursor.fetchone()[0]) == vectors.sign_bits(vector).tobytes()


def test_the_chunk_scan_finds_what_sqlite_vecs_search_finds(alice, bob, sqlite_vec):
    _many(alice, 1500)  # two chunks
    _many(bob, 300, offset=5000)
    stored = {f.pk: embeddings.from_bytes(f.embedding) for f in Fact.objects.filter(owner=alice)}
    for query in ("item 42 of colour 3", "note 1200", "what colour is it?"):
        vector = embeddings.embed_one(query)
        scanned = vectors._sqlite_shortlist(connection, alice.pk, vector, 50)
        searched = vectors._sqlite_vec_shortlist(connection, alice.pk, vector, 50)
        assert len(scanned) == 50 and set(scanned) <= set(stored)
        # the same distances (ties at the 50th may pick other facts), nearest first
        ours = [_hamming(stored[i], vector) for i in scanned]
        theirs = [_hamming(stored[i], vector) for i in searched]
        assert ours == sorted(ours) and ours == theirs


def test_the_chunk_scan_skips_deleted_and_other_users_facts(alice, bob, sqlite_vec):
    facts = _many(alice, 40)
    bobs = _many(bob, 40, offset=100)
    Fact.objects.filter(pk__in=[f.pk for f in facts[:10]]).delete()
    found = vectors._sqlite_shortlist(connection, alice.pk, embeddings.embed_one("note 3: item"), 200)
    assert sorted(found) == sorted(f.pk for f in facts[10:])
    assert not set(found) & {f.pk for f in bobs}


def test_an_edited_fact_is_scanned_with_its_new_vector(alice, sqlite_vec):
    _many(alice, 30)
    car = store(alice, "I like tea")
    services.edit(alice, car.pk, "My car is a red Volvo")
    found = vectors._sqlite_shortlist(connection, alice.pk, embeddings.embed_one("My car is a red Volvo"), 1)
    assert found == [car.pk]
    assert vectors._sqlite_shortlist(connection, alice.pk, embeddings.embed_one("x"), 500).count(car.pk) == 1


def test_an_unknown_layout_falls_back_to_sqlite_vecs_search(alice, sqlite_vec, caplog):
    _many(alice, 20)
    car = store(alice, "My car is a red Volvo")
    connection._memory_vec_layout = False
    try:
        assert vectors._sqlite_shortlist(connection, alice.pk, embeddings.embed_one("car"), 5) is None
        assert vectors.nearest(alice.pk, embeddings.embed_one("My car is a red Volvo"), 1)[0][0] == car.pk
    finally:
        vectors.forget()
    with caplog.at_level(logging.WARNING, logger="memory.vectors"):
        assert vectors._sqlite_layout(connection) is True  # looked at again: the real tables are known
    assert not caplog.records


def test_semantic_recall_keeps_the_nearest_fifty_pages_and_count(alice, bob, index):
    _many(alice, 120)
    _many(bob, 60, offset=1000)
    ranked = services.Ranked(alice, "item of colour 5", "semantic")
    assert ranked.count() == services.MAX_RANKED
    pages = ranked.page(30) + ranked.page(30, offset=30)
    assert len(pages) == services.MAX_RANKED and len({f.pk for f in pages}) == services.MAX_RANKED
    assert all(f.owner_id == alice.pk for f in pages)
    similarities = [f.similarity for f in pages]
    assert similarities == sorted(similarities, reverse=True)


def test_word_candidates_tell_which_words_each_fact_holds(alice, bob, index):
    red = store(alice, "My car is a red Volvo")
    blue = store(alice, "My bike is blue")
    both = store(alice, "The blue Volvo was sold")
    store(bob, "Bob's blue Volvo")
    terms = services.query_terms("blue Volvo")
    hits, similarity = services._word_candidates(alice.pk, terms, embeddings.embed_one("blue Volvo"))
    assert hits == {red.pk: {1}, blue.pk: {0}, both.pk: {0, 1}}  # never Bob's
    assert set(similarity) <= set(hits)


def test_word_candidates_are_bounded_per_word(alice, index):
    _many(alice, 3 * services.MAX_RANKED)  # every fact holds "note"
    hits, _ = services._word_candidates(alice.pk, ["note"], embeddings.embed_one("note"))
    assert len(hits) == services.MAX_RANKED


def test_fusion_counts_words_only_for_a_majority_of_the_query():
    similarity = {1: 0.50, 2: 0.46, 3: 0.47, 4: 0.01}
    # two words: fact 2 holds one (no bonus), fact 3 both; fact 4, below the floor, stays for its words
    hits = {2: {0}, 3: {0, 1}, 4: {0, 1}}
    order = services.fuse(similarity, hits, terms=2, floor=0.05, weight=0.1)
    assert order == [3, 1, 2, 4]
    # one word of one: a bonus; a word many candidates hold counts less
    order = services.fuse({1: 0.50, 2: 0.44, 3: 0.30}, {2: {0}}, terms=1, floor=0.05, weight=0.1)
    assert order == [2, 1, 3]
    crowded = services.fuse({1: 0.50, 2: 0.44, 3: 0.30}, {2: {0}, 3: {0}}, terms=1, floor=0.05, weight=0.1)
    assert crowded == [1, 2, 3]
    assert services.fuse({1: 0.01}, {}, terms=1, floor=0.05, weight=0.1) == []


def test_hybrid_puts_a_fact_holding_every_query_word_first(alice, index):
    _many(alice, 60)
    target = store(alice, "The blue Volvo was sold in May")
    store(alice, "My bike is blue")
    found = services.recall(alice, "blue Volvo", limit=3, mode="hybrid")
    assert found[0].pk == target.pk and found[0].words == ["blue", "volvo"] and found[0].similarity is not None


@pytest.mark.parametrize("mode", ["text", "semantic", "hybrid"])
def test_hydration_by_id_never_returns_another_users_fact(alice, bob, mode):
    mine = store(alice, "My car is a red Volvo")
    theirs = store(bob, "Bob's car is a red Volvo")
    assert services._by_id(alice.pk, [mine.pk, theirs.pk]) == {mine.pk: mine}
    assert texts(services.recall(alice, "red Volvo car", mode=mode)) == ["My car is a red Volvo"]


def test_a_postgresql_backfill_refreshes_the_planners_statistics(alice, index):
    """Otherwise PostgreSQL plans the nearest-facts query on statistics saying `vec` is all null, and skips HNSW."""
    if index != "pgvector":
        pytest.skip("pgvector only")
    Fact.objects.bulk_create(
        [Fact(owner=alice, text=f"unembedded {n}", digest=services._digest(f"unembedded {n}")) for n in range(20)]
    )
    null_share = (
        "SELECT null_frac FROM pg_stats WHERE schemaname = current_schema() "
        "AND tablename = 'memory_fact' AND attname = 'vec'"
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE memory_fact")
        cursor.execute(null_share)
        assert cursor.fetchone()[0] == 1.0
        assert backfill.embed_missing() == 20
        cursor.execute(null_share)
        assert cursor.fetchone()[0] == 0.0
