"""The console's API keys page (agents/admin/keys.py): every user's keys for staff with the model's permissions, never
a secret nor a hash, filters by owner and revocation, "Revoke selected keys", nothing added or edited."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from agents.keys import services as keys
from agents.models import ApiKey
from tests.conftest import make_user
from tests.console.conftest import grant, logged_in

pytestmark = pytest.mark.django_db

KEYS = "/admin/agents/apikey/"
RUNS = "/api/v1/runs"


def key_of(owner, name: str, scopes=("runs:read",)) -> tuple[ApiKey, str]:
    return keys.create_key(owner, name=name, scopes=list(scopes))


def works(secret: str) -> bool:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client.get(RUNS).status_code == 200


@pytest.fixture
def alice_key(alice):
    return key_of(alice, "alice laptop", ["runs:read", "memory"])


@pytest.fixture
def bob_key(bob):
    return key_of(bob, "bob ci")


@pytest.fixture
def root():
    return logged_in(make_user("root", staff=True, superuser=True))


def revoke(client, *rows: ApiKey):
    return client.post(KEYS, {"action": "revoke_selected", "_selected_action": [str(r.pk) for r in rows]}, follow=True)


def test_a_superuser_sees_every_users_keys_and_never_a_secret(root, alice_key, bob_key):
    page = root.get(KEYS)

    assert page.status_code == 200
    text = page.content.decode()
    for key, secret in (alice_key, bob_key):
        assert key.name in text and key.prefix in text
        assert secret.split("_", 2)[2] not in text and key.hashed_key not in text
    assert "runs:read, memory" in text
    for column in ("owner", "prefix", "scopes", "created at", "last used at", "expires at", "revoked at"):
        assert column in text.lower(), column


def test_a_keys_page_shows_no_hash_and_cannot_be_edited(root, alice_key):
    key, secret = alice_key
    page = root.get(f"{KEYS}{key.pk}/change/")

    assert page.status_code == 200
    text = page.content.decode()
    assert key.hashed_key not in text and secret.split("_", 2)[2] not in text
    assert 'name="name"' not in text and 'name="_save"' not in text  # read-only: no field, no save button
    root.post(f"{KEYS}{key.pk}/change/", {"name": "renamed", "scopes": '["runs:write"]'})
    assert ApiKey.objects.get(pk=key.pk).name == "alice laptop"


def test_nothing_is_added_here(root):
    assert root.get(f"{KEYS}add/").status_code == 403
    assert f'href="{KEYS}add/"' not in root.get(KEYS).content.decode()


def test_the_filters_by_owner_and_revocation(root, alice, alice_key, bob_key):
    keys.revoke_key(bob_key[0])

    by_owner = root.get(KEYS, {"owner__id__exact": alice.pk}).content.decode()
    revoked = root.get(KEYS, {"revoked": "yes"}).content.decode()
    usable = root.get(KEYS, {"revoked": "no"}).content.decode()

    assert "alice laptop" in by_owner and "bob ci" not in by_owner
    assert "bob ci" in revoked and "alice laptop" not in revoked
    assert "alice laptop" in usable and "bob ci" not in usable


def test_revoke_selected_keys_stops_them_at_once(root, alice_key, bob_key):
    (alice_row, alice_secret), (bob_row, bob_secret) = alice_key, bob_key
    assert works(alice_secret) and works(bob_secret)

    response = revoke(root, alice_row)

    assert "Revoked 1 key." in response.content.decode()
    assert not works(alice_secret) and works(bob_secret)
    assert ApiKey.objects.get(pk=alice_row.pk).revoked_at is not None
    first = ApiKey.objects.get(pk=alice_row.pk).revoked_at
    again = revoke(root, alice_row, bob_row)
    assert "Revoked 1 key. 1 was revoked already." in again.content.decode()
    assert ApiKey.objects.get(pk=alice_row.pk).revoked_at == first
    assert not works(bob_secret)


def test_staff_need_the_models_permissions(alice_key):
    staff = make_user("sam", staff=True)
    assert logged_in(staff).get(KEYS).status_code == 403

    viewer = logged_in(grant(staff, "view_apikey"))
    assert viewer.get(KEYS).status_code == 200
    assert "revoke_selected" not in viewer.get(KEYS).content.decode()  # seeing is not revoking
    revoke(viewer, alice_key[0])
    assert ApiKey.objects.get(pk=alice_key[0].pk).revoked_at is None

    revoker = logged_in(grant(staff, "change_apikey"))
    assert "revoke_selected" in revoker.get(KEYS).content.decode()
    revoke(revoker, alice_key[0])
    assert ApiKey.objects.get(pk=alice_key[0].pk).revoked_at is not None


def test_a_user_who_is_not_staff_sees_nothing(alice, alice_key):
    page = logged_in(alice).get(KEYS)
    assert page.status_code == 302 and "/login/" in page["Location"]
