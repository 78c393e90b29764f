"""Recall by meaning (issue 35): the embedding model, the vector index on this database, the three modes through the
service, the recall tool and the API, editing and exporting facts, the backfill command and the system checks.
On a PostgreSQL without pgvector (CI's), the tests that need vectors are skipped and the fallback is tested instead;
pgvector itself: tests/memory/test_pgvector.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection

from memory import checks as memory_checks
from memory import embeddings, services, vectors
from memory.models import Fact
from tests.memory.conftest import FACTS, fact_url, store, texts

pytestmark = pytest.mark.django_db

CAR, HOME, ALLERGY, JOB = "My car is a red Volvo", "I live in Lisbon", "I am allergic to peanuts", "I work as a nurse"


@pytest.fixture
def alices(alice):
    for text in (CAR, HOME, ALLERGY, JOB):
        store(alice, text)
    return alice


def test_the_model_is_offline_and_its_vectors_are_unit_length():
    vectors_ = embeddings.embed([CAR, "what do I drive?", ""])
    assert vectors_.shape == (3, embeddings.DIM) and vectors_.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors_[:2], axis=1), 1.0, atol=1e-5)
    assert not vectors_[2].any()  # no token: the zero vector, never NaN
    assert np.array_equal(embeddings.from_bytes(embeddings.to_bytes(vectors_[0])), vectors_[0])


def test_a_remembered_fact_carries_its_vector_in_the_index(alices, index):
    fact = Fact.objects.get(owner=alices, text=CAR)
    assert np.allclose(embeddings.from_bytes(fact.embedding), embeddings.embed_one(CAR), atol=1e-6)
    assert [i for i, _ in vectors.nearest(alices.pk, embeddings.embed_one(CAR), 1)] == [fact.pk]


@pytest.mark.parametrize(
    ("query", "expected"),
    [("what do I drive?", CAR), ("where is my home?", HOME), ("what food should I avoid?", ALLERGY)],
)
def test_meaning_finds_what_words_cannot(alices, index, query, expected):
    assert expected not in texts(services.recall(alices, query, mode="text"))
    for mode in ("semantic", "hybrid"):
        found = services.recall(alices, query, limit=1, mode=mode)
        assert texts(found) == [expected], mode
        assert found[0].similarity > settings_floor()


def settings_floor() -> float:
    from django.conf import settings

    return settings.MEMORY_MIN_SIMILARITY


def test_hybrid_is_the_default_and_keeps_keyword_matches_first(alices, index):
    found = services.recall(alices, "Volvo", limit=2)
    assert found[0].text == CAR and found[0].words == ["volvo"]
    assert services.count_matches(alices, "Volvo") >= 1


@pytest.mark.parametrize("mode", ["text", "semantic", "hybrid"])
def test_another_users_facts_are_never_recalled_in_any_mode(alice, bob, mode):
    if mode != "text" and not vectors.available():
        pytest.skip("no vector index on this database")
    store(bob, "My car is a blue Tesla")
    store(bob, "Bob drives a truck to work")
    store(alice, "I ride a bicycle")
    for query in ("what do I drive?", "Tesla", "car", "truck"):
        assert "Tesla" not in str(texts(services.recall(alice, query, limit=20, mode=mode)))
        assert "truck" not in str(texts(services.recall(alice, query, limit=20, mode=mode)))
    assert all(f.owner_id == bob.pk for f in services.recall(bob, "what do I drive?", limit=20, mode=mode))


@pytest.mark.parametrize("mode", ["text", "semantic", "hybrid"])
def test_the_api_ranks_only_the_callers_facts_in_every_mode(api, alice, bob, mode):
    if mode != "text" and not vectors.available():
        pytest.skip("no vector index on this database")
    store(bob, "My car is a blue Tesla")
    store(alice, CAR)
    body = api.get(FACTS, {"q": "Tesla car", "mode": mode}).json()
    assert [r["text"] for r in body["results"]] == [CAR]
    assert body["results"][0]["words"] == ["car"]
    assert (body["results"][0]["similarity"] is None) == (mode == "text")


def test_the_recall_tool_says_how_each_fact_matched(alices, index):
    from agents.runs.runtime import tool_registry
    from agents.tools import ToolContext

    out = tool_registry().get("recall")({"query": "what car do I drive?", "limit": 1}, ToolContext(user_id=alices.pk))
    assert out.startswith(f"- {CAR} (words: car; meaning: 0.")


@pytest.mark.parametrize("mode", ["fuzzy", "TEXT", ""])
def test_an_unknown_mode_is_400(api, alice, mode):
    response = api.get(FACTS, {"q": "car", "mode": mode})
    assert response.status_code == 400
    assert "mode must be one of text, semantic, hybrid" in response.json()["mode"][0]


def test_recall_by_meaning_without_vectors_falls_back_to_text_and_says_so(api, alice, settings):
    settings.MEMORY_VECTORS = False
    store(alice, CAR)
    for mode in ("semantic", "hybrid", None):
        response = api.get(FACTS, {"q": "Volvo", **({"mode": mode} if mode else {})})
        assert response.status_code == 200
        assert response["X-Recall-Mode"] == "text"
        assert [(r["text"], r["similarity"]) for r in response.json()["results"]] == [(CAR, None)]
    assert Fact.objects.get(owner=alice).embedding is None  # remembered without a vector


def test_the_answer_names_the_mode_it_used(api, alice, index):
    store(alice, CAR)
    assert api.get(FACTS, {"q": "Volvo"})["X-Recall-Mode"] == "hybrid"
    assert api.get(FACTS, {"q": "Volvo", "mode": "semantic"})["X-Recall-Mode"] == "semantic"
    assert "X-Recall-Mode" not in api.get(FACTS)


# --- PATCH -------------------------------------------------------------------------------------------------------


def test_patch_edits_the_text_and_the_vector_follows(api, alices, index):
    fact = Fact.objects.get(owner=alices, text=CAR)
    response = api.patch(fact_url(fact.pk), {"text": "I have a dog called Rex"}, format="json")
    assert response.status_code == 200, response.content
    assert response.json() == {
        "id": fact.pk,
        "text": "I have a dog called Rex",
        "created_at": response.json()["created_at"],
    }
    fact.refresh_from_db()
    assert np.allclose(
        embeddings.from_bytes(fact.embedding), embeddings.embed_one("I have a dog called Rex"), atol=1e-6
    )
    assert texts(services.recall(alices, "what pet do I have?", limit=1, mode="semantic")) == [
        "I have a dog called Rex"
    ]
    assert "Volvo" not in str(texts(services.recall(alices, "Volvo", limit=5, mode="text")))
    assert texts(services.recall(alices, "Rex", mode="text")) == ["I have a dog called Rex"]


def test_patch_without_vectors_edits_the_text(api, alice, settings):
    settings.MEMORY_VECTORS = False
    fact = store(alice, CAR)
    assert api.patch(fact_url(fact.pk), {"text": "My car is green"}, format="json").status_code == 200
    assert texts(services.recall(alice, "green", mode="text")) == ["My car is green"]


def test_patch_of_another_users_fact_is_404_and_changes_nothing(api, alice, bob):
    theirs = store(bob, "bob's secret")
    for pk in (theirs.pk, 999999, "abc"):
        assert api.patch(fact_url(pk), {"text": "mine now"}, format="json").status_code == 404
    assert Fact.objects.get(pk=theirs.pk).text == "bob's secret"


@pytest.mark.parametrize(
    ("body", "field"), [({"text": ""}, "text"), ({"text": "x" * 1001}, "text"), ({}, "text"), ({"text": 5}, "text")]
)
def test_patch_with_bad_text_is_400_and_keeps_the_fact(api, alice, body, field):
    fact = store(alice, CAR)
    response = api.patch(fact_url(fact.pk), body, format="json")
    assert response.status_code == 400 and field in response.json()
    assert Fact.objects.get(pk=fact.pk).text == CAR


def test_patch_to_the_text_of_another_fact_is_409(api, alice):
    first, second = store(alice, CAR), store(alice, HOME)
    response = api.patch(fact_url(second.pk), {"text": "my car is a red volvo."}, format="json")
    assert response.status_code == 409
    assert "already have" in response.json()["detail"]
    assert Fact.objects.get(pk=second.pk).text == HOME and Fact.objects.get(pk=first.pk).text == CAR


# --- export ------------------------------------------------------------------------------------------------------


def test_jsonl_exports_every_own_fact_one_per_line(api, alice, bob):
    for i in range(60):  # more than a page
        store(alice, f"fact number {i}", minutes_ago=100 - i)
    store(bob, "not alice's")
    response = api.get(FACTS, {"format": "jsonl"})
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/x-ndjson")
    lines = b"".join(response.streaming_content).decode().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["text"] for r in rows] == [f"fact number {i}" for i in reversed(range(60))]
    assert set(rows[0]) == {"id", "text", "created_at"}
    assert rows[0]["created_at"] == api.get(FACTS).json()["results"][0]["created_at"]


def test_jsonl_checks_paging_parameters_as_a_page_does_though_it_exports_everything(api, alice):
    store(alice, CAR)

    bad = api.get(FACTS, {"format": "jsonl", "limit": "-131071"})
    worse = api.get(FACTS, {"format": "jsonl", "offset": "x"})
    fine = api.get(FACTS, {"format": "jsonl", "limit": "1"})

    assert (bad.status_code, worse.status_code) == (400, 400)
    assert "limit" in bad.json() and "offset" in worse.json()
    assert len(b"".join(fine.streaming_content).decode().splitlines()) == 1


def test_jsonl_with_q_exports_the_ranked_facts(api, alice, bob):
    store(alice, CAR)
    store(alice, HOME)
    store(bob, "My car is a blue Tesla")
    response = api.get(FACTS, {"format": "jsonl", "q": "car", "mode": "text"})
    assert response.status_code == 200
    rows = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert [(r["text"], r["words"], r["similarity"]) for r in rows] == [(CAR, ["car"], None)]


# --- backfill, checks ---------------------------------------------------------------------------------------------


def test_embed_facts_gives_earlier_facts_their_vectors(alice, index, settings, capsys):
    settings.MEMORY_VECTORS = False
    store(alice, CAR)
    store(alice, HOME)
    settings.MEMORY_VECTORS = True
    assert services.recall(alice, "what do I drive?", mode="semantic") == []  # no vectors yet
    call_command("embed_facts", verbosity=0)
    assert "Embedded 2 fact(s)." in capsys.readouterr().out
    assert texts(services.recall(alice, "what do I drive?", limit=1, mode="semantic")) == [CAR]
    call_command("embed_facts", verbosity=0)
    assert "Embedded 0 fact(s)." in capsys.readouterr().out  # nothing left to do


def test_embed_facts_refuses_without_vectors(settings):
    settings.MEMORY_VECTORS = False
    with pytest.raises(CommandError, match="MEMORY_VECTORS is off"):
        call_command("embed_facts")
    settings.MEMORY_VECTORS = True
    with pytest.raises(CommandError, match="--batch"):
        call_command("embed_facts", batch=0)


def test_the_checks_pass_with_an_index_of_the_models_dimension(index):
    assert memory_checks.check_vector_index(databases=["default"]) == []
    assert vectors.index_dim() == embeddings.DIM


@pytest.mark.django_db(transaction=True)
def test_an_index_of_another_dimension_is_an_error_and_never_queried(alice, index):
    store(alice, CAR)
    vectors.uninstall()
    vectors.install(dim=128)
    try:
        errors = memory_checks.check_vector_index(databases=["default"])
        assert [e.id for e in errors] == ["memory.E002"] and errors[0].level == checks.ERROR
        assert "embed_facts --rebuild" in errors[0].hint
        assert not vectors.available()  # so recall never asks the index for 256-dimension neighbours
        assert texts(services.recall(alice, "Volvo")) == [CAR]  # text recall, not an error at query time
        call_command("embed_facts", rebuild=True, verbosity=0)
        assert memory_checks.check_vector_index(databases=["default"]) == []
        assert texts(services.recall(alice, "what do I drive?", limit=1, mode="semantic")) == [CAR]
    finally:
        vectors.uninstall()
        vectors.install()


@pytest.mark.django_db(transaction=True)
def test_without_an_index_the_check_warns_and_says_how(alice):
    had = vectors.available()
    vectors.uninstall()
    try:
        warnings = memory_checks.check_vector_index(databases=["default"])
        assert [w.id for w in warnings] == ["memory.W001"]
        assert ("migrate" if connection.vendor == "sqlite" else "pgvector") in warnings[0].hint
        assert services.default_mode() == "text"
    finally:
        if had:
            vectors.install()


def test_the_admin_shows_a_facts_nearest_neighbours(admin_client, alices, index):
    fact = Fact.objects.get(owner=alices, text=ALLERGY)
    page = admin_client.get(f"/admin/memory/fact/{fact.pk}/change/").content.decode()
    assert "nearest facts of this user" in page.lower()
    assert sum(text in page for text in (CAR, HOME, JOB)) >= 1


def test_an_unknown_format_is_400(api, alice):
    response = api.get(FACTS, {"format": "csv"})
    assert response.status_code == 400
    assert response.json() == {"format": ["format must be json or jsonl."]}
