"""Authentication: token or session (with CSRF); 401 with WWW-Authenticate everywhere but health/schema/docs."""

from __future__ import annotations

import pytest
from django.middleware.csrf import _get_new_csrf_string
from rest_framework.test import APIClient

from tests.api.conftest import ARITHMETIC, DOCS, HEALTH, RUNS, SCHEMA, SEED, TOOLS, create_run, run_count, run_url

pytestmark = pytest.mark.django_db

SOME_ID = "00000000-0000-0000-0000-000000000001"

PROTECTED = [
    ("get", RUNS),
    ("get", RUNS + "/"),
    ("post", RUNS),
    ("post", RUNS + "/"),
    ("get", run_url(SOME_ID)),
    ("delete", run_url(SOME_ID)),
    ("post", run_url(SOME_ID, "advance")),
    ("post", run_url(SOME_ID, "cancel")),
    ("get", TOOLS),
    ("post", f"{TOOLS}/calculator/invoke"),
    ("post", f"{TOOLS}/nope/invoke"),
    ("post", SEED),
    ("post", SEED + "/"),
    ("get", "/api/v1/memory/facts"),
    ("post", "/api/v1/memory/facts"),
]


def _call(client, method: str, path: str):
    body = {"input": ARITHMETIC, "arguments": {"expression": "1+1"}, "text": "x"}
    if method == "post":
        return client.post(path, body, format="json")
    return getattr(client, method)(path)


@pytest.mark.parametrize(("method", "path"), PROTECTED)
def test_no_credentials_is_401_with_www_authenticate(method, path):
    response = _call(APIClient(), method, path)
    assert response.status_code == 401, (method, path, response.status_code)
    assert response.headers.get("WWW-Authenticate", "").startswith("Token")
    assert "detail" in response.json()
    assert run_count() == 0


@pytest.mark.parametrize(("method", "path"), PROTECTED)
def test_invalid_token_is_401(method, path):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token not-a-real-token")
    response = _call(client, method, path)
    assert response.status_code == 401
    assert response.headers.get("WWW-Authenticate")
    assert run_count() == 0


@pytest.mark.parametrize("header", ["Token", "Token a b", "Bearer abc", "Basic Zm9vOmJhcg=="])
def test_malformed_authorization_is_401_or_ignored(header):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    response = client.get(RUNS)
    assert response.status_code == 401


def test_inactive_users_token_is_401(alice, api):
    alice.is_active = False
    alice.save()
    assert api.get(RUNS).status_code == 401


def test_valid_token_works(api):
    assert api.get(RUNS).status_code == 200


@pytest.mark.parametrize("path", [HEALTH, HEALTH + "/", SCHEMA, SCHEMA + "/", DOCS, DOCS + "/"])
def test_open_routes_need_no_credentials(path):
    assert APIClient().get(path).status_code == 200


def _session_client(user) -> APIClient:
    client = APIClient(enforce_csrf_checks=True)
    assert client.login(username=user.username, password="pw-" + user.username)
    return client


def test_session_auth_works_for_get(alice):
    client = _session_client(alice)
    assert client.get(RUNS).status_code == 200
    assert client.get(TOOLS).status_code == 200


def test_session_post_without_csrf_is_refused(alice):
    client = _session_client(alice)
    response = create_run(client)
    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]
    assert run_count() == 0
    invoke = client.post(f"{TOOLS}/calculator/invoke", {"arguments": {"expression": "1"}}, format="json")
    assert invoke.status_code == 403
    assert client.post(SEED, {"input": ARITHMETIC}, format="json").status_code == 403


def test_session_post_with_csrf_token_is_accepted(alice):
    client = _session_client(alice)
    token = _get_new_csrf_string()
    client.cookies["csrftoken"] = token
    response = client.post(RUNS, {"input": ARITHMETIC}, format="json", HTTP_X_CSRFTOKEN=token)
    assert response.status_code == 201
    assert response.json()["output"] == "85"


def test_session_delete_without_csrf_is_refused(alice, api):
    run_id = create_run(api).json()["id"]
    client = _session_client(alice)
    assert client.delete(run_url(run_id)).status_code == 403
    assert client.get(run_url(run_id)).status_code == 200


def test_token_client_needs_no_csrf(alice):
    from tests.conftest import client_for

    client = client_for(alice)
    client.handler.enforce_csrf_checks = True
    assert create_run(client).status_code == 201


def test_the_prepared_token_lookup_gives_what_drfs_gives(alice):
    """FastTokenAuthentication: the same user and token, attribute for attribute, as DRF's ORM look-up."""
    from rest_framework.authentication import TokenAuthentication
    from rest_framework.authtoken.models import Token

    from agents.api.authentication import FastTokenAuthentication

    key = Token.objects.get_or_create(user=alice)[0].key
    ours, theirs = (
        FastTokenAuthentication().authenticate_credentials(key),
        TokenAuthentication().authenticate_credentials(key),
    )

    def attributes(obj) -> dict:
        return {name: value for name, value in vars(obj).items() if not name.startswith("_") and name != "owner_facts"}

    assert attributes(ours[0]) == attributes(theirs[0]) and ours[0].last_login is None  # converted as the ORM does
    # What ours adds: the owner's facts (no override, no webhook, nothing used today), from the same statement.
    from agents.usage import quotas
    from agents.usage.owners import OwnerFacts

    day = quotas.today()
    assert ours[0].owner_facts == OwnerFacts(
        alice.pk, None, False, (day, 0), cost_read=True, cost_override=None, spent_today=(day, 0)
    )
    assert attributes(ours[1]) == attributes(theirs[1])
    assert ours[1].user is ours[0]
    assert ours[0].date_joined.tzinfo is not None  # a datetime, not the column's raw text
