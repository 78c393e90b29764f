"""`/mcp` (agents/api/mcp_server.py, agents/api/mcp_tools.py, docs/mcp-server.md): the agents as MCP tools over
streamable HTTP.

The official SDK's client drives a live server (pytest-django's, on 127.0.0.1) for what a real client does:
initialize, list the tools, call them, get each kind of answer. The transport's edges (statuses, bad bodies, headers,
origins) are checked with Django's test client, byte by byte.
"""

from __future__ import annotations

import json

import anyio
import httpx2
import pytest
from django.db.utils import OperationalError
from django.test import Client as DjangoClient
from mcp import Client, ClientSession, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from agents.models import Agent, Run
from tests.api.conftest import ARITHMETIC, RUNS, run_count
from tests.conftest import client_for

MCP = "/mcp"
LIVE = pytest.mark.django_db(transaction=True)  # the live server's thread reads what the test commits
ACCEPT = "application/json, text/event-stream"


def key_of(user) -> str:
    return Token.objects.get_or_create(user=user)[0].key


def with_session(url: str, authorization: str | None, work):
    """`work(session)` on an initialized SDK session against `url` (the SDK's streamable HTTP client, httpx2)."""

    async def main():
        headers = {"Authorization": authorization} if authorization else {}
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http:
            async with streamable_http_client(url, http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    initialized = await session.initialize()
                    return initialized, await work(session)

    return anyio.run(main)


def address(live_server) -> str:
    """The live server's address on 127.0.0.1 (it listens there; pytest-django names it `localhost`)."""
    return live_server.url.replace("//localhost:", "//127.0.0.1:")


def session_of(live_server, user, work, scheme: str = "Token"):
    return with_session(address(live_server) + MCP, f"{scheme} {key_of(user)}", work)


def rpc(method: str, params: dict | None = None, id: int | str = 1) -> dict:
    message: dict = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return message


def post(client, body, **headers):
    """A POST of `body` (a dict, or the raw text of the body) as an MCP client sends it."""
    data = body if isinstance(body, str) else json.dumps(body)
    extra = {"HTTP_ACCEPT": ACCEPT} | {f"HTTP_{k.upper().replace('-', '_')}": v for k, v in headers.items()}
    return client.post(MCP, data, content_type=extra.pop("content_type", "application/json"), **extra)


@pytest.fixture
def helper(db):
    return Agent.objects.create(name="helper", instructions="Answers arithmetic with the calculator.\nBe brief.")


# --- the SDK's client on a live server ------------------------------------------------------------------------------


@LIVE
def test_initialize_and_the_agents_as_tools(live_server, alice, helper):
    Agent.objects.create(name="quiet")  # no instructions: a description that says what it does
    initialized, listed = session_of(live_server, alice, lambda s: s.list_tools())

    assert initialized.protocol_version == LATEST_HANDSHAKE_VERSION
    assert initialized.server_info.name == "reactsite"
    assert initialized.capabilities.tools is not None
    assert "input" in initialized.instructions
    tools = {tool.name: tool for tool in listed.tools}
    assert sorted(tools) == ["helper", "quiet"]
    assert tools["helper"].description == "Agent 'helper': Answers arithmetic with the calculator."  # the first line
    assert "quiet" in tools["quiet"].description and "final answer" in tools["quiet"].description
    schema = tools["helper"].input_schema
    assert schema["type"] == "object" and schema["required"] == ["input"]
    assert schema["properties"]["input"]["type"] == "string"
    assert tools["helper"].output_schema["required"] == ["run_id", "status", "stop_reason", "output", "url"]


@LIVE
def test_a_call_is_a_run_of_the_caller_with_its_answer_and_id(live_server, alice, bob, helper):
    _, result = session_of(live_server, alice, lambda s: s.call_tool("helper", {"input": ARITHMETIC}))

    assert result.is_error is False
    assert result.content[0].text == "85"
    run_id = result.structured_content["run_id"]
    assert run_id in result.content[1].text
    assert result.structured_content["status"] == "done"
    assert result.structured_content["stop_reason"] == "final_answer"
    assert result.structured_content["url"] == f"{address(live_server)}{RUNS}/{run_id}"
    run = Run.objects.get(pk=run_id)
    assert (run.owner, run.agent, run.mode, run.input, run.output) == (alice, "helper", "sync", ARITHMETIC, "85")
    assert run.instructions == helper.instructions  # started from the agent's configuration
    detail = client_for(alice).get(f"{RUNS}/{run_id}")
    assert detail.status_code == 200
    assert (detail.json()["output"], detail.json()["agent"]) == ("85", "helper")
    assert client_for(bob).get(f"{RUNS}/{run_id}").status_code == 404  # another user's: not there


@LIVE
def test_a_bearer_key_works_too(live_server, alice, helper):
    _, result = session_of(live_server, alice, lambda s: s.call_tool("helper", {"input": ARITHMETIC}), "Bearer")

    assert result.content[0].text == "85"
    assert Run.objects.get(pk=result.structured_content["run_id"]).owner == alice


@LIVE
@pytest.mark.parametrize(
    ("fields", "task", "tool"),
    [
        ({"tools": ["search"]}, "search django", "search"),  # search is sensitive by default
        ({"sensitive_tools": ["calculator"]}, ARITHMETIC, "calculator"),  # the agent widens the gate
    ],
    ids=["search", "sensitive_tools"],
)
def test_a_paused_run_says_what_waits_and_how_to_decide(live_server, alice, reviewer, search_stub, fields, task, tool):
    Agent.objects.create(name="careful", **fields)
    _, result = session_of(live_server, alice, lambda s: s.call_tool("careful", {"input": task}))

    assert result.is_error is False  # not a failure: a question for a human
    facts = result.structured_content
    run = Run.objects.get(pk=facts["run_id"])
    assert (run.status, run.owner) == ("awaiting_approval", alice)
    assert facts["status"] == "awaiting_approval" and facts["output"] is None
    assert [a["tool"] for a in facts["pending_actions"]] == [tool]
    text = result.content[0].text
    assert f"Run {run.pk} is paused" in text
    assert f"- {tool} with {{" in text
    assert f'POST {address(live_server)}{RUNS}/{run.pk}/advance with {{"approval": true}}' in text
    assert "A reviewer decides it" in text  # alice may not decide her own run (AGENT_SELF_APPROVAL is off)

    for _ in range(3):  # the calculator is called twice, each call approved on its own
        decided = client_for(reviewer).post(f"{RUNS}/{run.pk}/advance", {"approval": True}, format="json")
        assert decided.status_code == 200, decided.content
        if decided.json()["status"] != "awaiting_approval":
            break
    assert (decided.json()["status"], decided.json()["stop_reason"]) == ("done", "final_answer")


@LIVE
def test_the_owner_is_told_when_they_may_decide_themselves(live_server, alice, settings):
    settings.AGENT_SELF_APPROVAL = True
    Agent.objects.create(name="careful", sensitive_tools=["calculator"])
    _, result = session_of(live_server, alice, lambda s: s.call_tool("careful", {"input": ARITHMETIC}))

    assert "You may decide it yourself." in result.content[0].text


@LIVE
def test_a_run_that_stops_without_an_answer_is_an_error_with_its_reason(live_server, alice):
    Agent.objects.create(name="hasty", max_turns=1)  # the arithmetic takes three model calls
    _, result = session_of(live_server, alice, lambda s: s.call_tool("hasty", {"input": ARITHMETIC}))

    assert result.is_error is True
    assert result.content[0].text.startswith("The agent stopped without an answer: max_turns")
    run = Run.objects.get(pk=result.structured_content["run_id"])
    assert (run.status, run.stop_reason, run.owner) == ("done", "max_turns", alice)
    assert str(run.pk) in result.content[1].text


@LIVE
def test_an_unknown_agent_is_an_error_naming_the_known_ones(live_server, alice, helper):
    async def call(session):
        with pytest.raises(MCPError) as caught:
            await session.call_tool("nope", {"input": ARITHMETIC})
        return caught.value

    _, error = session_of(live_server, alice, call)

    assert error.code == -32602
    assert "Unknown tool 'nope'" in error.error.message and "Known: helper." in error.error.message
    assert run_count() == 0


@LIVE
def test_the_sdks_client_in_auto_mode_falls_back_to_the_handshake(live_server, alice, helper):
    """What agents/tools/mcp uses: `Client` probes the 2026 `server/discover` first; told the version is not
    served, it initializes as before."""

    headers = {"Authorization": f"Token {key_of(alice)}"}

    async def main():
        async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30.0)) as http:
            async with Client(
                streamable_http_client(address(live_server) + MCP, http_client=http), cache=None
            ) as client:
                return client.session.protocol_version, await client.call_tool("helper", {"input": ARITHMETIC})

    version, result = anyio.run(main)

    assert version == LATEST_HANDSHAKE_VERSION
    assert result.content[0].text == "85"


