"""API keys users make (issue 37; docs/api-keys.md): `POST/GET /api/v1/keys`, `DELETE /api/v1/keys/{id}`; a key as
`Authorization: Bearer rsk_…`, held to its scopes on every route; hashed at rest; its last use written at most once a
window; managed only with the user's token or a session."""

from __future__ import annotations

import hashlib
import io
import json
import re
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import URLPattern, URLResolver, get_resolver, resolve, reverse
from django.utils import timezone
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient
from rest_framework.views import APIView

from agents.api.permissions import NOT_WITH_A_KEY, ApiKeyScopes
from agents.keys import services as keys
from agents.models import ApiKey, Run
from tests.api.conftest import RUNS, create_run, make_runs, run_url
from tests.conftest import make_user

pytestmark = pytest.mark.django_db

KEYS = "/api/v1/keys"
KEY_SHAPE = re.compile(r"rsk_[0-9a-f]{12}_[A-Za-z0-9_-]{43}")
KEY_FIELDS = {"id", "name", "prefix", "scopes", "expires_at", "revoked_at", "last_used_at", "created_at"}
READ, WRITE, APPROVALS, MEMORY, AGENTS = "runs:read", "runs:write", "approvals", "memory", "agents"
ALL = [READ, WRITE, APPROVALS, MEMORY, AGENTS]
NEVER, OPEN = "never with a key", "open"
MCP_ACCEPT = "application/json, text/event-stream"
NO_ID = str(uuid.UUID(int=1))  # in every path that takes an id: nothing has it (and the tests' ids stay the same)

# The contract (docs/api-keys.md, "Scopes"): each route of the site's API, by URL name, to the scope a key needs to
# read it (GET) and to change anything through it (POST, PATCH, DELETE). An advance carrying a decision needs
# `approvals` instead of runs:write (tested on its own below).
SCOPES = {
    "agent-list": (READ, AGENTS),
    "agent-detail": (READ, AGENTS),
    "agent-versions": (READ, READ),
    "agent-restore": (AGENTS, AGENTS),
    "run-list": (READ, WRITE),
    "run-detail": (READ, WRITE),
    "run-events": (READ, READ),
    "run-advance": (WRITE, WRITE),
    "run-cancel": (WRITE, WRITE),
    "run-fork": (WRITE, WRITE),
    "run-feedback": (WRITE, WRITE),
    "seed-run": (WRITE, WRITE),
    "thread-list": (READ, WRITE),
    "thread-detail": (READ, WRITE),
    "tool-list": (READ, READ),
    "tool-invoke": (WRITE, WRITE),
    "usage": (READ, READ),
    "webhook-list": (READ, WRITE),
    "webhook-detail": (READ, WRITE),
    "schedule-list": (READ, WRITE),
    "schedule-detail": (READ, WRITE),
    "evalrun-list": (READ, WRITE),
    "evalrun-detail": (READ, READ),
    "price-list": (READ, WRITE),
    "price-detail": (READ, WRITE),
    "fact-list": (MEMORY, MEMORY),
    "fact-detail": (MEMORY, MEMORY),
    "mcp": (WRITE, WRITE),
    "key-list": (NEVER, NEVER),
    "key-detail": (NEVER, NEVER),
    "health": (OPEN, OPEN),
    "schema": (OPEN, OPEN),
    "schema-json": (OPEN, OPEN),
    "docs": (OPEN, OPEN),
}


