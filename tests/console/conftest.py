"""Fixtures for the operator-console tests (Django admin, driven with the Django test client)."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.conftest import make_user

ARITHMETIC = "What is 12*7, plus 1?"
DDG_ANSWER = {"Heading": "Django", "AbstractText": "Django is a Python web framework."}
RUNS = "/admin/agents/run/"
PENDING = "/admin/agents/pendingapproval/"


def run_page(run) -> str:
    return f"{RUNS}{run.pk}/change/"


def decide_url(run) -> str:
    return f"{RUNS}{run.pk}/decide/"


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def grant(user, *codenames: str):
    """Add model permissions (by codename) and return a fresh user object (empty permission cache)."""
    from django.contrib.auth.models import Permission, User

    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return User.objects.get(pk=user.pk)


def stored_run(owner, **fields):
    """A run row without running the agent loop (for list, filter and rendering tests)."""
    from agents.models import Run
    from tests.conftest import stored_run_fields

    return Run.objects.create(owner=owner, **stored_run_fields(**fields))


def add_step(run, kind: str, latency_ms: int = 0, **data):
    """Append a step (the fields of its kind as in API.md) at the next index."""
    from agents.models import Step

    index = Step.objects.filter(run=run).count()
    return Step.objects.create(run=run, index=index, kind=kind, data=data, latency_ms=latency_ms)


def model_step(run, *, thought=None, tool_calls=(), final_answer=None, usage=None, latency_ms=12):
    return add_step(
        run,
        "model",
        latency_ms=latency_ms,
        thought=thought,
        text=final_answer or "",
        tool_calls=[dict(c) for c in tool_calls],
        final_answer=final_answer,
        usage=usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    )


def tool_step(run, *, name="calculator", arguments=None, output="", is_error=False, call_id="c1", latency_ms=3):
    return add_step(
        run,
        "tool",
        latency_ms=latency_ms,
        call_id=call_id,
        name=name,
        arguments=arguments or {},
        output=output,
        is_error=is_error,
    )


def start_and_pause(owner, goal: str = "search django", mode: str = "step"):
    """A real demo run driven until it pauses before the sensitive `search` call."""
    from agents.runs import drive, submit

    run = submit.start_run(owner=owner, options=submit.RunOptions(input=goal, mode=mode))
    run = drive.execute(run_id=run.pk)
    assert run.status == "awaiting_approval", run.status
    return run


THREE_CALLS = [
    ("c1", "search", {"query": "django"}),
    ("c2", "calculator", {"expression": "2+2"}),
    ("c3", "search", {"query": "flask"}),
]


def pause_three(owner, llm, mode: str = "step", calls=THREE_CALLS):
    """A real openai-provider run (answered by the local stub) whose first reply asks for three calls that all wait
    for a decision (calculator made sensitive for this run); the model's next reply is "done"."""
    from agents.runs import drive, submit
    from tests.providers import stub_llm

    llm.add("POST", stub_llm.OPENAI_PATH, json=stub_llm.openai_tool_calls(calls))
    llm.add("POST", stub_llm.OPENAI_PATH, json=stub_llm.openai_text("done"))
    options = submit.RunOptions(input="look both up", mode=mode, provider="openai", sensitive_tools=("calculator",))
    run = submit.start_run(owner=owner, options=options)
    run = drive.execute(run_id=run.pk)
    assert run.status == "awaiting_approval", run.status
    return run


@pytest.fixture
def superuser(db):
    return make_user("root", staff=True, superuser=True)


@pytest.fixture
def staff_viewer(db):
    """Staff who may look at runs (view_run) but not decide approvals (no agents.review_run)."""
    return grant(make_user("vera", staff=True), "view_run", "view_pendingapproval", "view_fact")


@pytest.fixture
def ddg(stub, settings):
    """The search tool's DuckDuckGo branch answered by the local stub."""
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"
    stub.add("GET", "/", json=DDG_ANSWER, repeat=True)
    return stub


@pytest.fixture
def llm(ddg, settings):
    """The openai provider answered by the same local stub as DuckDuckGo (no network, no real key)."""
    from tests.providers import stub_llm

    settings.OPENAI_API_KEY = stub_llm.fake_key()
    settings.OPENAI_BASE_URL = ddg.url + "/v1"
    return ddg


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """Users are made per test: a cheap hasher keeps the suite fast (the hasher is not under test here)."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


STEP_USAGE = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}


def reply_step(run, **data):
    """Append a model step: an empty reply unless `data` says otherwise."""
    fields = {"thought": None, "text": "", "tool_calls": [], "final_answer": None, "usage": STEP_USAGE}
    return add_step(run, "model", **(fields | data))


def step_html(html: str, index: int) -> str:
    """The trace item of step `index` on a run page."""
    match = re.search(rf'<li class="step[^"]*" id="step-{index}">(.*?)</li>', html, re.S)
    assert match, f"step {index} not rendered"
    return match.group(1)


def page_html(user, run) -> str:
    """The run's console page, as `user` sees it (200)."""
    response = logged_in(user).get(run_page(run))
    assert response.status_code == 200
    return response.content.decode()
