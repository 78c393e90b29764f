"""The OpenAPI schema tells the truth: schemathesis fuzzes every operation of /api/v1/schema with all its checks.

In process (the WSGI app), as a normal user, with the demo provider only. Search can never run: it is sensitive and
this user may neither approve nor invoke it, its URLs point at a local stub that must stay untouched, and sockets
refuse anything but loopback.
"""

from __future__ import annotations

import contextlib
import functools
import socket
import uuid
from collections.abc import Iterator

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections, transaction
from django.test import override_settings
from hypothesis import HealthCheck, settings

from agents.api import events
from agents.api.views import runs as views
from agents.models import Agent, Thread
from agents.runs import runtime
from agents.runs.store import has_nul
from reactsite.wsgi import application
from tests.conftest import make_user
from tests.support.http_stub import StubServer

pytestmark = pytest.mark.schemathesis

EXAMPLES = 50  # per operation and phase
SCENARIOS = 25  # of up to 8 chained calls each
TOKEN = "5c4e3a1f" * 5  # the fuzz user's API token
LOOPBACK = ("127.0.0.1", "::1", "localhost")
AUTH = {"Authorization": f"Token {TOKEN}"}  # passed per call, so the auth checks know it is the real credential
FUZZ_SETTINGS = {
    "AGENT_RATE_LIMIT": "100000/m",
    "AGENT_ALLOWED_PROVIDERS": ["demo"],  # offline: no other provider can even be named
    "AGENT_DEFAULT_PROVIDER": "demo",
    "AGENT_SELF_APPROVAL": False,  # the fuzz user can never let a search run
    "TAVILY_API_KEY": "",
    # `input` a string only: whether an image's bytes are what its media_type says, or where its URL's host resolves
    # (no lookups here), is beyond a schema (tests/api/test_image_input.py covers the parts).
    "AGENT_MAX_IMAGES": 0,
    "AGENT_MAX_DOCUMENTS": 0,  # and whether a document's bytes are a PDF, or where its URL leads (test_documents.py)
}
# A state conflict, not a bad request: the same Idempotency-Key sent earlier in the run with another body.
RUN_CREATE_POSITIVE_STATUSES = ["2xx", "3xx", "401", "403", "404", "409", "422", "429"]
# Which steps a run has is known only against the run (a `from_step` past its last step, or at its final answer: 400).
FORK_POSITIVE_STATUSES = ["2xx", "3xx", "400", "401", "403", "404", "409", "429"]
# A cron expression or a time zone is checked by its library, not by a pattern a schema can hold (400).
SCHEDULE_POSITIVE_STATUSES = ["2xx", "3xx", "400", "401", "403", "404", "429"]
# An expiry is judged against the clock (a past `expires_at` is 400), and a user holds at most API_KEYS_PER_USER keys.
KEY_CREATE_POSITIVE_STATUSES = ["2xx", "3xx", "400", "401", "403", "429"]
# Where a well-formed URL points is known only once its host is resolved (a private address, or no such host: 400).
WEBHOOK_CREATE_POSITIVE_STATUSES = ["2xx", "3xx", "400", "401", "403", "404", "429"]


def _config() -> schemathesis.Config:
    """All checks (the default), deterministic and bounded."""
    return schemathesis.Config.from_dict(
        {
            "generation": {"max-examples": EXAMPLES, "deterministic": True},
            "operations": [
                {
                    "include-operation-id": "api_v1_runs_create",
                    "checks": {"positive_data_acceptance": {"expected-statuses": RUN_CREATE_POSITIVE_STATUSES}},
                },
                {
                    "include-operation-id": "api_v1_schedules_create",
                    "checks": {"positive_data_acceptance": {"expected-statuses": SCHEDULE_POSITIVE_STATUSES}},
                },
                {
                    "include-operation-id": "api_v1_schedules_partial_update",
                    "checks": {"positive_data_acceptance": {"expected-statuses": SCHEDULE_POSITIVE_STATUSES}},
                },
                {
                    "include-operation-id": "api_v1_keys_create",
                    "checks": {"positive_data_acceptance": {"expected-statuses": KEY_CREATE_POSITIVE_STATUSES}},
                },
                {
                    "include-operation-id": "api_v1_runs_fork_create",
                    "checks": {"positive_data_acceptance": {"expected-statuses": FORK_POSITIVE_STATUSES}},
                },
                {
                    "include-operation-id": "api_v1_webhooks_create",
                    "checks": {"positive_data_acceptance": {"expected-statuses": WEBHOOK_CREATE_POSITIVE_STATUSES}},
                },
            ],
        }
    )