def bearer(secret: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")
    return client


def make_key(owner, scopes=ALL, **fields) -> tuple[ApiKey, str]:
    """A key made by the service; `scopes=[]` stores one with none (the API refuses to make such a key)."""
    key, secret = keys.create_key(owner, name=fields.pop("name", "ci"), scopes=list(scopes) or [READ], **fields)
    if not scopes:
        ApiKey.objects.filter(pk=key.pk).update(scopes=[])
    return key, secret


def create(client, **body):
    return client.post(KEYS, body, format="json")


# --- making, listing, revoking ----------------------------------------------------------------------------------------


def test_a_key_is_made_and_its_secret_shown_once(api, alice):
    made = create(api, name="laptop", scopes=["runs:write", "runs:read", "runs:read"])

    assert made.status_code == 201, made.json()
    body = made.json()
    assert set(body) == KEY_FIELDS | {"key"}
    assert KEY_SHAPE.fullmatch(body["key"])
    assert body["prefix"] == body["key"][4:16]
    assert (body["name"], body["scopes"]) == ("laptop", [READ, WRITE])  # each once, in the canonical order
    assert (body["expires_at"], body["revoked_at"], body["last_used_at"]) == (None, None, None)
    assert ApiKey.objects.get(pk=body["id"]).owner == alice

    listed = api.get(KEYS)
    assert listed.status_code == 200
    assert set(listed.json()) == {"count", "next", "previous", "results"}
    assert [set(k) for k in listed.json()["results"]] == [KEY_FIELDS]
    secret = body["key"].split("_", 2)[2]  # rsk_<prefix>_<secret>: the secret may hold "_" too
    assert secret not in listed.content.decode()  # never shown again


def test_the_database_holds_a_hash_never_the_secret(api):
    body = create(api, name="ci", scopes=[READ]).json()
    secret = body["key"].split("_", 2)[2]  # rsk_<prefix>_<secret>: the secret may hold "_" too

    row = ApiKey.objects.get(pk=body["id"])
    assert row.hashed_key == "sha256$" + hashlib.sha256(body["key"].encode()).hexdigest()
    dump = io.StringIO()
    call_command("dumpdata", stdout=dump)  # every row of every model
    if "reactsite_cache" in connection.introspection.table_names():  # and the database cache's rows (not Redis's)
        with connection.cursor() as cursor:
            cursor.execute("SELECT cache_key, value FROM reactsite_cache")
            dump.write(repr(cursor.fetchall()))
    assert body["prefix"] in dump.getvalue()
    assert secret not in dump.getvalue()
    assert bearer(body["key"]).get(RUNS).status_code == 200


def test_the_list_holds_only_the_callers_keys_newest_first_and_paginated(api, alice, bob):
    older, _ = make_key(alice, name="older")
    newer, _ = make_key(alice, name="newer")
    make_key(bob, name="bob's")
    ApiKey.objects.filter(pk=older.pk).update(created_at=timezone.now() - timedelta(days=1))

    page = api.get(KEYS, {"limit": 1}).json()
    assert (page["count"], [k["name"] for k in page["results"]]) == (2, ["newer"])
    assert page["next"] is not None
    assert [k["name"] for k in api.get(KEYS).json()["results"]] == ["newer", "older"]


def test_revoking_stops_the_key_at_once_and_it_stays_listed(api, alice):
    key, secret = make_key(alice, [READ])
    client = bearer(secret)
    assert client.get(RUNS).status_code == 200

    revoked = api.delete(f"{KEYS}/{key.pk}")

    assert revoked.status_code == 204
    refused = client.get(RUNS)
    assert refused.status_code == 401
    assert refused.json()["detail"].startswith("This API key was revoked at ")
    listed = api.get(KEYS).json()["results"]
    assert [k["id"] for k in listed] == [str(key.pk)] and listed[0]["revoked_at"] is not None
    first = ApiKey.objects.get(pk=key.pk).revoked_at
    assert api.delete(f"{KEYS}/{key.pk}/").status_code == 204  # again: the same, keeping the first time
    assert ApiKey.objects.get(pk=key.pk).revoked_at == first


@pytest.mark.parametrize("kid", ["other", "not-a-uuid", "7d1e5c2a-9b4f-4e38-a6d0-3f8c1b2e9a47"])
def test_revoking_another_users_or_no_key_is_404(api, bob, kid):
    bobs, secret = make_key(bob, [READ])
    path = f"{KEYS}/{bobs.pk if kid == 'other' else kid}"

    assert api.delete(path).status_code == 404
    assert ApiKey.objects.get(pk=bobs.pk).revoked_at is None
    assert bearer(secret).get(RUNS).status_code == 200


def test_an_expiring_key_works_until_its_time_then_says_when_it_expired(api):
    soon = (timezone.now() + timedelta(hours=1)).replace(microsecond=0)
    body = create(api, name="temp", scopes=[READ], expires_at=soon.isoformat()).json()
    assert datetime.fromisoformat(body["expires_at"]) == soon
    client = bearer(body["key"])
    assert client.get(RUNS).status_code == 200

    past = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    ApiKey.objects.filter(pk=body["id"]).update(expires_at=past)
    expired = client.get(RUNS)

    assert expired.status_code == 401
    assert expired.json() == {"detail": "This API key expired at 2026-01-02T03:04:05Z."}
    assert expired["WWW-Authenticate"] == "Bearer"


def test_at_most_so_many_usable_keys_per_user(api, alice, settings):
    settings.API_KEYS_PER_USER = 2
    first, _ = make_key(alice)
    make_key(alice)

    refused = create(api, name="third", scopes=[READ])
    assert refused.status_code == 400
    assert "revoke one" in refused.json()["detail"]
    keys.revoke_key(first)
    assert create(api, name="third", scopes=[READ]).status_code == 201


# --- bad input --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "x", "scopes": ["runs:delete"]}, "scopes"),
        ({"name": "x", "scopes": []}, "scopes"),
        ({"name": "x", "scopes": "runs:read"}, "scopes"),
        ({"name": "x", "scopes": [1]}, "scopes"),
        ({"name": "x"}, "scopes"),
        ({"name": "", "scopes": [READ]}, "name"),
        ({"name": "   ", "scopes": [READ]}, "name"),
        ({"name": "x" * 101, "scopes": [READ]}, "name"),
        ({"name": 7, "scopes": [READ]}, "name"),
        ({"scopes": [READ]}, "name"),
        ({"name": "x", "scopes": [READ], "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
        ({"name": "x", "scopes": [READ], "expires_at": "tomorrow"}, "expires_at"),
        ({"name": "x", "scopes": [READ], "expires_at": 1893456000}, "expires_at"),
        ({"name": "x", "scopes": [READ], "expires_at": "2099-01-01T00:00:00"}, "expires_at"),  # no timezone
        ({"name": "x", "scopes": [READ], "expires_at": "2099-02-30T00:00:00Z"}, "expires_at"),
        ({"name": "x", "scopes": [READ], "expires_at": "9999-12-31T23:00:00-05:00"}, "expires_at"),
    ],
)
def test_bad_input_is_400_naming_the_field_and_nothing_is_made(api, body, field):
    response = create(api, **body)

    assert response.status_code == 400, response.json()
    assert field in response.json(), response.json()
    assert not ApiKey.objects.exists()


def test_an_unknown_scope_is_named(api):
    response = create(api, name="x", scopes=[READ, "admin"])
    assert response.status_code == 400
    assert "admin" in json.dumps(response.json()["scopes"])


def test_a_key_never_expiring_may_say_so_with_null(api):
    response = create(api, name="x", scopes=[READ], expires_at=None)
    assert (response.status_code, response.json()["expires_at"]) == (201, None)


# --- authenticating ---------------------------------------------------------------------------------------------------


def test_a_key_acts_as_its_owner(alice, bob):
    mine = make_runs(alice, 2)
    theirs = make_runs(bob, 1)[0]
    _, secret = make_key(alice, [READ])
    client = bearer(secret)

    listed = client.get(RUNS)

    assert listed.status_code == 200
    assert {r["id"] for r in listed.json()["results"]} == {str(r.pk) for r in mine}
    assert client.get(run_url(theirs.pk)).status_code == 404


def test_a_key_with_write_scope_starts_runs_as_its_owner(alice):
    _, secret = make_key(alice, [WRITE])
    created = create_run(bearer(secret))
    assert created.status_code == 201, created.json()
    assert Run.objects.get(pk=created.json()["id"]).owner == alice


@pytest.mark.parametrize("scheme", ["Token", "Bearer", "bearer"])
def test_the_users_token_still_works_with_either_keyword(alice, scheme):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"{scheme} {Token.objects.get_or_create(user=alice)[0].key}")
    assert client.get(RUNS).status_code == 200
    assert create(client, name="x", scopes=[READ]).status_code == 201


