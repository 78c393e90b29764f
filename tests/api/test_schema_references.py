"""Output schemas never make the server fetch anything (issue 39, item 1): a `$ref` that leaves the schema document
is refused when the schema is given (runs, agents, MCP tools), and a validator never retrieves one even for a schema
stored before that check existed. A real server on loopback serves the schema and counts what it was asked."""

from __future__ import annotations

import pytest

from agents.engine import schemas
from agents.engine.dispatch import value_error
from agents.models import Agent, Run
from agents.runs import drive, submit
from tests.api.conftest import create_run

pytestmark = pytest.mark.django_db

SERVED = {"type": "string", "const": "fetched-document-marker"}


@pytest.fixture
def served(stub):
    """A JSON Schema on 127.0.0.1, answered every time it is asked for."""
    stub.add("GET", "/a.json", json=SERVED, repeat=True)
    return stub


def remote_forms(url: str) -> list[dict]:
    return [
        {"$ref": f"{url}/a.json"},
        {"type": "object", "properties": {"x": {"$ref": f"{url}/a.json#/type"}}},
        {"$id": f"{url}/base.json", "$ref": "a.json"},  # relative to a remote base
        {"$defs": {"p": {"$dynamicRef": f"{url}/a.json"}}, "$ref": "#/$defs/p"},
        {"$ref": "file:///etc/passwd"},
        {"$ref": "http://169.254.169.254/latest/meta-data/"},
        {"$ref": "a.json"},
    ]


def test_a_request_whose_schema_refers_outside_itself_is_400_and_nothing_is_fetched(api, served):
    for schema in remote_forms(served.url):
        response = create_run(api, output_schema=schema)
        assert response.status_code == 400, schema
        message = " ".join(response.json()["output_schema"])
        assert "outside the schema" in message or "does not resolve" in message, message
    background = create_run(api, output_schema={"$ref": f"{served.url}/a.json"}, mode="background")
    assert background.status_code == 400
    assert served.requests == [] and Run.objects.count() == 0


@pytest.mark.parametrize(
    "schema, problem",
    [
        ({"$ref": "#/$defs/missing"}, "does not resolve"),
        ({"$ref": "#nowhere"}, "does not resolve"),
        ({"$ref": "#"}, "refers to itself without end"),
        ({"allOf": [{"$ref": "#"}]}, "refers to itself without end"),
        ({"$ref": 7}, "Not a valid JSON Schema"),
    ],
)
def test_references_that_cannot_be_followed_inside_the_schema_are_400(api, schema, problem):
    response = create_run(api, output_schema=schema)
    assert response.status_code == 400
    assert problem in " ".join(response.json()["output_schema"])
    assert Run.objects.count() == 0


def test_references_inside_the_schema_still_work(api):
    schema = {
        "$defs": {
            "answer": {"type": "integer", "minimum": 0},
            "tree": {"$id": "urn:tree", "$ref": "#/$defs/n"},
        },
        "$ref": "#/$defs/answer",
    }
    schema["$defs"]["tree"]["$defs"] = {"n": {"type": "integer"}}  # resolved inside the nested resource
    response = create_run(api, output_schema=schema)
    assert response.status_code == 201, response.json()
    run = response.json()
    assert (run["status"], run["stop_reason"], run["output"]) == ("done", "final_answer", "85")
    wrong = create_run(api, output_schema={"$defs": {"n": {"type": "integer", "maximum": 10}}, "$ref": "#/$defs/n"})
    assert wrong.json()["stop_reason"] == "max_turns"  # 85 > 10: checked through the reference, never accepted


def test_a_stored_agent_whose_schema_refers_outside_is_400_when_used(api, served):
    Agent.objects.create(name="leaky", output_schema={"$ref": f"{served.url}/a.json"})  # saved before the check
    response = create_run(api, agent="leaky")
    assert response.status_code == 400
    assert "leaky" in response.json()["output_schema"][0]
    assert served.requests == [] and Run.objects.count() == 0


def test_the_console_refuses_an_agent_whose_schema_refers_outside(served):
    from agents.admin.agents import AgentForm

    form = AgentForm(data={"name": "leaky", "protocol": "tools", "output_schema": f'{{"$ref": "{served.url}/a.json"}}'})
    assert not form.is_valid()
    assert "outside the schema" in " ".join(form.errors["output_schema"])
    assert served.requests == []


def test_a_run_stored_with_a_remote_reference_checks_its_answer_without_fetching(alice, served):
    """A run created before the check (here: past the API) validates its final answer with no retrieval at all: the
    answer is refused as unchecked, the model is told so, and the served document never shows up in the trace."""
    options = submit.RunOptions(
        input="What is 12*7, plus 1?", mode="background", output_schema={"$ref": f"{served.url}/a.json"}
    )
    run = submit.start_run(owner=alice, options=options)
    drive.execute(run_id=run.pk)
    run.refresh_from_db()
    assert served.requests == []
    assert run.stop_reason == "max_turns"
    trace = " ".join(str(s.data) for s in run.steps.all())
    assert "fetched-document-marker" not in trace and "unusable" in trace


def test_validators_never_retrieve_a_reference(served):
    for schema in remote_forms(served.url):
        assert "unusable" in (value_error(schema, {"x": "x"}) or "")
    assert schemas.schema_problem({"$ref": f"{served.url}/a.json"}) is not None
    assert served.requests == []


def test_an_mcp_tool_whose_schema_refers_outside_is_left_out(served):
    import mcp.types as types

    from agents.tools.mcp.config import Limits, ServerConfig
    from agents.tools.mcp.servers import make_tool

    config = ServerConfig(name="srv", command="x")
    remote = {"type": "object", "properties": {"p": {"$ref": f"{served.url}/a.json"}}}
    listed = types.Tool(name="t", description="d", input_schema=remote)
    assert make_tool(config, listed, Limits(call_s=5.0, connect_s=5.0, refresh_s=60.0), lambda *a: "") is None
    assert served.requests == []
