"""The schema's patterns and formats agree with what the API accepts (issue 47): a generated client that validates
before it sends never refuses what the server would take, and refuses what the probe found schema-valid yet refused
(`fallback_models: ["gpt"]`, `cron: "0"`)."""

from __future__ import annotations

import json
import re

import pytest
from rest_framework.test import APIClient

from agents.api.schema import ecma_literal
from tests.api.conftest import SCHEMA

pytestmark = pytest.mark.django_db

SCHEDULES = "/api/v1/schedules"
FALLBACKS = [
    "demo/demo-1",
    "demo/meta-llama/Llama-3.1-8B",  # a model may hold "/" itself
    "demo/a b",
    "gpt",  # the probe's: no provider
    "demo/",
    "/demo-1",
    "openai/gpt-4.1-mini",  # not usable here (not allowed)
    "nosuch/model",
    "demo",
    "demo/x\x00y",
]
CRONS = [
    "0 9 * * 1-5",
    "*/15 * * * *",
    " 0 9 * * MON ",
    "0\t9 * * *",
    "0 0 L * *",
    "0 0 * * MON#2",
    "@daily",
    "@HOURLY",
    "@Weekly",
    "0",  # the probe's
    "0 9 * *",
    "0 9 * * * *",  # a seconds field
    "0 9 ? * *",
    "@reboot",
    "@daily 0",
    "",
    "   ",
    "0 9 * * 1;rm",
]


@pytest.fixture
def demo_only(settings):
    settings.AGENT_ALLOWED_PROVIDERS = ["demo"]
    settings.AGENT_MODELS = {**settings.AGENT_MODELS, "demo": []}


def _document() -> dict:
    response = APIClient().get(SCHEMA, HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return json.loads(response.content)


def _request_schema(document: dict, path: str, method: str) -> dict:
    body = document["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return document["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]


def _fallback_status(api, entry: str) -> int:
    return api.post("/api/v1/runs", {"input": "2+2", "fallback_models": [entry]}, format="json").status_code


def test_fallback_models_items_have_the_pattern_the_server_holds_to(demo_only, api):
    fallback = _request_schema(_document(), "/api/v1/runs/", "post")["properties"]["fallback_models"]
    pattern = re.compile(fallback["items"]["pattern"])

    assert fallback["uniqueItems"] is True
    for entry in FALLBACKS:
        matches = pattern.search(entry) is not None
        status = _fallback_status(api, entry)
        assert (status in (200, 201, 202)) == matches, (entry, status, fallback["items"]["pattern"])
    assert not pattern.search("gpt")


def test_a_model_allowlist_narrows_the_pattern_to_its_models(settings, api):
    settings.AGENT_ALLOWED_PROVIDERS = ["demo"]
    settings.AGENT_MODELS = {**settings.AGENT_MODELS, "demo": ["demo-1", "v2.0+(beta)"]}
    pattern = re.compile(
        _request_schema(_document(), "/api/v1/runs/", "post")["properties"]["fallback_models"]["items"]["pattern"]
    )

    for entry in ("demo/demo-1", "demo/v2.0+(beta)", "demo/demo-2", "demo/v2x0+(beta)", "demo/demo-1x"):
        assert (pattern.search(entry) is not None) == (_fallback_status(api, entry) in (200, 201, 202)), entry
    assert pattern.search("demo/v2.0+(beta)") and not pattern.search("demo/v2x0+(beta)")


def test_a_listed_twice_fallback_breaks_unique_items_and_is_refused(demo_only, api):
    response = api.post("/api/v1/runs", {"input": "2+2", "fallback_models": ["demo/a", "demo/a"]}, format="json")

    assert response.status_code == 400
    assert "twice" in response.json()["fallback_models"][0]


def test_schedules_reuse_the_fallback_pattern(demo_only):
    document = _document()
    run = _request_schema(document, "/api/v1/runs/", "post")["properties"]["fallback_models"]
    schedule = _request_schema(document, f"{SCHEDULES}/", "post")["properties"]["fallback_models"]

    assert schedule["items"]["pattern"] == run["items"]["pattern"]
    assert schedule["uniqueItems"] is True


@pytest.mark.parametrize("method", ["post", "patch"])
def test_cron_has_a_pattern_that_refuses_nothing_the_server_accepts(demo_only, api, method):
    document = _document()
    path = f"{SCHEDULES}/" if method == "post" else f"{SCHEDULES}/{{id}}/"
    pattern = re.compile(_request_schema(document, path, method)["properties"]["cron"]["pattern"])
    accepted = []
    for cron in CRONS:
        response = api.post(SCHEDULES, {"cron": cron, "input": "Summarise the news."}, format="json")
        if response.status_code == 201:
            accepted.append(cron)
        else:
            assert response.status_code == 400 and "cron" in response.json(), (cron, response.content)
        if not pattern.search(cron):
            assert response.status_code == 400, cron  # what the pattern refuses, the server refuses too

    assert not pattern.search("0")
    assert {"0 9 * * 1-5", "@daily", "@HOURLY", " 0 9 * * MON "} <= set(accepted)
    assert all(pattern.search(cron) for cron in accepted)


def test_an_api_key_expiry_is_a_date_time_said_to_be_in_the_future():
    expires = _request_schema(_document(), "/api/v1/keys/", "post")["properties"]["expires_at"]

    assert expires["format"] == "date-time"
    assert "future" in expires["description"]


@pytest.mark.parametrize("text", ["a.b", "v2.0+(beta)", "x|y", "[a]{2}", "back\\slash", "^$*?", "meta-llama/L-3"])
def test_an_ecma_literal_matches_exactly_itself(text):
    pattern = re.compile(f"^{ecma_literal(text)}$")

    assert pattern.match(text)
    assert not pattern.match(text + "x") and not pattern.match("x" + text)
    assert "\\-" not in ecma_literal(text) and "\\/" not in ecma_literal(text)  # the u flag refuses these escapes