def test_a_session_is_unaffected(alice):
    client = APIClient()
    client.force_login(alice)
    assert client.get(RUNS).status_code == 200
    assert create(client, name="from the browser", scopes=[MEMORY]).status_code == 201


@pytest.mark.parametrize(
    ("credential", "detail"),
    [
        ("rsk_", keys.MALFORMED),
        ("rsk_abc_def", keys.MALFORMED),
        ("rsk_" + "0" * 12 + "_" + "A" * 42, keys.MALFORMED),
        ("rsk_" + "0" * 12 + "_" + "A" * 43, keys.INVALID),  # the right shape, no such key
    ],
)
def test_a_malformed_or_unknown_key_is_401(alice, credential, detail):
    make_key(alice)
    response = bearer(credential).get(RUNS)
    assert response.status_code == 401
    assert response.json() == {"detail": detail}
    assert response["WWW-Authenticate"] == "Bearer"


def test_a_wrong_secret_is_401_and_tells_nothing_about_the_key(alice):
    key, secret = make_key(alice)
    keys.revoke_key(key)
    forged = secret[:-1] + ("A" if secret[-1] != "A" else "B")

    response = bearer(forged).get(RUNS)

    assert (response.status_code, response.json()) == (401, {"detail": keys.INVALID})


def test_an_inactive_owners_key_is_401(alice):
    _, secret = make_key(alice)
    alice.is_active = False
    alice.save()
    response = bearer(secret).get(RUNS)
    assert (response.status_code, response.json()) == (401, {"detail": keys.INACTIVE})


