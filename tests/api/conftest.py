"""Fixtures and helpers for the HTTP API tests (contract: /work/shared/API.md)."""

from __future__ import annotations

import ipaddress
import socket
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.conftest import client_for

RUNS = "/api/v1/runs"
TOOLS = "/api/v1/tools"
SEED = "/v1/agent/runs"
HEALTH = "/api/v1/health"
SCHEMA = "/api/v1/schema"
DOCS = "/api/v1/docs"

ARITHMETIC = "What is 12*7, plus 1?"

RUN_KEYS = {
    "id",
    "status",
    "stop_reason",
    "ok",
    "output",
    "turns",
    "input",
    "thread_id",  # v1.1: null outside a thread
    "agent",  # v1.1: null without one
    "output_json",  # v1.1: null without an output schema
    "metadata",  # v1.2 (issue 37): the client's labels, {} when none
    "parent",  # v1.2 (issue 36): a child run's parent {"run", "step"}, else null
    "forked_from",  # v1.2 (issue 36): a fork's original {"run", "step"}, else null
    "cost",  # v1.2 (issue 38): a decimal string in AGENT_CURRENCY, null without a known price
    "max_total_tokens",  # issue 38: per-run limits (null: none)
    "max_tool_calls",
    "tool_limits",
    "guardrails",  # issue 38
    "fallback_models",  # issue 38
    "agent_version",  # v1.3 (issue 51): the agent's version it ran, null without an agent
    "prompt_cache",  # v1.3 (issue 51)
    "history",  # v1.3 (issue 51): truncate or summarize
    "mode",
    "protocol",
    "provider",
    "model",
    "max_turns",
    "timeout_s",
    "tools",
    "sensitive_tools",
    "pending_action",
    "pending_actions",  # v1.1
    "error",
    "usage",
    "created_at",
    "updated_at",
}
STEP_COMMON = {"index", "kind", "created_at", "latency_ms"}
STEP_FIELDS = {
    "model": {"thought", "text", "tool_calls", "final_answer", "usage", "cost"},
    "tool": {"call_id", "name", "arguments", "output", "is_error"},
    "approval": {"call_id", "name", "original_arguments", "arguments", "approved", "reviewer", "reason"},
    "error": {"message"},
}
SEED_KEYS = {"run_id", "output", "stop_reason", "turns", "ok"}
DDG_ANSWER = {"Heading": "Python", "AbstractText": "Python is a programming language."}


def run_url(run_id, suffix: str = "") -> str:
    return f"{RUNS}/{run_id}{'/' + suffix if suffix else ''}"


def create_run(client, input: str = ARITHMETIC, **fields):
    return client.post(RUNS, {"input": input, **fields}, format="json")


def make_runs(owner, n: int, **fields):
    """`n` stored runs without running the agent loop (for lists, paging and query counts)."""
    from agents.models import Run
    from tests.conftest import stored_run_fields

    return Run.objects.bulk_create([Run(owner=owner, **stored_run_fields(**fields)) for _ in range(n)])


def spread_created_at(runs) -> None:
    """Distinct created_at values, runs[0] oldest."""
    from agents.models import Run

    base = timezone.now() - timedelta(hours=1)
    for i, run in enumerate(runs):
        Run.objects.filter(pk=run.pk).update(created_at=base + timedelta(seconds=i))


def run_count() -> int:
    from agents.models import Run

    return Run.objects.count()


@pytest.fixture
def search_stub(stub, settings):
    """DuckDuckGo answered by the local stub; no network is ever touched."""
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"
    stub.add("GET", "/", json=DDG_ANSWER, repeat=True)
    return stub


@pytest.fixture
def no_search_network(stub, settings):
    """Any search call would hit the stub, which has nothing scripted (404 → tool error), never the network."""
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"
    return stub


@pytest.fixture
def reviewer_api(reviewer):
    return client_for(reviewer)


@pytest.fixture
def bob_api(bob):
    return client_for(bob)


@pytest.fixture(autouse=True)
def _fast_password_hashing(settings):
    """Users are made in almost every test: a cheap hasher keeps the suite fast (login still checks it)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture
def resolver(monkeypatch) -> dict[str, list[str]]:
    """The table (host -> addresses, IPv4 or IPv6) that socket.getaddrinfo answers from for the test's duration."""
    table: dict[str, list[str]] = {}
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host in table:
            return [
                (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in table[host]
            ]
        if host in ("127.0.0.1", "::1", "localhost") or _is_literal(host):
            return real(host, port, *args, **kwargs)
        raise socket.gaierror(socket.EAI_NONAME, "no such host")

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return table


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