@LIVE
def test_no_key_or_a_wrong_one_gets_nothing_through_the_sdk(live_server, alice, helper):
    for authorization in (None, "Token not-a-real-key"):
        with pytest.raises(ExceptionGroup) as caught:  # the SDK's task groups wrap what initialize raised
            with_session(address(live_server) + MCP, authorization, lambda s: s.list_tools())
        assert caught.group_contains(MCPError, match="error response", depth=None)
    assert run_count() == 0


@pytest.mark.django_db
def test_an_agents_own_description_describes_its_tool(api):
    if not any(f.name == "description" for f in Agent._meta.get_fields()):
        pytest.skip("agents have no description field here")
    Agent.objects.create(name="writer", instructions="You write.\nWell.", description="Drafts release notes.")
    Agent.objects.create(name="plain", instructions="You are plain.")
    response = post(api, rpc("tools/list"))

    described = {t["name"]: t["description"] for t in response.json()["result"]["tools"]}
    assert described == {"plain": "Agent 'plain': You are plain.", "writer": "Drafts release notes."}


# --- tool results without a run -------------------------------------------------------------------------------------


def call_tool(client, name: str, arguments: dict) -> dict:
    response = post(client, rpc("tools/call", {"name": name, "arguments": arguments}))
    assert response.status_code == 200, response.content
    return response.json()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({}, "The argument `input` is required"),
        ({"input": "   "}, "The argument `input` is required"),
        ({"input": 7}, "The argument `input` is required"),
        ({"input": ARITHMETIC, "thread": "x"}, "Unknown argument(s): thread."),
        ({"input": "a\x00b"}, "NUL"),
    ],
)
def test_arguments_that_are_not_a_task_are_an_error_result(api, helper, arguments, says):
    body = call_tool(api, "helper", arguments)

    assert body["id"] == 1
    assert body["result"]["isError"] is True
    assert says in body["result"]["content"][0]["text"]
    assert run_count() == 0


