"""`/mcp`: the site's agents as the tools of a Model Context Protocol server (docs/mcp-server.md).

Each `Agent` is a tool of its name that takes `{"input": "…"}`. A call is a sync run of the authenticated user,
submitted through the service layer as `POST /api/v1/runs` submits one: stored, in the API and the console like any
run, counted in the rate limit and the daily quota. Its answer is the final answer and the run's id; a run paused for
a human approval says what waits and how to decide it. The tools and those answers are made in
agents/api/mcp_tools.py; this module is the endpoint: the transport, the JSON-RPC framing and the methods.

The transport is MCP's streamable HTTP in its stateless form with JSON responses: a POST carries one JSON-RPC message;
a request is answered by one `application/json` object, a notification or a response by `202`; no `Mcp-Session-Id`
is issued; GET and DELETE are `405`. That is one request and one answer, which the site's WSGI workers (gunicorn,
gevent) serve like any other view, with Django's ORM as it is; the SDK's own server is ASGI and would need an event
loop beside them. Every message is still read and written with the SDK's types (`mcp.types`, checked and shaped per
protocol version by `mcp.types.methods`), imported on this route's first request: a worker that never serves it never
loads the SDK (as agents/tools/mcp/).

Versions are those of the `initialize` handshake (`HANDSHAKE_PROTOCOL_VERSIONS`). After it a client names its version
with `MCP-Protocol-Version` (absent: 2025-03-26, as the specification says); a version not served is `400`, which a
client of the stateless 2026 revision (the SDK's `Client` probing `server/discover`) takes as its cue to fall back to
`initialize`.

Before the message is read: an `Origin` that is not the site's (ALLOWED_HOSTS, CORS_ALLOWED_ORIGINS) is `403` (the
specification's guard against DNS rebinding), missing or wrong credentials `401`, as everywhere in the API (the same
authentication class, `{"detail": …}` with `WWW-Authenticate`). Those answers and 406, 413 and 415 are the API's
`{"detail": …}`; from the body on, every error is a JSON-RPC error.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db.utils import InterfaceError, OperationalError
from django.http import HttpResponse
from django.http.request import split_domain_port, validate_host
from rest_framework import exceptions
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from agents.api.authentication import FastTokenAuthentication, owner_facts
from agents.api.mcp_tools import agent_tool, detail_text, failed, input_problem, run_result
from agents.api.throttling import AgentRateThrottle
from agents.errors import ServiceError
from agents.models import Agent, RunMode
from agents.runs.submit import RunOptions, submit_run
from agents.usage.quotas import QuotaExceeded

if TYPE_CHECKING:
    from mcp import types

log = logging.getLogger(__name__)

SERVER_NAME = "reactsite"
INSTRUCTIONS = (
    'Each tool is one of this site\'s agents. Call it with {"input": "<the task>"}: the agent runs it as a run of '
    "your user and answers with its final answer and the run's id. A run that needs a human's approval for a tool "
    "call pauses instead; the answer then says which call waits and how to decide it."
)
KNOWN_SHOWN = 50  # agents named in an unknown tool's error


class _JsonOnly(BaseContentNegotiation):
    """Every answer is JSON: the Accept header is checked by the view itself (406 only for a POST that cannot read
    JSON), so a 401 or a 405 is never turned into a 406 first."""

    def select_parser(self, request, parsers):
        return None

    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class McpView(APIView):
    """The MCP endpoint (streamable HTTP, stateless, JSON responses)."""

    authentication_classes = [FastTokenAuthentication]  # as the REST API: `Token <key>` or `Bearer <key>`
    permission_classes = [IsAuthenticated]
    renderer_classes = [JSONRenderer]
    content_negotiation_class = _JsonOnly
    metadata_class = None  # OPTIONS is not an MCP method (a CORS preflight is answered by the CORS middleware)
    schema = None  # not an operation of the REST API's OpenAPI document: MCP describes itself (tools/list)

    def perform_authentication(self, request) -> None:
        _check_origin(request)  # first: a page of another site learns nothing, not even whether a token is good
        super().perform_authentication(request)

    def post(self, request) -> HttpResponse:
        if not _accepts_json(request.headers.get("Accept")):
            raise exceptions.NotAcceptable(
                "This server answers in JSON: send Accept: application/json, text/event-stream."
            )
        media_type = (request.content_type or "").split(";", 1)[0].strip().lower()
        if media_type != "application/json":
            detail = f"Unsupported media type {media_type or 'none'!r}: send the JSON-RPC message as application/json."
            raise exceptions.UnsupportedMediaType(media_type or "none", detail)
        return self.answer(request, request.body)  # too large a body: RequestDataTooBig, the API's 413

    def answer(self, request, body: bytes) -> HttpResponse:
        """The answer to one POSTed JSON-RPC message."""
        from mcp import types
        from pydantic import ValidationError

        try:
            message = json.loads(body)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested too deeply
            return _error(None, types.PARSE_ERROR, "Parse error: the body is not a JSON document.", status=400)
        if not isinstance(message, dict):
            what = "a batch (a JSON array)" if isinstance(message, list) else "not a JSON object"
            detail = f"Invalid request: one JSON-RPC message per POST, and this is {what}."
            return _error(None, types.INVALID_REQUEST, detail, status=400)
        if message.get("method") != "initialize":
            requested = request.headers.get("MCP-Protocol-Version")
            if requested is not None and requested not in _handshake_versions():
                return _unsupported_version(_id_of(message), requested)
        if "method" not in message or "id" not in message:  # a notification, or a response to a request of ours
            shape = types.JSONRPCNotification if "method" in message else types.JSONRPCResponse | types.JSONRPCError
            try:
                _validate(shape, message)
            except ValidationError:
                return _error(None, types.INVALID_REQUEST, "Invalid request: not a JSON-RPC 2.0 message.", status=400)
            return HttpResponse(status=202, content_type="application/json")  # accepted; nothing to answer
        try:
            rpc = types.JSONRPCRequest.model_validate(message, by_name=False)
        except ValidationError:
            detail = 'Invalid request: not a JSON-RPC 2.0 request (jsonrpc "2.0", an id, a method, object params).'
            return _error(None, types.INVALID_REQUEST, detail, status=400)
        return self.call_method(request, rpc)

    def call_method(self, request, rpc: types.JSONRPCRequest) -> HttpResponse:
        """A request's result or its JSON-RPC error, for the version it speaks."""
        from mcp import types
        from mcp.types import methods
        from pydantic import ValidationError

        if rpc.method == "initialize":
            offered = (rpc.params or {}).get("protocolVersion")
            version = offered if offered in _handshake_versions() else _latest_handshake_version()
        else:
            version = request.headers.get("MCP-Protocol-Version") or types.DEFAULT_NEGOTIATED_VERSION
        handler = HANDLERS.get(rpc.method)
        if handler is None:
            return _error(rpc.id, types.METHOD_NOT_FOUND, f"Method not found: {rpc.method}", data=rpc.method)
        try:
            parsed = methods.parse_client_request(rpc.method, version, rpc.params)
        except KeyError:  # not a method of this version
            return _error(rpc.id, types.METHOD_NOT_FOUND, f"Method not found at {version}: {rpc.method}")
        except ValidationError as exc:
            return _error(rpc.id, types.INVALID_PARAMS, _invalid_params(exc))
        try:
            result = getattr(self, handler)(request, parsed, version)
            shaped = methods.serialize_server_result(rpc.method, version, _dump(result))  # as this version has it
        except RpcError as exc:
            return _error(rpc.id, exc.code, exc.message, data=exc.data)
        except (OperationalError, InterfaceError):
            raise  # the database is unavailable: the API's 503, which a client may retry
        except Exception:  # a bug of ours: logged, and a JSON-RPC error the client can read (never an HTML page)
            log.exception("MCP %s failed", rpc.method)
            return _error(rpc.id, types.INTERNAL_ERROR, "Internal error.", status=500)
        response = types.JSONRPCResponse(jsonrpc="2.0", id=rpc.id, result=shaped)
        return _json(response.model_dump(mode="json", by_alias=True))

    # --- the methods ------------------------------------------------------------------------------------------------

    def rpc_initialize(self, request, parsed, version: str) -> types.InitializeResult:
        from mcp import types

        return types.InitializeResult(
            protocol_version=version,
            capabilities=types.ServerCapabilities(tools=types.ToolsCapability(list_changed=False)),
            server_info=types.Implementation(name=SERVER_NAME, title="reactsite agents", version=settings.VERSION),
            instructions=INSTRUCTIONS,
        )

    def rpc_ping(self, request, parsed, version: str) -> types.EmptyResult:
        from mcp import types

        return types.EmptyResult()

    def rpc_tools_list(self, request, parsed, version: str) -> types.ListToolsResult:
        """Every agent, by name: the whole list in one page."""
        from mcp import types

        return types.ListToolsResult(tools=[agent_tool(agent) for agent in Agent.objects.order_by("name")])

    def rpc_tools_call(self, request, parsed: types.CallToolRequest, version: str) -> types.CallToolResult:
        """A sync run of the named agent for the caller: its answer, its pause, or why it could not run."""
        from mcp import types

        name, arguments = parsed.params.name, parsed.params.arguments or {}
        if "\x00" in name or not Agent.objects.filter(name=name).exists():
            known = list(Agent.objects.order_by("name").values_list("name", flat=True)[:KNOWN_SHOWN])
            listed = ", ".join(known) or "none yet"
            raise RpcError(
                types.INVALID_PARAMS, f"Unknown tool {name!r}: no agent of that name. Known: {listed}.", known
            )
        problem = input_problem(arguments)
        if problem:
            return failed(problem)
        throttle = AgentRateThrottle()  # one budget for every route that can start a model call
        if not throttle.allow_request(request, self):
            return failed(
                f"Too many runs: the rate limit is {settings.AGENT_RATE_LIMIT}; try again in {throttle.wait()} s."
            )
        options = RunOptions(input=arguments["input"], agent=name, mode=RunMode.SYNC)
        try:
            run = submit_run(owner=request.user, options=options, facts=owner_facts(request))
        except QuotaExceeded as exc:
            return failed(str(exc))
        except ServiceError as exc:  # InvalidRequest (the agent's configuration), ThreadBusy, …: what the API says
            return failed(detail_text(exc.detail))
        return run_result(request, run)


