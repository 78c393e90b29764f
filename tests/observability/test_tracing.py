"""OpenTelemetry traces (reactsite/observability/tracing.py, docs/observability.md): the spans of a run, what they
say and never say, a background run continuing the trace of the request that created it, and the real exporter
sending to an OTLP/HTTP receiver."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from agents.models import Run
from agents.runs import telemetry
from reactsite.observability import tracing
from tests.conftest import client_for
from tests.integration._support import app_env, manage, quick_user, run_py

RUNS = "/api/v1/runs"
QUESTION = "What is 12*7, plus 1?"
EXPRESSION = "12*7"  # the calculator's first argument: the user's text as the model passed it on
MIDDLEWARE = "reactsite.observability.tracing.TracingMiddleware"
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


class Traced:
    """Spans recorded in memory by an observer registered for one test."""

    def __init__(self, capture_content: bool = False) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider(shutdown_on_exit=False)
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.observer = tracing.install(self.provider, capture_content=capture_content)
        telemetry.add_observer(self.observer)

    def close(self) -> None:
        telemetry.remove_observer(self.observer)
        tracing.uninstall(self.observer)
        self.provider.shutdown()

    def spans(self) -> list[ReadableSpan]:
        return list(self.exporter.get_finished_spans())

    def named(self, prefix: str) -> list[ReadableSpan]:
        return [s for s in self.spans() if s.name.startswith(prefix)]


@pytest.fixture
def traced() -> Iterator[Traced]:
    spans = Traced()
    yield spans
    spans.close()


@pytest.fixture
def traced_with_content() -> Iterator[Traced]:
    spans = Traced(capture_content=True)
    yield spans
    spans.close()


def texts(span: ReadableSpan) -> list[str]:
    """Every string a span carries: its name, attributes, status and events' attributes."""
    found = [span.name, span.status.description or ""]
    for attributes in [span.attributes or {}, *[e.attributes or {} for e in span.events]]:
        for value in attributes.values():
            found += [str(v) for v in value] if isinstance(value, tuple) else [str(value)]
    return found


def sync_run(client, **fields) -> dict:
    response = client.post(RUNS, {"input": QUESTION, "tools": ["calculator"], **fields}, format="json")
    assert response.status_code in (200, 201), response.content
    return response.json()


def test_a_sync_run_has_a_span_per_unit_model_call_and_tool_call(api, traced):
    body = sync_run(api)
    run = Run.objects.get(pk=body["id"])
    assert (run.status, run.output) == ("done", "85")
    steps = list(run.steps.order_by("index"))
    model_steps, tool_steps = [s for s in steps if s.kind == "model"], [s for s in steps if s.kind == "tool"]

    (agent,) = traced.named("invoke_agent")
    units, chats, tools = traced.named("unit"), traced.named("chat "), traced.named("execute_tool ")
    assert len(units) == len(model_steps) == len(chats) == 3
    assert len(tools) == len(tool_steps) == 2
    assert {s.context.trace_id for s in traced.spans()} == {agent.context.trace_id}
    assert agent.attributes["reactsite.run.id"] == str(run.pk)
    assert agent.attributes["reactsite.run.mode"] == "sync"
    assert agent.attributes["reactsite.run.owner_id"] == run.owner_id
    assert agent.attributes["gen_ai.operation.name"] == "invoke_agent"
    unit_ids = {u.context.span_id for u in units}
    assert all(u.parent.span_id == agent.context.span_id for u in units)
    assert all(s.parent.span_id in unit_ids for s in chats + tools)

    for chat in chats:
        assert chat.name == f"chat {run.model}"
        assert chat.kind == SpanKind.CLIENT
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.provider.name"] == "demo"
        assert chat.attributes["gen_ai.request.model"] == run.model
        assert chat.attributes["gen_ai.usage.input_tokens"] > 0
        assert chat.attributes["gen_ai.usage.output_tokens"] > 0
        assert "gen_ai.request.temperature" not in chat.attributes  # not set on the run
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats) == run.prompt_tokens
    assert sum(c.attributes["gen_ai.usage.output_tokens"] for c in chats) == run.completion_tokens
    assert [c.attributes["gen_ai.response.finish_reasons"] for c in chats] == [
        ("tool_call",),
        ("tool_call",),
        ("stop",),
    ]

    for tool, step in zip(sorted(tools, key=lambda s: s.start_time), tool_steps, strict=True):
        assert tool.name == "execute_tool calculator"
        assert tool.attributes["gen_ai.operation.name"] == "execute_tool"
        assert tool.attributes["gen_ai.tool.name"] == "calculator"
        assert tool.attributes["gen_ai.tool.call.id"] == step.data["call_id"]
        assert tool.status.status_code != StatusCode.ERROR

    # No text of the user's, the model's or a tool's, by default.
    for span in traced.spans():
        for text in texts(span):
            assert QUESTION not in text and EXPRESSION not in text and "84" != text, (span.name, text)
        assert not any(k.startswith(("gen_ai.input", "gen_ai.output", "gen_ai.system")) for k in span.attributes)
        assert "gen_ai.tool.call.result" not in span.attributes


