"""Migration 0007 (issue 35): facts remembered before the vector index existed get their vectors when it is built."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from memory import services, vectors
from memory.models import Fact
from tests.memory.conftest import texts

pytestmark = pytest.mark.django_db(transaction=True)


def migrate(target: str) -> None:
    executor = MigrationExecutor(connection)
    executor.migrate([("memory", target)])
    vectors.forget()


def test_0007_builds_the_index_and_embeds_the_facts_remembered_before_it(alice, settings):
    if not vectors.available():
        pytest.skip(f"no vector index on this database: {vectors.why_not()}")
    migrate("0006_fact_embedding")
    try:
        assert not vectors.available()
        settings.MEMORY_VECTORS = False  # remembered as before this change: no vector
        services.remember(alice, "My car is a red Volvo")
        services.remember(alice, "I live in Lisbon")
        settings.MEMORY_VECTORS = True
        assert Fact.objects.filter(embedding__isnull=True).count() == 2
    finally:
        migrate("0007_vector_index")
    assert vectors.available()
    assert not Fact.objects.filter(embedding__isnull=True).exists()
    assert texts(services.recall(alice, "what do I drive?", limit=1, mode="semantic")) == ["My car is a red Volvo"]
