"""The served document as client generators read it (issue 34, item 1): free-form JSON is said to be free-form and
nothing refers to itself, steps are a union discriminated by `kind` that declares every field the API writes, and the
document is served as JSON at /api/v1/schema.json. The generators themselves run in tests/clients."""

from __future__ import annotations

import json
import re

import pytest
from rest_framework.test import APIClient

from agents.runs.representation import STEP_FIELDS
from tests.api.conftest import RUNS, SCHEMA, create_run, run_url

pytestmark = pytest.mark.django_db

STEP_COMPONENTS = {"model": "ModelStep", "tool": "ToolStep", "approval": "ApprovalStep", "error": "ErrorStep",
                   "summary": "SummaryStep"}  # fmt: skip
# Present when used: a critique, an unusual ending, the fallback model that answered (model steps); the limit or
# guardrail that answered a call or stopped the run (tool and error steps).
OPTIONAL_STEP_FIELDS = {"model": {"reflection", "finish", "model"}, "tool": {"limit", "guardrail"},
                        "error": {"limit", "guardrail"}, "summary": {"model", "error"}}  # fmt: skip


@pytest.fixture
def schemas() -> dict:
    response = APIClient().get(SCHEMA + ".json")
    assert response.status_code == 200
    return response.json()["components"]["schemas"]


def _refs(node) -> set[str]:
    return set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(node)))


def test_no_component_refers_to_itself_at_any_depth(schemas):
    graph = {name: _refs(schema) for name, schema in schemas.items()}
    for start in graph:
        seen, todo = set(), list(graph[start])
        while todo:
            name = todo.pop()
            assert name != start, f"{start} refers to itself"
            if name not in seen:
                seen.add(name)
                todo += graph.get(name, ())


def test_free_form_json_is_an_object_of_anything_and_says_no_nul(schemas):
    fields = [
        schemas["RunCreate"]["properties"]["output_schema"],
        schemas["Advance"]["properties"]["arguments"],
        schemas["Decision"]["properties"]["arguments"],
    ]
    for field in fields:
        assert (field["type"], field["additionalProperties"]) == ("object", {}), field
        assert "NUL" in field["description"]
    assert "NulFreeJsonValue" not in schemas


def test_free_form_json_still_refuses_nul_at_any_depth(api):
    response = create_run(api, output_schema={"type": "object", "properties": {"a": {"enum": [["x\x00"]]}}})
    assert response.status_code == 400 and "output_schema" in response.json()


def test_steps_are_a_union_discriminated_by_kind(schemas):
    step = schemas["Step"]
    refs = {kind: f"#/components/schemas/{name}" for kind, name in STEP_COMPONENTS.items()}
    assert step["discriminator"] == {"propertyName": "kind", "mapping": refs}
    assert step["oneOf"] == [{"$ref": ref} for ref in refs.values()]
    for kind, name in STEP_COMPONENTS.items():
        component = schemas[name]
        (enum,) = _refs(component["properties"]["kind"])
        assert schemas[enum]["enum"] == [kind]
        declared = {"index", "kind", "created_at", "latency_ms", *STEP_FIELDS[kind]}
        assert set(component["required"]) == declared
        assert set(component["properties"]) - declared == OPTIONAL_STEP_FIELDS.get(kind, set())
        for field, schema in component["properties"].items():
            assert "type" in schema or _refs(schema), f"{name}.{field} is untyped"


def test_the_run_detail_lists_steps_of_the_union(schemas):
    assert schemas["RunDetail"]["properties"]["steps"]["items"] == {"$ref": "#/components/schemas/Step"}


def test_every_step_the_api_writes_fits_its_kinds_declaration(schemas, api, reviewer_api):
    paused = create_run(api, sensitive_tools=["calculator"]).json()
    reviewer_api.post(run_url(paused["id"], "advance"), {"approval": True, "reason": "ok"}, format="json")
    failed = create_run(api, output_schema={"type": "integer", "maximum": 10}, max_turns=3, max_reflections=1)
    steps = [s for run in (paused, failed.json()) for s in api.get(run_url(run["id"])).json()["steps"]]
    assert {s["kind"] for s in steps} == set(STEP_COMPONENTS) - {"summary"}  # tests/runs/test_thread_summary.py
    assert any(s.get("reflection") for s in steps)  # an optional field, declared too
    for step in steps:
        component = schemas[STEP_COMPONENTS[step["kind"]]]
        assert set(component["required"]) <= set(step) <= set(component["properties"]), step


def test_the_document_is_served_as_json_at_schema_json_and_with_format_json():
    as_json = APIClient().get(SCHEMA + ".json")
    assert as_json["Content-Type"].startswith("application/vnd.oai.openapi+json")
    assert as_json.json() == APIClient().get(SCHEMA + "?format=json").json()
    assert APIClient().get(SCHEMA + ".json/").status_code == 200  # the trailing slash is optional here too
    assert APIClient().get(SCHEMA)["Content-Type"].startswith("application/vnd.oai.openapi")  # YAML by default
    assert APIClient().get(RUNS).status_code == 401  # open: the schema routes only
