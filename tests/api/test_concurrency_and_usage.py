"""Concurrent requests on one run or key, provider usage accounting, and request ids in log lines."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import pytest

from agents.models import Run, Step
from tests.api.conftest import ARITHMETIC, RUNS, create_run, run_url
from tests.conftest import client_for, make_user
from tests.support.threads import in_threads


@pytest.mark.django_db(transaction=True)
def test_concurrent_advances_never_double_a_unit():
    alice = make_user("alice")
    run_id = create_run(client_for(alice), input="What is 1+1, plus 1, plus 1, plus 1", mode="step").json()["id"]
    clients = [client_for(alice) for _ in range(4)]
    results = in_threads(4, lambda i: clients[i].post(run_url(run_id, "advance"), {}, format="json"))
    statuses = [getattr(r, "status_code", r) for r in results]
    assert all(s in (200, 409) for s in statuses), statuses
    assert 200 in statuses
    run = Run.objects.get(pk=run_id)
    indexes = list(Step.objects.filter(run_id=run_id).order_by("index").values_list("index", flat=True))
    assert indexes == list(range(len(indexes)))
    assert Step.objects.filter(run_id=run_id, kind="model").count() == run.turns
    assert run.turns == 1 + statuses.count(200)
    assert run.lease_owner == ""


@pytest.mark.django_db(transaction=True)
def test_concurrent_posts_with_one_idempotency_key_make_one_run():
    alice = make_user("alice")
    clients = [client_for(alice) for _ in range(4)]
    body = {"input": ARITHMETIC}
    results = in_threads(4, lambda i: clients[i].post(RUNS, body, format="json", HTTP_IDEMPOTENCY_KEY="same-key"))
    statuses = [getattr(r, "status_code", r) for r in results]
    assert all(s in (201, 409) for s in statuses), statuses
    assert Run.objects.count() == 1
    ids = {r.json()["id"] for r in results if getattr(r, "status_code", None) == 201}
    assert ids == {str(Run.objects.get().pk)}


@pytest.mark.django_db(transaction=True)
def test_concurrent_decisions_record_one_approval(settings, stub):
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"
    stub.add("GET", "/", json={"AbstractText": "Python is a programming language."}, repeat=True)
    alice = make_user("alice")
    reviewer = make_user("rita", staff=True, reviewer=True)
    run_id = create_run(client_for(alice), input="search python").json()["id"]
    clients = [client_for(reviewer) for _ in range(3)]
    results = in_threads(3, lambda i: clients[i].post(run_url(run_id, "advance"), {"approval": True}, format="json"))
    statuses = [getattr(r, "status_code", r) for r in results]
    assert sorted(statuses) == [200, 409, 409], statuses
    assert Step.objects.filter(run_id=run_id, kind="approval").count() == 1
    assert Step.objects.filter(run_id=run_id, kind="tool").count() == 1
    assert stub.count("GET", "/") == 1


def _completion(content: str, prompt: int, completion: int) -> dict:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def _tool_call_completion(prompt: int, completion: int) -> dict:
    function = {"name": "calculator", "arguments": '{"expression": "6*7"}'}
    call = {"id": "call_1", "type": "function", "function": function}
    message = {"role": "assistant", "content": None, "tool_calls": [call]}
    return {
        "id": "chatcmpl-0",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4.1-mini",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


@pytest.mark.django_db
def test_usage_is_the_sum_over_model_calls(api, settings, stub):
    settings.OPENAI_API_KEY = "sk-test"
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    stub.add("POST", "/v1/chat/completions", json=_tool_call_completion(11, 3))
    stub.add("POST", "/v1/chat/completions", json=_completion("It is 42.", 20, 5))
    response = create_run(api, input="What is 6*7?", provider="openai")
    assert response.status_code == 201
    body = response.json()
    assert (body["status"], body["output"], body["turns"], body["model"]) == ("done", "It is 42.", 2, "gpt-4.1-mini")
    assert body["usage"] == {"prompt_tokens": 31, "completion_tokens": 8, "total_tokens": 39}
    steps = api.get(run_url(body["id"])).json()["steps"]
    assert [s["kind"] for s in steps] == ["model", "tool", "model"]
    assert steps[0]["usage"]["prompt_tokens"] == 11
    assert steps[0]["tool_calls"] == [{"id": "call_1", "name": "calculator", "arguments": {"expression": "6*7"}}]
    assert steps[1]["output"] == "42"
    assert steps[2]["usage"]["completion_tokens"] == 5
    # the tool result goes back in the tool slot, wrapped
    second = stub.requests[1].json()
    wrapped = "<<<TOOL_OUTPUT_START>>>\n42\n<<<TOOL_OUTPUT_END>>>"
    tool_messages = [m for m in second["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [("call_1", wrapped)]
    system = [m.get("content") or "" for m in second["messages"] if m["role"] == "system"]
    assert all(wrapped not in text for text in system)


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        from log_request_id.filters import RequestIDFilter

        self.addFilter(RequestIDFilter())
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@contextlib.contextmanager
def _collecting() -> Iterator[_Collect]:
    """Every record at INFO and above, through the request-id filter, while the block runs."""
    handler, root = _Collect(), logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


@pytest.mark.django_db
def test_log_lines_carry_the_request_id(api):
    with _collecting() as handler:
        response = api.post(RUNS, {"input": ARITHMETIC}, format="json", HTTP_X_REQUEST_ID="trace-77")
    assert response.status_code == 201
    ours = [r for r in handler.records if r.name.startswith("agents")]
    assert ours, [r.name for r in handler.records]
    assert {r.request_id for r in ours} == {"trace-77"}


@pytest.mark.django_db
def test_each_request_is_one_json_log_line_with_its_request_id(api, settings):
    """One INFO line per request (django-log-request-id's LOG_REQUESTS), JSON through the project's formatter, with
    the request id; a rejected request gets its line too. gunicorn's plain-text access line is off by default."""
    import json

    from django.utils.module_loading import import_string

    with _collecting() as handler:
        created = api.post(RUNS, {"input": ARITHMETIC}, format="json", HTTP_X_REQUEST_ID="trace-78")
        rejected = api.post(RUNS, {"input": ""}, format="json", HTTP_X_REQUEST_ID="trace-79")
    assert (created.status_code, rejected.status_code) == (201, 400)
    lines = [r for r in handler.records if r.name == "log_request_id.middleware"]
    user = Run.objects.get().owner_id
    assert [(r.request_id, r.getMessage()) for r in lines] == [
        ("trace-78", f"method=POST path=/api/v1/runs status=201 user={user}"),
        ("trace-79", f"method=POST path=/api/v1/runs status=400 user={user}"),
    ]
    spec = settings.LOGGING["formatters"]["json"]  # the console handler's formatter
    formatter = import_string(spec["()"])(spec["fmt"])
    line = json.loads(formatter.format(lines[0]))
    assert (line["levelname"], line["request_id"], line["message"]) == (
        "INFO",
        "trace-78",
        f"method=POST path=/api/v1/runs status=201 user={user}",
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("verbosity", [1, 2], ids=["info", "debug"])
def test_each_task_is_one_info_log_line(api, verbosity):
    """As a request is one line, so is a task: django.tasks logs a task's start and its end at INFO; the end (with its
    outcome) stays at INFO and the start is a DEBUG line, there only when DEBUG logging is on."""
    from django.core.management import call_command

    loggers = [logging.getLogger(name) for name in ("django.tasks", "django_tasks_db")]
    levels = [logger.level for logger in loggers]  # the worker sets them from its verbosity (2: DEBUG)
    try:
        run = api.post(RUNS, {"input": ARITHMETIC, "mode": "background"}, format="json").json()
        with _collecting() as handler:
            call_command("db_worker", "--batch", "--no-reload", "--no-startup-delay", verbosity=verbosity)
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)
    assert Run.objects.get(pk=run["id"]).status == "done"
    lines = [(r.levelname, r.getMessage().rsplit("state=", 1)[-1]) for r in handler.records if r.name == "django.tasks"]
    assert lines == ([("DEBUG", "RUNNING")] if verbosity == 2 else []) + [("INFO", "SUCCESSFUL")]


def test_gunicorn_logs_no_access_line_unless_asked(monkeypatch):
    import runpy

    from django.conf import settings

    monkeypatch.delenv("GUNICORN_ACCESSLOG", raising=False)
    assert runpy.run_path(str(settings.BASE_DIR / "gunicorn.conf.py"))["accesslog"] is None
    monkeypatch.setenv("GUNICORN_ACCESSLOG", "-")
    assert runpy.run_path(str(settings.BASE_DIR / "gunicorn.conf.py"))["accesslog"] == "-"