def _served_schema() -> schemathesis.BaseSchema:
    """`GET /api/v1/schema` as the app serves it under the fuzz's settings (it reads them per request)."""
    with override_settings(**FUZZ_SETTINGS):
        return schemathesis.openapi.from_wsgi("/api/v1/schema", application, config=_config())


schema = _served_schema()


def _nul_in_a_key(value: object) -> bool:
    """Whether a JSON value has an object key with a NUL in it, at any depth."""
    if isinstance(value, dict):
        return any("\x00" in key or _nul_in_a_key(item) for key, item in value.items())
    return isinstance(value, list) and any(_nul_in_a_key(item) for item in value)


def _nul_in_free_form(body: object) -> bool:
    """Whether free-form JSON (an output schema, a decision's arguments) holds a NUL in any key or string."""
    if not isinstance(body, dict):
        return False
    decisions = body.get("decisions") if isinstance(body.get("decisions"), list) else []
    free = [body.get("output_schema"), body.get("arguments")]
    free += [d.get("arguments") for d in decisions if isinstance(d, dict)]
    return any(has_nul(value) for value in free)


@schema.hook
def filter_body(context: object, body: object) -> bool:
    """OpenAPI 3.0 cannot say an object's keys hold no NUL, nor (free-form JSON being described as free-form, never
    recursively) the strings inside free-form JSON: the schema says it in words, the API answers 400."""
    return not _nul_in_a_key(body) and not _nul_in_free_form(body)


TOOL_LISTS = ("tools", "sensitive_tools")
FUZZ_THREAD = "0f0e0d0c-0b0a-4908-8706-050403020100"  # the fuzz user's thread: the only thread_id that can exist
FUZZ_AGENT = "fuzz"  # the only agent


@schema.hook
def map_case(context: object, case: schemathesis.Case) -> schemathesis.Case:
    """A schema-valid `thread_id` is any UUID, but only the caller's own thread exists (another is a 400, API.md):
    a well-formed one is pointed at the fuzz user's thread; a malformed one is kept, to be refused. Likewise an
    agent's name and tool names (strings in the schema: tools come and go). (A case hook: the coverage phase applies
    no body hooks.)"""
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("metadata"), dict):
        # OpenAPI 3.0 cannot say which keys an object may have (letters, digits and `_ . : -`): its description says
        # it in words, and the API answers another key with 400. The values stay as generated.
        keys = [f"k{i}" for i in range(len(body["metadata"]))]
        body = case.body = {**body, "metadata": dict(zip(keys, body["metadata"].values(), strict=True))}
    if isinstance(body, dict) and isinstance(body.get("agent"), str) and body["agent"].strip():
        body = case.body = {**body, "agent": FUZZ_AGENT}  # likewise an agent: only stored names exist
    if isinstance(body, dict) and any(isinstance(body.get(k), list) for k in TOOL_LISTS):
        body = case.body = {**body, **{k: _known_tools(body[k]) for k in TOOL_LISTS if isinstance(body.get(k), list)}}
    if isinstance(body, dict):
        body = case.body = {**body, **_usable_safety(body)}
    if isinstance(body, dict) and isinstance(body.get("thread_id"), str):
        try:
            uuid.UUID(body["thread_id"])
        except ValueError:
            return case
        case.body = {**body, "thread_id": FUZZ_THREAD}
    return case


def _usable_safety(body: dict) -> dict:
    """Likewise issue 38's options: a fallback is `provider/model` of an allowed provider with its key (only `demo`
    here), a per-tool limit names a registered tool, and a guardrail is one of the documented kinds (free-form
    objects in the schema: each kind's fields are in its description). Well-formed values are pointed at usable ones;
    others are kept, to be refused."""
    mapped: dict = {}
    fallbacks = body.get("fallback_models")
    if isinstance(fallbacks, list):
        mapped["fallback_models"] = [
            f"demo/m{i}" if isinstance(name, str) and name.strip() and "\x00" not in name else name
            for i, name in enumerate(fallbacks)
        ]
    limits = body.get("tool_limits")
    if isinstance(limits, dict):
        known = runtime.tool_registry().names()
        mapped["tool_limits"] = {known[i % len(known)]: value for i, value in enumerate(limits.values())}
    guardrails = body.get("guardrails")
    if isinstance(guardrails, list):
        mapped["guardrails"] = [
            {"type": "max_length", "name": f"g{i}", "chars": 100000} if isinstance(g, dict) else g
            for i, g in enumerate(guardrails)
        ]
    return mapped