def test_a_key_is_found_by_one_query(alice):
    _, secret = make_key(alice, [READ])
    bearer(secret).get(RUNS)  # its last use written: the next request writes nothing
    with CaptureQueriesContext(connection) as queries:
        keys.authenticate(secret)
    assert len(queries) == 1


# --- scopes -----------------------------------------------------------------------------------------------------------


def _routes():
    """(url name, path, method) of every route the site serves through DRF (the API, /v1/agent/runs, /mcp), with
    placeholder values for the path's parameters."""
    found = []

    def walk(patterns):
        for entry in patterns:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns)
                continue
            assert isinstance(entry, URLPattern)
            view = getattr(entry.callback, "cls", None)
            if view is None or not issubclass(view, APIView):
                continue
            actions = getattr(entry.callback, "actions", None)
            if actions is not None:
                methods = [m.upper() for m in actions]
            else:
                methods = [m.upper() for m in ("get", "post", "patch", "put", "delete") if hasattr(view, m)]
            params = {name: {"name": "nope", "n": "1"}.get(name, NO_ID) for name in entry.pattern.regex.groupindex}
            path = reverse(entry.name, kwargs=params)
            found.extend((entry.name, path, method) for method in methods)

    walk(get_resolver().url_patterns)
    return found


ROUTES = _routes()


def test_the_walk_finds_every_route_and_each_has_its_scope():
    names = {name for name, _, _ in ROUTES}
    assert len(ROUTES) >= 35
    assert names == set(SCOPES), f"routes without a scope: {names - set(SCOPES)}; gone: {set(SCOPES) - names}"


def needed(name: str, method: str) -> str:
    read, write = SCOPES[name]
    return read if method == "GET" else write


def call(client, path: str, method: str):
    """The request with a body that stores nothing (400) where there is one."""
    if method == "GET":
        return client.get(path)
    extra = {"HTTP_ACCEPT": MCP_ACCEPT} if path.startswith("/mcp") else {}
    return getattr(client, method.lower())(path, [], format="json", **extra)