def test_content_is_on_the_spans_only_when_asked_for(api, traced_with_content):
    sync_run(api, temperature=0.2, max_output_tokens=300)
    chats = sorted(traced_with_content.named("chat "), key=lambda s: s.start_time)
    first = chats[0]
    assert first.attributes["gen_ai.request.temperature"] == 0.2
    assert first.attributes["gen_ai.request.max_tokens"] == 300
    messages = json.loads(first.attributes["gen_ai.input.messages"])
    assert messages[-1] == {"role": "user", "parts": [{"type": "text", "content": QUESTION}]}
    assert json.loads(first.attributes["gen_ai.system_instructions"])[0]["type"] == "text"
    (reply,) = json.loads(first.attributes["gen_ai.output.messages"])
    assert reply["role"] == "assistant" and reply["finish_reason"] == "tool_call"
    assert [p["name"] for p in reply["parts"] if p["type"] == "tool_call"] == ["calculator"]
    later = json.loads(chats[1].attributes["gen_ai.input.messages"])
    assert [p["type"] for m in later for p in m["parts"]][-1] == "tool_call_response"
    results = [t.attributes["gen_ai.tool.call.result"] for t in traced_with_content.named("execute_tool ")]
    assert "84" in results


def test_a_failed_model_call_has_its_error_type_and_no_message(api, traced, monkeypatch):
    from agents.engine import ModelError
    from agents.providers.demo import DemoProvider

    def fail(self, request):
        raise ModelError(f"the provider refused: {QUESTION}")

    monkeypatch.setattr(DemoProvider, "complete", fail)
    body = sync_run(api)
    assert body["stop_reason"] == "model_error"
    (chat,) = traced.named("chat ")
    assert chat.status.status_code == StatusCode.ERROR
    assert chat.attributes["error.type"] == "agents.engine.types.ModelError"
    assert all(QUESTION not in text for span in traced.spans() for text in texts(span))


def test_a_tool_in_a_thread_of_its_own_belongs_to_its_unit(api, reviewer, traced, stub, settings):
    """The search tool runs in a thread of its own (agents/engine/dispatch.py), which starts with no context; it is
    sensitive, so it runs in the unit of the reviewer's decision."""
    settings.TAVILY_API_KEY, settings.DUCKDUCKGO_URL = "", stub.url + "/"
    stub.add("GET", "/", json={"Heading": "Python", "AbstractText": "A programming language."}, repeat=True)
    paused = sync_run(api, input="search django", tools=["search"])
    assert paused["status"] == "awaiting_approval", paused
    decided = client_for(reviewer).post(f"{RUNS}/{paused['id']}/advance", {"approval": True}, format="json")
    assert decided.json()["status"] == "done", decided.json()
    (tool,) = traced.named("execute_tool search")
    units = {u.context.span_id: u for u in traced.named("unit")}
    assert tool.parent is not None and tool.parent.span_id in units
    assert tool.context.trace_id == units[tool.parent.span_id].context.trace_id


def test_the_observer_parents_a_threaded_call_on_the_open_unit():
    spans = Traced()
    try:
        run = SimpleNamespace(pk="r1", mode="sync", owner_id=7, agent=None, parent_id=None, trace_context={})
        seen: list[int] = []

        def tool() -> None:
            with spans.observer.tool_call(run, "slow", "call-1", telemetry.CallRecord()):
                seen.append(1)

        with spans.observer.unit(run):
            worker = threading.Thread(target=tool)
            worker.start()
            worker.join()
        (unit,), (call,) = spans.named("unit"), spans.named("execute_tool")
        assert seen == [1]
        assert call.parent.span_id == unit.context.span_id
        assert not spans.observer._units  # the unit's context is let go with it
    finally:
        spans.close()


WORKER = pytest.mark.django_db(transaction=True)


def traced_requests():
    """The middleware in place, as the settings put it with tracing on."""
    return override_settings(MIDDLEWARE=[MIDDLEWARE, *settings.MIDDLEWARE])