HANDLERS = {
    "initialize": "rpc_initialize",
    "ping": "rpc_ping",
    "tools/list": "rpc_tools_list",
    "tools/call": "rpc_tools_call",
}


class RpcError(Exception):
    """A request that gets a JSON-RPC error rather than a result."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


# --- the transport --------------------------------------------------------------------------------------------------


def _check_origin(request) -> None:
    """An `Origin` (a browser's request) must be the site's: a host of ALLOWED_HOSTS or an origin of
    CORS_ALLOWED_ORIGINS. Else 403, before anything else (MCP's guard against DNS rebinding)."""
    origin = request.headers.get("Origin")
    if origin is None or _origin_allowed(origin):
        return
    raise exceptions.PermissionDenied(f"Origin {origin!r} is not allowed to use this server.")


def _origin_allowed(origin: str) -> bool:
    if origin in getattr(settings, "CORS_ALLOWED_ORIGINS", ()):
        return True
    parts = urlsplit(origin)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/"):
        return False  # "null" (a sandboxed page, a file), or not an origin at all
    domain, _port = split_domain_port(parts.netloc)
    allowed = settings.ALLOWED_HOSTS or ([".localhost", "127.0.0.1", "[::1]"] if settings.DEBUG else [])
    return bool(domain) and validate_host(domain, allowed)  # as Django checks the Host header


def _accepts_json(accept: str | None) -> bool:
    """Whether the Accept header lets the answer be JSON (MCP clients send `application/json, text/event-stream`)."""
    if not accept:
        return True
    media = {part.split(";", 1)[0].strip().lower() for part in accept.split(",")}
    return bool(media & {"application/json", "application/*", "*/*"})


def _handshake_versions() -> tuple[str, ...]:
    from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS

    return HANDSHAKE_PROTOCOL_VERSIONS


def _latest_handshake_version() -> str:
    from mcp.types.version import LATEST_HANDSHAKE_VERSION

    return LATEST_HANDSHAKE_VERSION


def _id_of(message: dict) -> int | str | None:
    """The message's id when it is one JSON-RPC allows (a string or an integer), else None."""
    value = message.get("id")
    return value if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)) else None


