"""Health, schema and docs, X-Request-ID, CORS, request size, and safe model errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from agents.api.views import health as views
from tests.api.conftest import ARITHMETIC, DOCS, HEALTH, RUNS, SCHEMA, create_run, run_count, run_url

pytestmark = pytest.mark.django_db


# --- health ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [HEALTH, HEALTH + "/"])
def test_health_without_auth(path, settings):
    response = APIClient().get(path)
    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"status", "database", "cache", "default_provider", "version", "api_version"}
    assert (body["status"], body["database"], body["cache"]) == ("ok", "ok", "ok")
    assert body["default_provider"] == settings.AGENT_DEFAULT_PROVIDER == "demo"
    assert body["version"] == settings.VERSION  # the package's
    assert body["api_version"] == settings.API_VERSION == "1.2"  # the contract's (issue 34), as docs/api.md says


def test_the_reference_states_the_api_version_health_reports(settings):
    text = (Path(settings.BASE_DIR) / "docs" / "api.md").read_text(encoding="utf-8")
    assert f"contract v{settings.API_VERSION}" in text
    assert f'"api_version": "{settings.API_VERSION}"' in text


def test_health_ignores_a_bad_token():
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Token wrong")
    assert client.get(HEALTH).status_code == 200


def test_health_follows_the_default_provider_setting(settings):
    settings.AGENT_DEFAULT_PROVIDER = "anthropic"
    assert APIClient().get(HEALTH).json()["default_provider"] == "anthropic"


def test_health_is_503_naming_a_failing_cache(monkeypatch):
    def broken(*args, **kwargs):
        raise ConnectionError("cache down")

    monkeypatch.setattr(views.cache, "set", broken)
    response = APIClient().get(HEALTH)
    assert response.status_code == 503
    body = response.json()
    assert body["status"] != "ok"
    assert body["database"] == "ok"
    assert body["cache"] != "ok"


def test_health_is_503_naming_a_failing_database(monkeypatch):
    monkeypatch.setattr(views, "_check_database", lambda: "error: OperationalError")
    response = APIClient().get(HEALTH)
    assert response.status_code == 503
    body = response.json()
    assert body["database"] != "ok"
    assert body["cache"] == "ok"


# --- schema and docs ------------------------------------------------------------------------------------------


def _schema_paths(document: dict) -> set[str]:
    return {p.rstrip("/") for p in document["paths"]}


def test_schema_is_openapi_3_listing_every_route():
    response = APIClient().get(SCHEMA, HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    document = json.loads(response.content)
    assert document["openapi"].startswith("3.")
    paths = _schema_paths(document)
    expected = {
        "/api/v1/runs",
        "/api/v1/runs/{id}",
        "/api/v1/runs/{id}/advance",
        "/api/v1/runs/{id}/cancel",
        "/api/v1/tools",
        "/api/v1/tools/{name}/invoke",
        "/api/v1/health",
    }
    assert expected <= paths, expected - paths
    runs = document["paths"].get("/api/v1/runs/") or document["paths"]["/api/v1/runs"]
    assert {"get", "post"} <= set(runs)
    detail = document["paths"].get("/api/v1/runs/{id}/") or document["paths"]["/api/v1/runs/{id}"]
    assert {"get", "delete"} <= set(detail)
    if any(p.startswith("/v1/agent/runs") for p in document["paths"]):
        assert "/v1/agent/runs" in paths


def test_schema_default_format_is_served_without_auth():
    response = APIClient().get(SCHEMA + "/")
    assert response.status_code == 200
    assert b"openapi" in response.content


def test_docs_page_is_html():
    response = APIClient().get(DOCS)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/html")
    assert b"<html" in response.content.lower()


# --- X-Request-ID ---------------------------------------------------------------------------------------------


def _responses(api, headers: dict) -> list:
    return [
        api.get(RUNS, **headers),  # 200
        api.post(RUNS, {"input": ""}, format="json", **headers),  # 400
        APIClient().get(RUNS, **headers),  # 401
        api.get(run_url("00000000-0000-0000-0000-000000000000"), **headers),  # 404
        APIClient().get(HEALTH, **headers),  # 200, open
    ]


def test_request_id_is_echoed(api):
    statuses = []
    for response in _responses(api, {"HTTP_X_REQUEST_ID": "req-abc-123"}):
        statuses.append(response.status_code)
        assert response.headers.get("X-Request-ID") == "req-abc-123"
    assert statuses == [200, 400, 401, 404, 200]


def test_request_id_is_generated(api):
    seen = set()
    for response in _responses(api, {}):
        value = response.headers.get("X-Request-ID")
        assert value and value != "none"
        seen.add(value)
    assert len(seen) == 5  # a fresh id per request


def test_request_id_on_201_and_429(api, settings):
    settings.AGENT_RATE_LIMIT = "1/h"
    created = api.post(RUNS, {"input": ARITHMETIC}, format="json", HTTP_X_REQUEST_ID="r1")
    assert created.status_code == 201
    assert created.headers.get("X-Request-ID") == "r1"
    throttled = api.post(RUNS, {"input": ARITHMETIC}, format="json", HTTP_X_REQUEST_ID="r2")
    assert throttled.status_code == 429
    assert throttled.headers.get("X-Request-ID") == "r2"


# --- CORS -----------------------------------------------------------------------------------------------------


def test_cors_allows_a_configured_origin(api, settings):
    settings.CORS_ALLOWED_ORIGINS = ["https://app.example"]
    response = api.get(RUNS, HTTP_ORIGIN="https://app.example")
    assert response.status_code == 200
    assert response.headers.get("Access-Control-Allow-Origin") == "https://app.example"


def test_cors_preflight_for_a_configured_origin(settings):
    settings.CORS_ALLOWED_ORIGINS = ["https://app.example"]
    response = APIClient().options(
        RUNS,
        HTTP_ORIGIN="https://app.example",
        HTTP_ACCESS_CONTROL_REQUEST_METHOD="POST",
        HTTP_ACCESS_CONTROL_REQUEST_HEADERS="authorization, content-type, idempotency-key",
    )
    assert response.status_code == 200
    assert response.headers.get("Access-Control-Allow-Origin") == "https://app.example"


def test_cors_ignores_another_origin(api, settings):
    settings.CORS_ALLOWED_ORIGINS = ["https://app.example"]
    response = api.get(RUNS, HTTP_ORIGIN="https://evil.example")
    assert response.status_code == 200
    assert "Access-Control-Allow-Origin" not in response.headers


def test_cors_allows_nothing_by_default(api, settings):
    assert list(settings.CORS_ALLOWED_ORIGINS) == []
    for origin in ("https://app.example", "http://localhost:3000"):
        response = api.get(RUNS, HTTP_ORIGIN=origin)
        assert "Access-Control-Allow-Origin" not in response.headers


# --- request size ---------------------------------------------------------------------------------------------


def test_body_over_the_upload_limit_is_a_4xx(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    settings.AGENT_MAX_RUN_BODY_BYTES = 1000  # a run's creation has a bound of its own (docs/documents.md)
    payload = json.dumps({"input": "What is 1+1? " + "x" * 2000})
    response = api.post(RUNS, data=payload, content_type="application/json")
    assert 400 <= response.status_code < 500, response.status_code
    assert response.status_code == 413
    assert "1000" in response.json()["detail"]  # a DRF-shaped message naming the problem, not an HTML page
    assert run_count() == 0


def test_oversized_body_with_an_idempotency_key_is_a_4xx(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    settings.AGENT_MAX_RUN_BODY_BYTES = 1000
    payload = json.dumps({"input": "x" * 2000})
    response = api.post(RUNS, data=payload, content_type="application/json", HTTP_IDEMPOTENCY_KEY="big")
    assert response.status_code == 413
    assert run_count() == 0


def test_body_under_the_upload_limit_is_fine(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000
    settings.AGENT_MAX_RUN_BODY_BYTES = 1000
    assert create_run(api).status_code == 201


def test_oversized_body_on_other_post_routes_is_a_4xx(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 500
    settings.AGENT_MAX_RUN_BODY_BYTES = 500  # the seed route creates a run: its bound
    big = json.dumps({"arguments": {"expression": "1+" * 400 + "1"}})
    response = api.post("/api/v1/tools/calculator/invoke", data=big, content_type="application/json")
    assert 400 <= response.status_code < 500
    assert "detail" in response.json()
    seed = api.post("/v1/agent/runs", data=json.dumps({"input": "x" * 600}), content_type="application/json")
    assert 400 <= seed.status_code < 500
    assert run_count() == 0


# --- model errors ---------------------------------------------------------------------------------------------


def test_provider_failure_is_a_safe_model_error(api, settings, stub):
    secret = "sk-test-secret-value-123"
    settings.OPENAI_API_KEY = secret
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    settings.AGENT_LLM_MAX_RETRIES = 0
    stub.add("POST", "/v1/chat/completions", status=500, json={"error": {"message": "boom"}}, repeat=True)
    response = create_run(api, provider="openai", model="gpt-4.1-mini", timeout_s=10)
    assert response.status_code == 201
    body = response.json()
    assert (body["status"], body["stop_reason"], body["ok"], body["output"]) == ("done", "model_error", False, None)
    assert body["turns"] == 1
    assert isinstance(body["error"], str) and body["error"]
    assert len(body["error"]) < 500
    assert secret not in response.content.decode()
    assert "Traceback" not in body["error"]
    steps = api.get(run_url(body["id"])).json()["steps"]
    assert steps[-1]["kind"] == "error"
    assert secret not in json.dumps(steps)
    assert stub.requests and stub.requests[0].headers["authorization"] == f"Bearer {secret}"


def test_unknown_api_route_is_404(api):
    assert api.get("/api/v1/nope").status_code == 404


def test_methods_not_allowed_are_405(api):
    run_id = create_run(api).json()["id"]
    assert api.put(run_url(run_id), {"input": ARITHMETIC}, format="json").status_code == 405
    assert api.patch(run_url(run_id), {"input": ARITHMETIC}, format="json").status_code == 405
    assert api.get(run_url(run_id, "advance")).status_code == 405
    assert api.delete(RUNS).status_code == 405


@pytest.mark.parametrize("path", ["/api/v1/evals/runs/0.5/", "/api/v1/nowhere", "/v1/agent/elsewhere"])
def test_an_unknown_api_address_is_a_json_404(api, path):
    response = api.get(path)
    assert response.status_code == 404
    assert response["Content-Type"] == "application/json"
    assert response.json() == {"detail": "Not found."}


def test_an_unknown_page_keeps_djangos_html_404(client, db):
    response = client.get("/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"].startswith("text/html")