@pytest.mark.django_db
def test_an_input_over_the_limit_is_an_error_result(api, helper, settings):
    settings.AGENT_MAX_INPUT_CHARS = 10
    body = call_tool(api, "helper", {"input": "x" * 11})

    assert body["result"]["isError"] is True
    assert "longer than 10 characters" in body["result"]["content"][0]["text"]
    assert run_count() == 0


@pytest.mark.django_db
def test_a_service_error_is_an_error_result_with_its_message(api, settings):
    Agent.objects.create(name="keyless", provider="openai")
    settings.OPENAI_API_KEY = ""
    body = call_tool(api, "keyless", {"input": ARITHMETIC})

    assert body["result"]["isError"] is True
    assert body["result"]["content"][0]["text"].startswith("provider: ")
    assert "OPENAI_API_KEY" in body["result"]["content"][0]["text"]
    assert run_count() == 0


@pytest.mark.django_db
def test_the_daily_quota_is_an_error_result(api, alice, helper, settings):
    settings.AGENT_DAILY_TOKEN_QUOTA = 1
    first = call_tool(api, "helper", {"input": ARITHMETIC})  # admitted; its first model call crosses the quota
    assert first["result"]["isError"] is True
    assert first["result"]["content"][0]["text"] == "The agent stopped without an answer: quota_exceeded."
    assert first["result"]["structuredContent"]["stop_reason"] == "quota_exceeded"

    second = call_tool(api, "helper", {"input": ARITHMETIC})  # refused before any run is made

    assert second["result"]["isError"] is True
    assert "daily token quota of 1 tokens is used up" in second["result"]["content"][0]["text"]
    assert "structuredContent" not in second["result"]
    assert run_count() == 1


@pytest.mark.django_db
def test_the_rate_limit_is_an_error_result(api, helper, settings):
    settings.AGENT_RATE_LIMIT = "1/m"
    assert call_tool(api, "helper", {"input": ARITHMETIC})["result"]["isError"] is False

    body = call_tool(api, "helper", {"input": ARITHMETIC})

    assert body["result"]["isError"] is True
    assert body["result"]["content"][0]["text"].startswith("Too many runs: the rate limit is 1/m")
    assert post(api, rpc("tools/list")).status_code == 200  # only calls count
    assert run_count() == 1