def _known_tools(names: list) -> list:
    """Tool names are strings in the schema (tools come and go), but only registered ones exist (another is a 400):
    each well-formed name is pointed at a registered tool; a malformed one is kept, to be refused."""
    known = runtime.tool_registry().names()
    return [
        known[len(name) % len(known)]
        if isinstance(name, str) and name.strip() and "\x00" not in name and len(name) <= 64
        else name
        for name in names
    ]


@pytest.fixture
def _loopback_only(monkeypatch) -> None:
    """A connection or name lookup for anything but this machine fails instead of leaving it."""
    connect, getaddrinfo = socket.socket.connect, socket.getaddrinfo

    def guarded_connect(sock: socket.socket, address) -> None:
        if sock.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOOPBACK:
            raise AssertionError(f"network access to {address!r} during the schema fuzz")
        return connect(sock, address)

    def guarded_getaddrinfo(host, *args, **kwargs) -> list:
        if host not in LOOPBACK:  # as on a machine without DNS: the app must answer as for an unknown host
            raise socket.gaierror(socket.EAI_NONAME, f"no lookup of {host!r} during the schema fuzz")
        return getaddrinfo(host, *args, **kwargs)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)


@pytest.fixture
def _connection_kept() -> Iterator[None]:
    """Requests go through the bare WSGI app: keep the test's connection open, as Django's test client does."""
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def fuzz_env(db, settings, stub, monkeypatch, _loopback_only, _connection_kept) -> StubServer:
    """The fuzz's settings and user; a paused run's event stream ends soon (it would stay open for minutes)."""
    from rest_framework.authtoken.models import Token

    for name, value in FUZZ_SETTINGS.items():
        setattr(settings, name, value)
    settings.TAVILY_URL = settings.DUCKDUCKGO_URL = stub.url + "/"
    monkeypatch.setattr(views, "run_events", functools.partial(events.run_events, max_s=0.2, poll_s=0.05))
    user = make_user("fuzz")
    Token.objects.create(user=user, key=TOKEN)
    Thread.objects.create(pk=FUZZ_THREAD, owner=user)
    Agent.objects.create(name=FUZZ_AGENT, provider="demo")
    return stub


@contextlib.contextmanager
def _rolled_back() -> Iterator[None]:
    """What an example writes is undone after it: every example (and its replay while shrinking) starts alike."""
    with transaction.atomic():
        yield
        transaction.set_rollback(True)


@schema.parametrize()
@settings(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
def test_operation_conforms_to_the_schema(case: schemathesis.Case, fuzz_env: StubServer) -> None:
    with _rolled_back():
        case.call_and_validate(headers=AUTH)
    assert fuzz_env.requests == [], "search reached its backend"


# `{name}` there stands for an unknown tool (`not: {enum: [...]}`), but link inference ignores `not` and feeds it the
# names GET /tools lists; each tool has its own path, which the machine does use.
_CHAINED = schema.exclude(operation_id="api_v1_tools_invoke_create")


class _Machine(_CHAINED.as_state_machine()):
    """Operations chained through the links schemathesis infers (create a run, then read, advance, cancel, delete)."""

    def setup(self) -> None:
        self._scenario = _rolled_back()
        self._scenario.__enter__()

    def teardown(self) -> None:
        self._scenario.__exit__(None, None, None)

    def get_call_kwargs(self, case: schemathesis.Case) -> dict:
        return {"headers": AUTH}

    def validate_response(self, response, case: schemathesis.Case, additional_checks=None, **kwargs) -> None:
        if _no_such_thread(response, case):
            return  # a link filled thread_id with an id that is no thread of the caller's (deleted by the chain, or
            # another resource's id): the contract's 400, which no schema can express
        case.validate_response(response, headers=AUTH, additional_checks=additional_checks, transport_kwargs=kwargs)


def _no_such_thread(response, case: schemathesis.Case) -> bool:
    body = case.body if isinstance(case.body, dict) else {}
    thread_id = body.get("thread_id")
    if response.status_code != 400 or not isinstance(thread_id, str):
        return False
    try:
        answer = response.json()
    except ValueError:
        return False
    return answer == {"thread_id": ["No thread with this id."]} and not Thread.objects.filter(pk=thread_id).exists()


def test_chained_operations_conform_to_the_schema(fuzz_env: StubServer) -> None:
    _Machine.run(
        settings=settings(
            max_examples=SCENARIOS,
            stateful_step_count=8,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
    )
    assert fuzz_env.requests == [], "search reached its backend"