@pytest.fixture
def root():
    return make_user("root", staff=True, superuser=True)


@pytest.mark.parametrize(("name", "path", "method"), ROUTES, ids=[f"{m} {p}" for _, p, m in ROUTES])
def test_every_route_needs_its_scope(root, name, path, method):
    scope = needed(name, method)
    _, none = make_key(root, [])
    _, others = make_key(root, [s for s in ALL if s != scope])
    _, only = make_key(root, [scope] if scope in ALL else [READ])

    without, with_the_others, with_it = (call(bearer(k), path, method) for k in (none, others, only))

    if scope == OPEN:
        assert without.status_code != 403 and without.status_code < 500
        return
    assert without.status_code == 403, (without.status_code, without.content[:300])
    assert with_the_others.status_code == 403, with_the_others.content[:300]
    detail = with_the_others.json()["detail"]
    if scope == NEVER:
        assert "cannot manage API keys" in detail and with_it.status_code == 403
        return
    assert f'"{scope}"' in detail and method in detail, detail
    assert with_it.status_code not in (401, 403) and with_it.status_code < 500, (with_it.status_code, with_it.content)


def test_a_route_no_one_named_takes_no_key(alice):
    """A request whose route is not in the table (here: a view driven without the URLconf) is refused to a key."""
    from rest_framework.test import APIRequestFactory

    from agents.api.views.usage import UsageView

    _, secret = make_key(alice)
    request = APIRequestFactory().get("/anywhere", HTTP_AUTHORIZATION=f"Bearer {secret}")
    response = UsageView.as_view()(request)
    assert response.status_code == 403
    assert "does not take API keys" in response.data["detail"]


@pytest.mark.parametrize(
    ("method", "credential", "allowed"), [("GET", "key", True), ("POST", "key", False), ("POST", "token", True)]
)
def test_the_check_is_a_drf_permission_class_too(alice, method, credential, allowed):
    from rest_framework.request import ForcedAuthentication, Request
    from rest_framework.test import APIRequestFactory

    key, _ = make_key(alice, [READ])
    auth = key if credential == "key" else Token.objects.get_or_create(user=alice)[0]
    plain = APIRequestFactory().generic(method, RUNS)
    plain.resolver_match = resolve(RUNS)
    request = Request(plain, authenticators=[ForcedAuthentication(alice, auth)])
    permission = ApiKeyScopes()

    assert permission.has_permission(request, None) is allowed
    assert allowed or permission.message == f'This API key lacks the scope "{WRITE}", which POST {RUNS} needs.'


def test_an_advance_with_a_decision_needs_approvals(alice):
    _, write = make_key(alice, [READ, WRITE, MEMORY])
    _, approvals = make_key(alice, [APPROVALS])
    path = run_url(uuid.uuid4(), "advance")

    for body in ({"approval": True}, {"approval": False, "reason": "no"}, {"decisions": [{"call_id": "c"}]}):
        refused = bearer(write).post(path, body, format="json")
        assert refused.status_code == 403 and '"approvals"' in refused.json()["detail"]
        assert bearer(approvals).post(path, body, format="json").status_code == 404  # past the scope: no such run
    for body in ({}, {"approval": None}, {"decisions": None}):
        refused = bearer(approvals).post(path, body, format="json")
        assert refused.status_code == 403 and '"runs:write"' in refused.json()["detail"]
        assert bearer(write).post(path, body, format="json").status_code == 404


def test_a_reviewers_approvals_key_decides_a_paused_run(api, reviewer, no_search_network):
    run = create_run(api, input="search python").json()
    assert run["status"] == "awaiting_approval"
    _, secret = make_key(reviewer, [APPROVALS])

    decided = bearer(secret).post(run_url(run["id"], "advance"), {"approval": False}, format="json")

    assert decided.status_code == 200, decided.json()
    assert decided.json()["status"] == "done"
    assert no_search_network.requests == []