@WORKER
def test_a_background_run_continues_the_trace_of_the_request_that_created_it(alice, traced):
    with traced_requests():
        client = client_for(alice)
        header = f"00-{TRACE_ID}-{PARENT_ID}-01"
        response = client.post(
            RUNS,
            {"input": QUESTION, "tools": ["calculator"], "mode": "background"},
            format="json",
            HTTP_TRACEPARENT=header,
        )
    assert response.status_code == 202
    run = Run.objects.get(pk=response.json()["id"])
    assert run.trace_context["traceparent"].split("-")[1] == TRACE_ID

    (request,) = [s for s in traced.spans() if s.kind == SpanKind.SERVER]
    assert request.name == "POST /api/v1/runs"
    assert request.attributes["http.route"] == "/api/v1/runs"
    assert request.attributes["http.response.status_code"] == 202
    assert format(request.context.trace_id, "032x") == TRACE_ID
    assert format(request.parent.span_id, "016x") == PARENT_ID and request.parent.is_remote
    assert request.attributes["reactsite.request.id"]  # its log lines' request id
    assert traced.named("invoke_agent") == []  # nothing driven yet: the worker does it

    call_command("db_worker", "--batch", "--no-reload", "--no-startup-delay", verbosity=0)
    run.refresh_from_db()
    assert run.status == "done"
    (agent,) = traced.named("invoke_agent")
    assert agent.parent.span_id == request.context.span_id
    assert agent.attributes["reactsite.run.mode"] == "background"
    run_spans = [s for s in traced.spans() if s is not request]
    assert len(run_spans) == 1 + 3 + 3 + 2  # the run, its units, model calls and tool calls
    assert {format(s.context.trace_id, "032x") for s in run_spans} == {TRACE_ID}


@WORKER
def test_a_request_without_a_traceparent_starts_a_trace_and_the_sync_run_is_inside_it(alice, traced):
    with traced_requests():
        body = sync_run(client_for(alice))
    (request,) = [s for s in traced.spans() if s.kind == SpanKind.SERVER]
    assert request.parent is None
    (agent,) = traced.named("invoke_agent")
    assert agent.parent.span_id == request.context.span_id
    assert Run.objects.get(pk=body["id"]).trace_context["traceparent"].split("-")[1] == format(
        request.context.trace_id, "032x"
    )


