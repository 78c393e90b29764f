"""Idempotency-Key on POST /api/v1/runs."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agents.models import IdempotencyKey, Run
from tests.api.conftest import ARITHMETIC, RUNS, run_count
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def _post(client, body: dict, key: str):
    return client.post(RUNS, body, format="json", HTTP_IDEMPOTENCY_KEY=key)


def test_same_key_same_body_replays_the_first_response(api):
    body = {"input": ARITHMETIC}
    first = _post(api, body, "key-1")
    assert first.status_code == 201
    second = _post(api, body, "key-1")
    assert second.status_code == 201
    assert second.json()["id"] == first.json()["id"]
    assert second.json() == first.json()
    assert run_count() == 1


def test_replay_of_a_step_run_does_not_advance_it(api):
    body = {"input": ARITHMETIC, "mode": "step"}
    first = _post(api, body, "k").json()
    second = _post(api, body, "k").json()
    assert second["id"] == first["id"]
    assert second["turns"] == 1
    assert Run.objects.get(pk=first["id"]).turns == 1


def test_body_key_order_does_not_matter(api):
    first = _post(api, {"input": ARITHMETIC, "max_turns": 8}, "k")
    second = api.post(
        RUNS,
        data='{"max_turns": 8, "input": "What is 12*7, plus 1?"}',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="k",
    )
    assert second.status_code == 201
    assert second.json()["id"] == first.json()["id"]
    assert run_count() == 1


def test_same_key_different_body_is_422(api):
    first = _post(api, {"input": ARITHMETIC}, "key-1")
    assert first.status_code == 201
    response = _post(api, {"input": "What is 2+2?"}, "key-1")
    assert response.status_code == 422
    assert "detail" in response.json()
    assert run_count() == 1


def test_without_a_key_every_post_creates_a_run(api):
    create = {"input": ARITHMETIC}
    assert api.post(RUNS, create, format="json").json()["id"] != api.post(RUNS, create, format="json").json()["id"]
    assert run_count() == 2


def test_different_keys_create_different_runs(api):
    first = _post(api, {"input": ARITHMETIC}, "a").json()["id"]
    second = _post(api, {"input": ARITHMETIC}, "b").json()["id"]
    assert first != second
    assert run_count() == 2


def test_key_of_256_characters_is_400(api):
    response = _post(api, {"input": ARITHMETIC}, "k" * 256)
    assert response.status_code == 400
    assert "Idempotency-Key" in str(response.json())
    assert run_count() == 0
    assert IdempotencyKey.objects.count() == 0


def test_key_of_255_characters_is_accepted(api):
    first = _post(api, {"input": ARITHMETIC}, "k" * 255)
    assert first.status_code == 201
    assert _post(api, {"input": ARITHMETIC}, "k" * 255).json()["id"] == first.json()["id"]
    assert run_count() == 1


def test_keys_are_per_user(api, bob):
    body = {"input": ARITHMETIC}
    mine = _post(api, body, "shared").json()
    theirs = _post(client_for(bob), body, "shared")
    assert theirs.status_code == 201
    assert theirs.json()["id"] != mine["id"]
    assert Run.objects.get(pk=theirs.json()["id"]).owner == bob
    assert run_count() == 2
    # and bob's key with a different body is not a mismatch with alice's
    assert _post(client_for(bob), {"input": "What is 1+1?"}, "shared2").status_code == 201


def test_in_progress_key_is_409(api, alice):
    body = {"input": ARITHMETIC}
    from agents.runs.idempotency import fingerprint

    IdempotencyKey.objects.create(user=alice, key="busy", fingerprint=fingerprint(body), status_code=None)
    response = _post(api, body, "busy")
    assert response.status_code == 409
    assert "detail" in response.json()
    assert run_count() == 0


def test_in_progress_key_with_another_body_is_not_a_new_run(api, alice):
    IdempotencyKey.objects.create(user=alice, key="busy", fingerprint="0" * 64, status_code=None)
    response = _post(api, {"input": ARITHMETIC}, "busy")
    assert response.status_code in (409, 422)
    assert run_count() == 0


def test_key_older_than_24_hours_is_forgotten(api):
    body = {"input": ARITHMETIC}
    first = _post(api, body, "old").json()["id"]
    IdempotencyKey.objects.filter(key="old").update(created_at=timezone.now() - timedelta(hours=24, minutes=1))
    second = _post(api, body, "old")
    assert second.status_code == 201
    assert second.json()["id"] != first
    assert run_count() == 2
    # the new response is the one remembered now
    assert _post(api, body, "old").json()["id"] == second.json()["id"]


def test_key_younger_than_24_hours_is_remembered(api):
    body = {"input": ARITHMETIC}
    first = _post(api, body, "recent").json()["id"]
    IdempotencyKey.objects.filter(key="recent").update(created_at=timezone.now() - timedelta(hours=23))
    assert _post(api, body, "recent").json()["id"] == first
    assert run_count() == 1


def test_expired_key_with_another_body_is_not_a_mismatch(api):
    _post(api, {"input": ARITHMETIC}, "old")
    IdempotencyKey.objects.filter(key="old").update(created_at=timezone.now() - timedelta(days=2))
    assert _post(api, {"input": "What is 2+2?"}, "old").status_code == 201


def test_a_failed_request_does_not_burn_the_key(api):
    bad = _post(api, {"input": ""}, "retry")
    assert bad.status_code == 400
    assert run_count() == 0
    # the same (bad) body again is validated again, not replayed from a stored 201
    assert _post(api, {"input": ""}, "retry").status_code == 400
    # and the key is free for a corrected body
    good = _post(api, {"input": ARITHMETIC}, "retry")
    assert good.status_code == 201
    assert run_count() == 1


def test_replayed_paused_run_keeps_its_first_response(api, no_search_network):
    body = {"input": "search python"}
    first = _post(api, body, "p").json()
    assert first["status"] == "awaiting_approval"
    again = _post(api, body, "p")
    assert again.status_code == 201
    assert again.json() == first
    assert run_count() == 1


# --- keys that outlive a crash (issue 10.6) -----------------------------------------------------------------------


def _in_progress(user, key: str, age: timedelta, body: dict) -> IdempotencyKey:
    """A key whose first request never finished (the process died mid-way), created `age` ago."""
    from agents.runs.idempotency import fingerprint

    record = IdempotencyKey.objects.create(user=user, key=key, fingerprint=fingerprint(body))
    IdempotencyKey.objects.filter(pk=record.pk).update(created_at=timezone.now() - age)
    return record


def test_a_key_whose_request_may_still_run_is_409(api, alice):
    body = {"input": ARITHMETIC}
    _in_progress(alice, "k", timedelta(seconds=1), body)  # its request is still before its run's insert
    response = _post(api, body, "k")
    assert response.status_code == 409
    assert 1 <= int(response["Retry-After"]) <= 31
    assert run_count() == 0


def test_a_key_abandoned_by_a_dead_request_is_taken_over(api, alice):
    body = {"input": ARITHMETIC}
    # No run was ever bound to it, and two leases have passed: its request died before its run existed (issue 39:
    # a key was held 11 minutes after a kill -9).
    _in_progress(alice, "k", timedelta(seconds=31), body)

    first = _post(api, body, "k")
    assert first.status_code == 201
    again = _post(api, body, "k")
    assert again.status_code == 201 and again.json()["id"] == first.json()["id"]
    assert run_count() == 1


def test_keys_older_than_24_hours_are_deleted_on_the_next_keyed_request(api, alice, bob):
    old = [_in_progress(u, f"old-{u.pk}", timedelta(hours=25), {"input": "x"}) for u in (alice, bob)]
    fresh = _in_progress(bob, "fresh", timedelta(hours=1), {"input": "x"})

    assert _post(api, {"input": ARITHMETIC}, "new").status_code == 201

    remaining = set(IdempotencyKey.objects.values_list("pk", flat=True))
    assert not remaining & {r.pk for r in old}
    assert fresh.pk in remaining
