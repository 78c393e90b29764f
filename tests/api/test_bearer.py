"""`Authorization: Bearer <key>` works like `Token <key>` (issue 34; API.md v1.2): the same key, the same one-statement
look-up with the owner's quota and webhook facts, the same answers."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient, APIRequestFactory

from agents.api.authentication import FastTokenAuthentication, owner_facts
from agents.models import DailyUsage, Run
from agents.usage import quotas
from agents.usage.owners import OwnerFacts
from tests.api.conftest import ARITHMETIC, RUNS, create_run

pytestmark = pytest.mark.django_db


def client_with(header: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=header)
    return client


@pytest.fixture
def key(alice) -> str:
    return Token.objects.get_or_create(user=alice)[0].key


@pytest.mark.parametrize("scheme", ["Bearer", "bearer", "BEARER", "Token", "token"])
def test_either_scheme_reads_and_creates_runs(key, alice, scheme):
    client = client_with(f"{scheme} {key}")

    created = create_run(client)
    listed = client.get(RUNS)

    assert created.status_code == 201, created.json()
    assert created.json()["output"] == "85"
    assert listed.status_code == 200
    assert [r["id"] for r in listed.json()["results"]] == [created.json()["id"]]
    assert Run.objects.get().owner == alice


def test_a_bearer_request_is_authenticated_by_the_one_lookup_with_the_owners_facts(key, alice):
    request = APIRequestFactory().get(RUNS, HTTP_AUTHORIZATION=f"Bearer {key}")

    with CaptureQueriesContext(connection) as queries:
        user, token = FastTokenAuthentication().authenticate(request)

    assert (user, token.key) == (alice, key)
    assert len(queries) == 1  # the token, its user and their facts in one statement
    facts = owner_facts(type("Authenticated", (), {"user": user})())
    assert isinstance(facts, OwnerFacts) and facts.user_id == alice.pk
    assert facts.used_today == (quotas.today(), 0) and facts.has_webhooks is False


def statements(client: APIClient, method: str, *args, **kwargs) -> tuple[int, int]:
    with CaptureQueriesContext(connection) as queries:
        response = getattr(client, method)(*args, **kwargs)
    return response.status_code, len(queries)


def test_bearer_costs_the_statements_token_costs(key, settings):
    settings.AGENT_RATE_LIMIT = "100000/m"
    settings.AGENT_DAILY_TOKEN_QUOTA = 24
    token, bearer = client_with(f"Token {key}"), client_with(f"Bearer {key}")

    for method, args, kwargs in [("get", (RUNS,), {}), ("get", ("/api/v1/usage",), {})]:
        assert statements(bearer, method, *args, **kwargs) == statements(token, method, *args, **kwargs)


def test_a_bearer_client_over_its_quota_is_429_from_the_facts_it_came_with(key, alice, settings):
    settings.AGENT_DAILY_TOKEN_QUOTA = 24
    DailyUsage.objects.create(owner=alice, day=quotas.today(), prompt_tokens=20, completion_tokens=10)

    response = create_run(client_with(f"Bearer {key}"))

    assert response.status_code == 429
    assert "24 tokens" in response.json()["detail"]
    assert Run.objects.count() == 0


@pytest.mark.parametrize(
    ("header", "scheme"),
    [("Bearer nope", "Bearer"), ("bearer nope", "Bearer"), ("Token nope", "Token"), (None, "Token")],
)
def test_a_refused_request_is_asked_for_the_scheme_it_used(alice, header, scheme):
    client = client_with(header) if header else APIClient()

    response = client.post(RUNS, {"input": ARITHMETIC}, format="json")

    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith(scheme)
    expected = "Invalid token." if header else "Authentication credentials were not provided."
    assert response.json() == {"detail": expected}


@pytest.mark.parametrize("header", ["Bearer", "Bearer a b", "Bearerx abc"])
def test_a_malformed_bearer_header_is_401(alice, header):
    assert client_with(header).get(RUNS).status_code == 401


def test_the_served_document_names_both_prefixes():
    response = APIClient().get("/api/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    scheme = response.json()["components"]["securitySchemes"]["tokenAuth"]
    assert (scheme["type"], scheme["in"], scheme["name"]) == ("apiKey", "header", "Authorization")
    assert "Token <key>" in scheme["description"] and "Bearer <key>" in scheme["description"]