@pytest.mark.parametrize(("scopes", "status"), [([WRITE], 200), ([READ, APPROVALS, MEMORY], 403)])
def test_mcp_takes_a_key_with_runs_write(alice, scopes, status):
    _, secret = make_key(alice, scopes)
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}

    response = bearer(secret).post("/mcp", message, format="json", HTTP_ACCEPT=MCP_ACCEPT)

    assert response.status_code == status, response.content
    if status == 403:
        assert '"runs:write"' in response.json()["detail"]


def test_a_key_cannot_manage_keys(alice):
    key, secret = make_key(alice)  # every scope
    client = bearer(secret)

    made = create(client, name="child", scopes=[READ])
    listed = client.get(KEYS)
    revoked = client.delete(f"{KEYS}/{key.pk}")

    for response in (made, listed, revoked):
        assert response.status_code == 403
        assert response.json()["detail"] == NOT_WITH_A_KEY
    assert ApiKey.objects.count() == 1 and ApiKey.objects.get().revoked_at is None


# --- the last use -----------------------------------------------------------------------------------------------------


def updates_of_keys(queries) -> int:
    return sum(1 for q in queries if q["sql"].lstrip().upper().startswith("UPDATE") and "apikey" in q["sql"])


def test_ten_requests_write_the_last_use_once(alice):
    key, secret = make_key(alice, [READ])
    client = bearer(secret)

    with CaptureQueriesContext(connection) as queries:
        for _ in range(10):
            assert client.get(RUNS).status_code == 200

    assert updates_of_keys(queries) == 1
    assert ApiKey.objects.get(pk=key.pk).last_used_at is not None


def test_within_a_process_the_window_costs_no_query_of_the_cache(alice):
    _, secret = make_key(alice, [READ])
    client = bearer(secret)
    client.get(RUNS)

    with CaptureQueriesContext(connection) as queries:
        for _ in range(9):
            client.get(RUNS)

    assert not [q["sql"] for q in queries if "reactsite_cache" in q["sql"]]
    assert updates_of_keys(queries) == 0


def test_another_process_does_not_write_it_again_in_the_window(alice, monkeypatch):
    _, secret = make_key(alice, [READ])
    client = bearer(secret)
    client.get(RUNS)
    monkeypatch.setattr(keys, "_written", {})  # a process that never saw the key: only the shared cache knows

    with CaptureQueriesContext(connection) as queries:
        client.get(RUNS)

    assert updates_of_keys(queries) == 0


def test_with_no_window_every_request_writes_it(alice, settings):
    settings.API_KEY_LAST_USED_EVERY_S = 0
    _, secret = make_key(alice, [READ])
    client = bearer(secret)

    with CaptureQueriesContext(connection) as queries:
        for _ in range(3):
            client.get(RUNS)

    assert updates_of_keys(queries) == 3


def test_the_list_shows_the_last_use(api, alice):
    key, secret = make_key(alice, [READ])
    bearer(secret).get(RUNS)
    listed = api.get(KEYS).json()["results"][0]
    assert listed["id"] == str(key.pk) and listed["last_used_at"] is not None


# --- the OpenAPI document ---------------------------------------------------------------------------------------------


def test_the_document_describes_the_routes():
    document = APIClient().get("/api/v1/schema", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    listing, making = document["paths"]["/api/v1/keys/"]["get"], document["paths"]["/api/v1/keys/"]["post"]
    revoking = document["paths"]["/api/v1/keys/{id}/"]["delete"]
    schemas = document["components"]["schemas"]

    assert {"200", "401", "403"} <= set(listing["responses"])
    assert {"201", "400", "401", "403"} <= set(making["responses"])
    assert {"204", "401", "403", "404"} <= set(revoking["responses"])
    created = making["responses"]["201"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(schemas[created]["properties"]) == KEY_FIELDS | {"key"}
    page = listing["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    item = schemas[page]["properties"]["results"]["items"]["$ref"].rsplit("/", 1)[1]
    assert set(schemas[item]["properties"]) == KEY_FIELDS
    body = making["requestBody"]["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    assert set(schemas[body]["required"]) == {"name", "scopes"}