@pytest.mark.django_db
def test_a_failure_of_ours_is_a_json_rpc_internal_error(api, helper, monkeypatch):
    def broken(**kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr("agents.api.mcp_server.submit_run", broken)
    response = post(api, rpc("tools/call", {"name": "helper", "arguments": {"input": ARITHMETIC}}, id=4))

    assert response.status_code == 500
    assert response.json() == {"jsonrpc": "2.0", "id": 4, "error": {"code": -32603, "message": "Internal error."}}


@pytest.mark.django_db
def test_the_database_unavailable_is_the_apis_503(api, helper, monkeypatch):
    def unavailable(**kwargs):
        raise OperationalError("connection refused")

    monkeypatch.setattr("agents.api.mcp_server.submit_run", unavailable)
    response = post(api, rpc("tools/call", {"name": "helper", "arguments": {"input": ARITHMETIC}}))

    assert response.status_code == 503
    assert response["Retry-After"] == "2"
    assert response.json() == {"detail": "The database is unavailable; try again shortly."}


# --- the transport --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_no_key_is_401_in_json_with_www_authenticate():
    response = post(APIClient(), rpc("tools/list"))

    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    assert response["WWW-Authenticate"] == "Token"
    assert response.json() == {"detail": "Authentication credentials were not provided."}


@pytest.mark.django_db
@pytest.mark.parametrize("scheme", ["Token", "Bearer"])
def test_a_wrong_key_is_401_asking_for_the_scheme_used(scheme):
    response = post(APIClient(), rpc("tools/list"), authorization=f"{scheme} not-a-real-key")

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == scheme
    assert response.json() == {"detail": "Invalid token."}


@pytest.mark.django_db
def test_csrf_does_not_apply(alice, helper):
    client = DjangoClient(enforce_csrf_checks=True)
    response = post(client, rpc("tools/list"), authorization=f"Token {key_of(alice)}")

    assert response.status_code == 200
    assert [t["name"] for t in response.json()["result"]["tools"]] == ["helper"]


@pytest.mark.django_db
def test_a_trailing_slash_is_the_same_route(api, helper):
    response = api.post(MCP + "/", rpc("tools/list"), format="json", HTTP_ACCEPT=ACCEPT)

    assert response.status_code == 200
    assert response.json()["result"]["tools"][0]["name"] == "helper"


@pytest.mark.django_db
def test_malformed_json_is_a_parse_error_400(api):
    response = post(api, '{"jsonrpc": "2.0", "id": 1, "method": ')

    assert response.status_code == 400
    assert response["Content-Type"] == "application/json"
    error = {"code": -32700, "message": "Parse error: the body is not a JSON document."}
    assert response.json() == {"jsonrpc": "2.0", "id": None, "error": error}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("body", "says"),
    [
        ([rpc("ping"), rpc("ping", id=2)], "a batch"),
        ('"ping"', "not a JSON object"),
        ({"jsonrpc": "2.0", "id": None, "method": "ping"}, "not a JSON-RPC 2.0 request"),
        ({"jsonrpc": "1.0", "id": 1, "method": "ping"}, "not a JSON-RPC 2.0 request"),
        ({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": [1]}, "not a JSON-RPC 2.0 request"),
        ({"jsonrpc": "2.0", "id": 1}, "not a JSON-RPC 2.0 message"),
    ],
)
def test_a_body_that_is_not_one_request_is_an_invalid_request_400(api, body, says):
    response = post(api, body)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32600 and says in error["message"]
    assert response.json()["id"] is None


@pytest.mark.django_db
def test_an_unknown_method_is_method_not_found(api):
    for method in ("tools/nope", "prompts/list", "server/discover"):
        response = post(api, rpc(method, {}, id="a"))
        assert response.status_code == 200
        assert response.json()["id"] == "a"
        assert response.json()["error"]["code"] == -32601
        assert method in response.json()["error"]["message"]


@pytest.mark.django_db
def test_invalid_params_are_invalid_params(api, helper):
    response = post(api, rpc("tools/call", {"arguments": {"input": ARITHMETIC}}))

    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32602
    assert response.json()["error"]["message"] == "Invalid params: params.name: Field required"
    assert run_count() == 0


@pytest.mark.django_db
def test_initialize_answers_the_offered_version_or_its_latest(api):
    params = {"capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    for offered, answered in [("2025-03-26", "2025-03-26"), ("1999-01-01", LATEST_HANDSHAKE_VERSION)]:
        response = post(api, rpc("initialize", {"protocolVersion": offered, **params}))
        assert response.status_code == 200
        result = response.json()["result"]
        assert result["protocolVersion"] == answered
        assert result["serverInfo"]["name"] == "reactsite"
        assert result["capabilities"] == {"tools": {"listChanged": False}}
        assert "Mcp-Session-Id" not in response  # stateless: no session


@pytest.mark.django_db
def test_ping(api):
    response = post(api, rpc("ping", id=9))

    assert response.status_code == 200
    assert response.json() == {"jsonrpc": "2.0", "id": 9, "result": {}}


@pytest.mark.django_db
def test_notifications_and_responses_are_accepted_without_a_body(api):
    for body in (
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
        {"jsonrpc": "2.0", "id": 5, "result": {}},
    ):
        response = post(api, body)
        assert response.status_code == 202, body
        assert response.content == b""


@pytest.mark.django_db
def test_a_protocol_version_not_served_is_400_naming_those_served(api, helper):
    response = post(api, rpc("tools/list"), mcp_protocol_version="2026-07-28")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == -32022
    assert error["data"] == {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": "2026-07-28"}
    assert response.json()["id"] == 1
    served = post(api, rpc("tools/list"), mcp_protocol_version="2025-06-18")
    assert served.status_code == 200 and served.json()["result"]["tools"][0]["name"] == "helper"


@pytest.mark.django_db
def test_get_and_delete_are_405(api):
    for method in ("get", "delete"):
        response = getattr(api, method)(MCP, HTTP_ACCEPT=ACCEPT)
        assert response.status_code == 405, method
        assert "POST" in response["Allow"] and "GET" not in response["Allow"]
        assert "detail" in response.json()


@pytest.mark.django_db
def test_a_client_that_reads_no_json_is_406_and_a_body_that_is_not_json_415(api):
    refused = api.post(MCP, json.dumps(rpc("ping")), content_type="application/json", HTTP_ACCEPT="text/event-stream")
    assert refused.status_code == 406
    assert "application/json" in refused.json()["detail"]

    plain = api.post(MCP, json.dumps(rpc("ping")), content_type="text/plain", HTTP_ACCEPT=ACCEPT)
    assert plain.status_code == 415
    assert "text/plain" in plain.json()["detail"]


@pytest.mark.django_db
def test_a_body_over_the_limit_is_413(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    response = post(api, rpc("tools/call", {"name": "helper", "arguments": {"input": "x" * 200}}))

    assert response.status_code == 413
    assert "larger than 100 bytes" in response.json()["detail"]


@pytest.mark.django_db
@pytest.mark.parametrize("origin", ["https://evil.example", "http://localhost.evil.example:8000", "null"])
def test_an_origin_of_another_site_is_403_before_the_key_is_read(alice, origin):
    with_key = post(APIClient(), rpc("tools/list"), authorization=f"Token {key_of(alice)}", origin=origin)
    without = post(APIClient(), rpc("tools/list"), origin=origin)

    for response in (with_key, without):
        assert response.status_code == 403
        assert response.json() == {"detail": f"Origin {origin!r} is not allowed to use this server."}


@pytest.mark.django_db
@pytest.mark.parametrize("origin", ["http://localhost:8000", "http://127.0.0.1:8000", "https://app.example"])
def test_an_origin_of_this_site_or_an_allowed_one_is_served(api, settings, origin):
    settings.CORS_ALLOWED_ORIGINS = ["https://app.example"]
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
    response = post(api, rpc("ping"), origin=origin)

    assert response.status_code == 200
    assert response.json()["result"] == {}


@pytest.mark.django_db
def test_the_route_is_not_in_the_rest_apis_openapi_document():
    document = APIClient().get("/api/v1/schema.json").json()

    assert not [path for path in document["paths"] if "mcp" in path]
    assert "/api/v1/runs" in document["paths"] or "/api/v1/runs/" in document["paths"]