def test_tracing_is_off_without_an_endpoint_and_nothing_of_it_is_loaded():
    assert settings.AGENT_OTEL_TRACES is False  # the suite runs with no OTEL_* endpoint
    assert MIDDLEWARE not in settings.MIDDLEWARE
    code = (
        "import sys\nfrom django.conf import settings\nfrom agents.runs import telemetry\n"
        "import reactsite.wsgi\n"
        "loaded = [m in sys.modules for m in ('opentelemetry.sdk', 'reactsite.observability.tracing')]\n"
        "print(telemetry.active(), *loaded, settings.MIDDLEWARE[0])"
    )
    off = run_py(code, env=_env())
    assert off.returncode == 0, off.stderr[-2000:]
    assert off.stdout.split() == ["False", "False", "False", "log_request_id.middleware.RequestIDMiddleware"]
    on = run_py(code, env=_env(OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9"))
    assert on.returncode == 0, on.stderr[-2000:]
    assert on.stdout.split() == ["True", "True", "True", MIDDLEWARE]


class Receiver(ThreadingHTTPServer):
    """An OTLP/HTTP receiver on loopback: keeps each POST /v1/traces body."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.paths: list[str] = []
        super().__init__(("127.0.0.1", 0), _Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}"

    def spans(self) -> list:
        found = []
        for body in self.bodies:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            for resource in request.resource_spans:
                service = {a.key: a.value.string_value for a in resource.resource.attributes}["service.name"]
                found += [(service, s) for scope in resource.scope_spans for s in scope.spans]
        return found


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        if self.path == "/v1/traces":
            self.server.bodies.append(body)  # type: ignore[attr-defined]
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format, *args) -> None:  # noqa: A002 - silence
        pass


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _env(**extra: str) -> dict[str, str]:
    """A subprocess's environment on the test database, with no OTEL_* of the caller's."""
    env = {k: v for k, v in app_env(**extra).items() if not k.startswith("OTEL_") or k in extra}
    return env


@WORKER
def test_the_cli_exports_its_run_to_an_otlp_http_receiver(receiver):
    quick_user("admin", is_staff=True, is_superuser=True)
    done = manage(
        "agent", "What is 2+3?", env=_env(OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url, OTEL_SERVICE_NAME="reactsite-cli")
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Final Answer: 5" in done.stdout
    spans = receiver.spans()  # sent at exit: the batch is flushed when the process ends
    assert set(receiver.paths) == {"/v1/traces"}
    names = sorted(s.name for _, s in spans)
    model = Run.objects.get().model
    assert names.count("create_run") == 1  # the CLI's run starts a trace of its own; each of its steps joins it
    assert {"invoke_agent", "unit", f"chat {model}", "execute_tool calculator"} <= set(names), names
    assert names.count(f"chat {model}") == 2 and names.count("execute_tool calculator") == 1, names
    assert {service for service, _ in spans} == {"reactsite-cli"}
    assert len({s.trace_id for _, s in spans}) == 1
    chat = next(s for _, s in spans if s.name.startswith("chat "))
    attributes = {a.key: a.value for a in chat.attributes}
    assert attributes["gen_ai.provider.name"].string_value == "demo"
    assert attributes["gen_ai.usage.input_tokens"].int_value > 0


class CountingExporter(InMemorySpanExporter):
    """Keeps the spans, and the size of each batch it was handed."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[int] = []

    def export(self, spans):
        self.batches.append(len(spans))
        return super().export(spans)


def test_a_process_sends_its_spans_in_batches(api):
    """install()'s provider (tracing.exporting) queues ended spans and exports them together, off the run's path."""
    exporter = CountingExporter()
    provider = tracing.exporting(exporter)
    observer = tracing.install(provider)
    telemetry.add_observer(observer)
    try:
        sync_run(api)
        sync_run(api)
        provider.force_flush()
    finally:
        telemetry.remove_observer(observer)
        tracing.uninstall(observer)
        provider.shutdown()
    assert sum(exporter.batches) == len(exporter.get_finished_spans()) == 2 * (1 + 1 + 3 + 3 + 2)
    assert len(exporter.batches) <= 2  # one export for both runs' spans (two if the batch's delay fell between)


def test_a_span_not_sampled_gets_no_attributes_built(api, monkeypatch):
    """Attributes (the content's JSON above all) are built only for a span that records."""
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    built: list[str] = []
    for name in ("_agent_attributes", "_request_attributes", "_set_input", "_set_output", "_json"):
        original = getattr(tracing, name)
        monkeypatch.setattr(tracing, name, lambda *a, _n=name, _f=original: built.append(_n) or _f(*a))
    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF, shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    observer = tracing.install(provider, capture_content=True)
    telemetry.add_observer(observer)
    try:
        body = sync_run(api)
    finally:
        telemetry.remove_observer(observer)
        tracing.uninstall(observer)
        provider.shutdown()
    assert body["output"] == "85"
    assert built == [] and exporter.get_finished_spans() == ()


def test_the_resource_is_hashed_once():
    resource = tracing._resource()
    assert resource.attributes["service.name"] == "reactsite"
    assert hash(resource) == hash(tracing.Resource(resource.attributes, resource.schema_url))


class Recorder:
    """An observer that notes what its hooks see, in order."""

    def __init__(self, name: str, seen: list[str], fail_on_enter: bool = False) -> None:
        self.name, self.seen, self.fail_on_enter = name, seen, fail_on_enter

    def unit(self, run):
        return self._scope("unit")

    def tool_call(self, run, name, call_id, record):
        return self._scope("tool")

    @contextmanager
    def _scope(self, what: str):
        self.seen.append(f"{self.name} {what} in")
        if self.fail_on_enter:
            raise RuntimeError("enter")
        try:
            yield
        except BaseException as exc:
            self.seen.append(f"{self.name} {what} saw {type(exc).__name__}")
            raise
        finally:
            self.seen.append(f"{self.name} {what} out")


def test_hooks_enter_in_order_leave_in_reverse_and_let_an_exception_through(monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(telemetry, "_observers", [Recorder("a", seen), Recorder("b", seen)])
    with telemetry.tool_call(None, "t", None) as record:
        record.output = "ok"
    assert seen == ["a tool in", "b tool in", "b tool out", "a tool out"]
    seen.clear()
    with pytest.raises(ValueError), telemetry.unit(None):
        raise ValueError("x")
    assert seen == [
        "a unit in",
        "b unit in",
        "b unit saw ValueError",
        "b unit out",
        "a unit saw ValueError",
        "a unit out",
    ]


def test_a_hook_failing_to_enter_leaves_those_entered_before_it(monkeypatch):
    seen: list[str] = []
    monkeypatch.setattr(telemetry, "_observers", [Recorder("a", seen), Recorder("b", seen, fail_on_enter=True)])
    with pytest.raises(RuntimeError, match="enter"), telemetry.unit(None):
        seen.append("body")
    assert seen == ["a unit in", "b unit in", "a unit saw RuntimeError", "a unit out"]


def test_no_observer_still_hands_out_a_record(monkeypatch):
    monkeypatch.setattr(telemetry, "_observers", [])
    with telemetry.model_call(None, None) as record:
        assert isinstance(record, telemetry.CallRecord)
    with telemetry.driving(None) as nothing:
        assert nothing is None
