"""Helpers for the memory tests: facts with known ages, URLs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memory import services, vectors
from memory.models import Fact

FACTS = "/api/v1/memory/facts"
RUNS = "/api/v1/runs"


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Users are made per test; the default PBKDF2 rounds would dominate this suite's run time."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def fact_url(fact_id) -> str:
    return f"{FACTS}/{fact_id}"


def store(user, text: str, *, minutes_ago: float | None = None, run=None) -> Fact:
    """A fact stored through the service; `minutes_ago` pins created_at so ordering is deterministic."""
    fact, created = services.remember(user, text, run=run)
    assert created, text
    if minutes_ago is not None:
        Fact.objects.filter(pk=fact.pk).update(created_at=timezone.now() - timedelta(minutes=minutes_ago))
        fact.refresh_from_db()
    return fact


def texts(facts) -> list[str]:
    return [f.text for f in facts]


@pytest.fixture
def index():
    """The database's vector index (its kind); a test that needs one is skipped without it."""
    if not vectors.available():
        pytest.skip(f"no vector index on this database: {vectors.why_not()}")
    return vectors.kind()
