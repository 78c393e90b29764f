"""What the served OpenAPI document says about the rules drf-spectacular cannot introspect (issue 10, point 10)."""

from __future__ import annotations

import json
import re
import sys

import pytest
from rest_framework.test import APIClient

from agents.api.schema import NON_BLANK, WHITESPACE
from agents.runs import runtime
from tests.api.conftest import SCHEMA

pytestmark = pytest.mark.django_db


@pytest.fixture
def document() -> dict:
    response = APIClient().get(SCHEMA, HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    return json.loads(response.content)


def _operations(document: dict):
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def test_the_run_object_does_not_require_max_reflections(document):
    run = document["components"]["schemas"]["Run"]
    assert "max_reflections" not in run["required"]
    assert run["properties"]["max_reflections"]["minimum"] == 1
    assert {"tools", "sensitive_tools", "pending_action", "usage"} <= set(run["required"])


def test_pending_action_is_an_object_with_its_keys_or_null(document):
    pending = document["components"]["schemas"]["Run"]["properties"]["pending_action"]
    assert (pending["type"], pending["nullable"]) == ("object", True)
    assert set(pending["required"]) == {"call_id", "tool", "arguments", "expires_at"}
    actions = document["components"]["schemas"]["Run"]["properties"]["pending_actions"]
    assert actions["type"] == "array" and not actions["items"]["nullable"]
    assert set(actions["items"]["required"]) == {"call_id", "tool", "arguments", "expires_at"}


def test_the_event_stream_is_documented_as_events_not_a_json_string(document):
    events = document["paths"]["/api/v1/runs/{id}/events/"]["get"]
    stream = events["responses"]["200"]["content"]["text/event-stream"]["schema"]
    assert stream["type"] == "object"
    assert stream["properties"]["event"]["enum"] == ["step", "run", "done"]
    assert "format" not in {p["name"] for p in events["parameters"]}


def test_every_secured_operation_documents_401_with_its_header(document):
    for path, method, operation in _operations(document):
        if operation["security"] != [{}]:
            response = operation["responses"]["401"]
            assert response["headers"]["WWW-Authenticate"]["required"], (method, path)


@pytest.mark.parametrize(
    ("path", "method", "statuses"),
    [
        ("/api/v1/runs/", "post", {"201", "202", "400", "401", "409", "413", "422", "429"}),
        ("/api/v1/runs/", "get", {"200", "400", "401"}),
        ("/api/v1/runs/{id}/advance/", "post", {"200", "400", "401", "403", "404", "409", "413", "429"}),
        ("/api/v1/runs/{id}/cancel/", "post", {"200", "401", "404", "409"}),
        ("/api/v1/memory/facts/", "post", {"201", "400", "401", "413"}),
        ("/v1/agent/runs/", "post", {"200", "400", "401", "413", "429"}),
    ],
)
def test_error_statuses_the_api_answers_are_documented(document, path, method, statuses):
    assert statuses <= set(document["paths"][path][method]["responses"])


def test_rate_limited_answers_document_retry_after(document):
    response = document["paths"]["/api/v1/runs/"]["post"]["responses"]["429"]
    assert response["headers"]["Retry-After"]["required"]


def test_each_tool_has_its_own_invoke_path_with_its_arguments_schema(document):
    registry = runtime.tool_registry()
    for name in registry.names():
        operation = document["paths"][f"/api/v1/tools/{name}/invoke/"]["post"]
        body = operation["requestBody"]["content"]["application/json"]["schema"]
        assert body["properties"]["arguments"] == json.loads(json.dumps(dict(registry.get(name).parameters)))
    template = document["paths"]["/api/v1/tools/{name}/invoke/"]["post"]
    (name,) = [p for p in template["parameters"] if p["name"] == "name"]
    assert name["schema"] == {"type": "string"}  # any tool's name: one that connects later too (issue 34)


def test_run_body_limits_follow_the_settings(settings, document):
    settings.AGENT_MAX_INPUT_CHARS = 10
    settings.AGENT_ALLOWED_PROVIDERS = ["demo", "openai"]
    settings.OPENAI_API_KEY = ""  # allowed but not configured: naming it is a 400, so the schema leaves it out
    response = APIClient().get(SCHEMA, HTTP_ACCEPT="application/vnd.oai.openapi+json")
    schemas = json.loads(response.content)["components"]["schemas"]
    text, listed = schemas["RunCreate"]["properties"]["input"]["oneOf"]  # v1.2: a string, or a list of parts
    assert (text["maxLength"], listed["type"]) == (10, "array")
    assert "10 characters of text" in listed["description"]
    assert schemas["ProviderEnum"]["enum"] == ["demo"]
    for name in ("tools", "sensitive_tools"):  # strings, not an enum frozen when the document was made (issue 34)
        items = schemas["RunCreate"]["properties"][name]["items"]
        assert items["type"] == "string" and "enum" not in items and "$ref" not in items
    assert "ToolNameEnum" not in schemas


def test_pagination_parameters_have_their_bounds(document):
    parameters = {p["name"]: p for p in document["paths"]["/api/v1/runs/"]["get"]["parameters"]}
    assert (parameters["limit"]["schema"]["minimum"], parameters["offset"]["schema"]["minimum"]) == (1, 0)
    for name in ("status", "stop_reason"):  # the enums hold real values; `?status=` (filters nothing) is allowed
        assert "" not in parameters[name]["schema"]["enum"] and parameters[name]["allowEmptyValue"] is True
    assert parameters["status"]["schema"]["enum"] == ["awaiting_approval", "done", "queued", "running"]


def test_the_whitespace_class_is_exactly_what_str_strip_removes():
    spaces = {chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()}
    assert {c for c in spaces if re.fullmatch(f"[{WHITESPACE}]", c)} == spaces
    assert re.fullmatch(f"[{WHITESPACE}]+", "".join(sorted(spaces)))
    assert not re.fullmatch(f"[{WHITESPACE}]", "\u200b")  # zero-width space: not whitespace to Python


@pytest.mark.parametrize(("text", "ok"), [("a", True), (" a\n", True), (" \t\u3000", False), ("a\x00", False)])
def test_the_non_blank_pattern_matches_what_strict_fields_accept(text, ok):
    assert bool(re.search(NON_BLANK, text)) is ok


def test_the_enum_names_of_the_input_parts_follow_the_code():
    """The schema's enum components for parts are named in settings (SPECTACULAR_SETTINGS): they must list what the
    code takes, or a client generated from the schema refuses a type the server accepts."""
    from django.conf import settings

    from agents.api import inputs

    overrides = settings.SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]
    assert tuple(overrides["DocumentMediaTypeEnum"]) == inputs.DOCUMENT_TYPES
    assert tuple(overrides["ImageMediaTypeEnum"]) == inputs.MEDIA_TYPES