def _unsupported_version(request_id: int | str | None, requested: str) -> HttpResponse:
    """400 for a version this server does not speak, naming those it does (the SDK's error and data)."""
    from mcp import types

    supported = list(_handshake_versions())
    data = types.UnsupportedProtocolVersionErrorData(supported=supported, requested=requested).model_dump(mode="json")
    detail = f"Unsupported protocol version {requested!r}: this server speaks {', '.join(supported)}."
    return _error(request_id, types.UNSUPPORTED_PROTOCOL_VERSION, detail, data=data, status=400)


def _validate(shape: Any, message: dict) -> None:
    from pydantic import TypeAdapter

    TypeAdapter(shape).validate_python(message, by_name=False)


def _invalid_params(exc) -> str:
    """A pydantic error as a short message (where and what, never the value sent)."""
    found = [
        f"{'.'.join(str(p) for p in error['loc']) or 'params'}: {error['msg']}"
        for error in exc.errors(include_url=False)
    ]
    return "Invalid params: " + "; ".join(found[:3]) + ("; …" if len(found) > 3 else "")


def _dump(result: Any) -> dict[str, Any]:
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def _error(request_id: Any, code: int, message: str, *, data: Any = None, status: int = 200) -> HttpResponse:
    """A JSON-RPC error. `status`: 200 for a request that was read (its error is its answer), 4xx for a body that
    could not be, 500 for a failure of ours."""
    from mcp import types

    error = types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message, data=data)
    )
    dumped = error.model_dump(mode="json", by_alias=True, exclude_none=True)
    # JSON-RPC: an id that could not be read is null, never absent (exclude_none would drop it)
    return _json({"jsonrpc": dumped["jsonrpc"], "id": request_id, "error": dumped["error"]}, status)


def _json(body: dict[str, Any], status: int = 200) -> HttpResponse:
    return HttpResponse(json.dumps(body, separators=(",", ":")), status=status, content_type="application/json")
