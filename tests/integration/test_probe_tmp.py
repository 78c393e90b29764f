import pytest
def test_a(transactional_db, alice):
    from django.core.cache import cache
    cache.set("x", 1)
    assert cache.get("x") == 1
def test_b(db):
    from django.core.cache import cache
    assert cache.get("x") is None
