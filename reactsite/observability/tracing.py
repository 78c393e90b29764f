"""OpenTelemetry traces: a span for each run driven here, each unit, each model call, each tool call, each request.

Switched on by an OTLP endpoint in the environment (`AGENT_OTEL_TRACES`, reactsite/settings/); off, nothing here is
imported. `install()` builds the tracer provider (OTLP over HTTP/protobuf, a batch processor; the SDK reads the rest
of its OTEL_* variables itself) and returns the observer that agents/apps.py registers with the runs' hook points
(agents/runs/telemetry.py): this module knows runs only by the attributes it reads of them, and imports nothing of
the layers above it.

Spans (docs/observability.md): `invoke_agent {agent}` while this process drives a run, `unit` for each unit, `chat
{model}` for each model call and `execute_tool {name}` for each tool call (OpenTelemetry's GenAI conventions),
`summarize_history` around a run's summary of its thread's earlier turns, a SERVER span per request
(`TracingMiddleware`), and `create_run` as the root of a run created outside any trace. No prompt, reply, argument or
tool output is recorded unless `AGENT_OTEL_CAPTURE_CONTENT` asks for it; exception messages neither (they can quote a
tool's arguments).

A run keeps the trace of where it was created: a new run stores `carrier()` (W3C traceparent/tracestate) in
`Run.trace_context`, and a process that takes it up later (a worker) continues that trace when it has none of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from django.conf import settings
from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import OTELResourceDetector, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

SCOPE = "reactsite"
# gen_ai.provider.name: the conventions' names where they have one; others (demo, huggingface, openrouter) as ours.
PROVIDER_NAMES = {"openai": "openai", "anthropic": "anthropic", "xai": "x_ai"}
# gen_ai.response.finish_reasons / output messages' finish_reason, from a reply's `finish` (agents.engine.Finish).
FINISH_REASONS = {
    "output_truncated": "length",
    "content_filtered": "content_filter",
    "refused": "refusal",
    "pause_turn": "pause_turn",
}

_active: Tracing | None = None


def install(provider: TracerProvider | None = None, *, capture_content: bool | None = None) -> Tracing:
    """The observer of this process's runs, ready to register (`telemetry.add_observer`). Without `provider`: one
    exporting over OTLP/HTTP as the OTEL_* variables say, also registered as OpenTelemetry's global provider (so the
    SDKs' own spans, Anthropic's and MCP's, join the same traces); built once per process, after any fork (gunicorn
    loads the app in each worker). A given `provider` (tests, an embedding program) is used as it is."""
    global _active
    if provider is None and _active is not None and _active.owned:
        return _active
    owned = provider is None
    if provider is None:
        provider = exporting()
        trace.set_tracer_provider(provider)
    if capture_content is None:
        capture_content = settings.AGENT_OTEL_CAPTURE_CONTENT
    observer = Tracing(provider, capture_content=capture_content, owned=owned)
    observer.replaced, _active = _active, observer
    return observer


def exporting(exporter: SpanExporter | None = None) -> TracerProvider:
    """The provider install() builds: the sampler as OTEL_TRACES_SAMPLER says (the SDK's default), spans batched and
    sent by `exporter` (default OTLP/HTTP, its endpoint and headers from OTEL_EXPORTER_*). Also the bench's (bench/
    tracing.py), so that it measures what a process runs."""
    provider = TracerProvider(resource=_resource())
    provider.add_span_processor(BatchSpanProcessor(exporter or OTLPSpanExporter()))
    return provider


def uninstall(observer: Tracing) -> None:
    """The requests stop being traced by `observer`, and again by the one it replaced if any (tests; the runs' hooks:
    `telemetry.remove_observer`)."""
    global _active
    if _active is observer:
        _active = observer.replaced


def active() -> Tracing | None:
    return _active


def flush(timeout_ms: int = 5000) -> None:
    """Export the spans still waiting in the batch now (a worker process about to exit)."""
    if _active is not None:
        _active.provider.force_flush(timeout_ms)


def _resource() -> Resource:
    """service.name "reactsite" and our version, unless OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES say otherwise."""
    ours = Resource.create({"service.name": "reactsite", "service.version": settings.VERSION})
    merged = ours.merge(OTELResourceDetector().detect())
    return _Resource(merged.attributes, merged.schema_url)


class _Resource(Resource):
    """A Resource hashed once. The OTLP encoder groups every span it sends by its resource, and Resource's own hash
    is a JSON dump of its attributes each time (~4 µs a span, an eighth of encoding one); its attributes are read-only
    (a BoundedAttributes made immutable), so the hash cannot change."""

    def __init__(self, attributes: Any, schema_url: str | None = None) -> None:
        super().__init__(attributes, schema_url)
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


class Tracing:
    """The observer (agents/runs/telemetry.py's hook points) that makes the spans of runs."""

    def __init__(self, provider: TracerProvider, *, capture_content: bool = False, owned: bool = False) -> None:
        self.provider, self.capture_content, self.owned = provider, capture_content, owned
        self.replaced: Tracing | None = None  # the observer install() put this one in place of
        self.tracer = provider.get_tracer(SCOPE, settings.VERSION)
        # The context of each run's open unit, by run id: a tool that runs in a thread of its own
        # (agents/engine/dispatch.py) starts with an empty context, and its span still belongs to the unit.
        self._units: dict[Any, Context] = {}

    # The runs' hook points (each returns its context manager: a _Scope, no generator on this hot path).

    def driving(self, run: Any) -> _Scope:
        current = trace.get_current_span().get_span_context()
        parent: Context | None = None
        links: tuple[Link, ...] = ()
        stored = _stored(run)
        if not current.is_valid:
            parent = stored  # a worker: the trace of the request that created the run
        elif stored is not None:
            created = trace.get_current_span(stored).get_span_context()
            if created.is_valid and created.trace_id != current.trace_id:
                links = (Link(created),)  # driven by another request (a decision, a step): linked to its start
        agent = run.agent
        name = f"invoke_agent {agent}" if agent else "invoke_agent"
        span = self.tracer.start_span(name, parent, SpanKind.INTERNAL, links=links)
        if span.is_recording():
            span.set_attributes(_agent_attributes(run))
        return _Scope(self, span, parent)

    def unit(self, run: Any) -> _Scope:
        parent = None if trace.get_current_span().get_span_context().is_valid else _stored(run)
        span = self.tracer.start_span("unit", parent, SpanKind.INTERNAL)
        if span.is_recording():
            span.set_attribute("reactsite.run.id", str(run.pk))
        return _Scope(self, span, parent, unit_of=run.pk)

    def summary(self, run: Any) -> _Scope:
        """The run condensing its thread's earlier turns (history `summarize`): its `chat` span is this one's child."""
        parent = None if trace.get_current_span().get_span_context().is_valid else _stored(run)
        span = self.tracer.start_span("summarize_history", parent, SpanKind.INTERNAL)
        if span.is_recording():
            span.set_attribute("reactsite.run.id", str(run.pk))
            if run.thread_id is not None:
                span.set_attribute("gen_ai.conversation.id", str(run.thread_id))
        return _Scope(self, span, parent)

    def model_call(self, run: Any, request: Any, record: Any) -> _Scope:
        model = run.model if run is not None else "model"
        parent = self._parent_of_call(run)
        span = self.tracer.start_span(f"chat {model}", parent, SpanKind.CLIENT)
        if span.is_recording():
            span.set_attributes(_request_attributes(run, model, request))
            if self.capture_content:
                _set_input(span, request.messages)
        return _Scope(self, span, parent, done=self._replied, record=record)

    def _replied(self, span: Span, record: Any) -> None:
        reply = record.reply
        if reply is None or not span.is_recording():
            return
        finish = _finish_reason(reply)
        span.set_attributes(
            {
                "gen_ai.usage.input_tokens": reply.usage.prompt_tokens,
                "gen_ai.usage.output_tokens": reply.usage.completion_tokens,
                "gen_ai.response.finish_reasons": (finish,),
            }
        )
        if self.capture_content:
            _set_output(span, reply, finish)

    def tool_call(self, run: Any, name: str, call_id: str | None, record: Any) -> _Scope:
        parent = self._parent_of_call(run)
        span = self.tracer.start_span(f"execute_tool {name}", parent, SpanKind.INTERNAL)
        if span.is_recording():
            attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
            if call_id:
                attributes["gen_ai.tool.call.id"] = call_id
            span.set_attributes(attributes)
        return _Scope(self, span, parent, done=self._returned, record=record)

    def _returned(self, span: Span, record: Any) -> None:
        if not span.is_recording():
            return
        if record.is_error:
            span.set_status(Status(StatusCode.ERROR))
            span.set_attribute("error.type", "tool_error")
        if self.capture_content and record.output is not None:
            span.set_attribute("gen_ai.tool.call.result", record.output)

    def carrier(self) -> dict[str, str]:
        """The current trace, for a new run to store. A run created outside any (the CLI, a schedule) starts its
        own with a root span of its creation, so that every process that drives it later joins that one trace."""
        found: dict[str, str] = {}
        if trace.get_current_span().get_span_context().is_valid:
            propagate.inject(found)  # the global propagator: W3C trace context and baggage, or OTEL_PROPAGATORS
            return found
        span = self.tracer.start_span("create_run", kind=SpanKind.INTERNAL)
        span.end()
        propagate.inject(found, trace.set_span_in_context(span))
        return found

    # Requests (TracingMiddleware).

    def serve(self, request: Any, get_response: Callable[[Any], Any]) -> Any:
        """A SERVER span around the request, continuing the trace of its `traceparent` header when it has one."""
        parent = propagate.extract(request.headers)
        span = self.tracer.start_span(request.method, parent, SpanKind.SERVER)
        if span.is_recording():
            span.set_attributes(
                {"http.request.method": request.method, "url.scheme": request.scheme, "url.path": request.path}
            )
        token = otel_context.attach(trace.set_span_in_context(span, parent))
        try:
            response = get_response(request)
        except BaseException as exc:
            _failed(span, exc, self.capture_content)
            span.end()
            raise
        finally:
            otel_context.detach(token)
        if span.is_recording():
            status = response.status_code
            done: dict[str, Any] = {"http.response.status_code": status}
            route = getattr(getattr(request, "resolver_match", None), "route", None)
            if route:
                done["http.route"] = template = route_template(route)
                span.update_name(f"{request.method} {template}")
            request_id = getattr(request, "id", None)
            if request_id:
                done["reactsite.request.id"] = str(request_id)  # its log lines' request_id
            if status >= 500:
                done["error.type"] = str(status)
                span.set_status(Status(StatusCode.ERROR))
            span.set_attributes(done)
        span.end()
        return response

    # Helpers.

    def _parent_of_call(self, run: Any) -> Context | None:
        """A call's parent: the current span, or (in a tool's own thread, which starts with an empty context) its
        run's open unit."""
        if run is None or trace.get_current_span().get_span_context().is_valid:
            return None
        return self._units.get(run.pk)


class _Scope:
    """A span that is the current one while its block runs and ends with it; an exception going through is recorded
    (never swallowed), else `done(span, record)` adds what the call returned."""

    __slots__ = ("observer", "span", "parent", "unit_of", "done", "record", "token")

    def __init__(
        self,
        observer: Tracing,
        span: Span,
        parent: Context | None,
        unit_of: Any = None,
        done: Callable[[Span, Any], None] | None = None,
        record: Any = None,
    ) -> None:
        self.observer, self.span, self.parent, self.unit_of = observer, span, parent, unit_of
        self.done, self.record = done, record

    def __enter__(self) -> None:
        entered = trace.set_span_in_context(self.span, self.parent)
        self.token = otel_context.attach(entered)
        if self.unit_of is not None:
            self.observer._units[self.unit_of] = entered

    def __exit__(self, kind: Any, exc: BaseException | None, traceback: Any) -> None:
        try:
            if exc is not None:
                _failed(self.span, exc, self.observer.capture_content)
            elif self.done is not None:
                self.done(self.span, self.record)
        finally:
            if self.unit_of is not None:
                self.observer._units.pop(self.unit_of, None)
            otel_context.detach(self.token)
            self.span.end()


class TracingMiddleware:
    """A SERVER span per request (MIDDLEWARE's first, with tracing on: reactsite/settings/), named `{METHOD} /{route}`
    with the HTTP conventions' attributes; an incoming `traceparent` header is continued. Runs created or driven inside
    the request belong to its trace."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        observer = _active
        if observer is None:
            return self.get_response(request)
        return observer.serve(request, self.get_response)


@lru_cache(maxsize=512)
def route_template(route: str) -> str:
    """A URL pattern as the HTTP conventions' `http.route`: `api/v1/runs/(?P<pk>[^/]+)/?$` is
    `/api/v1/runs/{pk}`, `api/v1/runs/<uuid:pk>` too."""
    template = _NAMED_GROUP.sub(r"{\1}", route.replace("^", ""))
    template = _CONVERTER.sub(r"{\1}", template).removesuffix("$").removesuffix("/?").replace("\\", "")
    return "/" + template


_NAMED_GROUP = re.compile(r"\(\?P<(\w+)>[^)]*\)")
_CONVERTER = re.compile(r"<(?:\w+:)?(\w+)>")


def _stored(run: Any) -> Context | None:
    """The trace context the run was created in (Run.trace_context), or None."""
    carrier = getattr(run, "trace_context", None)
    return propagate.extract(carrier) if carrier else None


def _agent_attributes(run: Any) -> dict[str, Any]:
    """What an `invoke_agent` span says of its run: ids and settings, never its input, output or owner's details."""
    agent = run.agent
    attributes: dict[str, Any] = {
        "reactsite.run.id": str(run.pk),
        "reactsite.run.mode": run.mode,
        "reactsite.run.owner_id": run.owner_id,
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": PROVIDER_NAMES.get(run.provider, run.provider),
        "gen_ai.request.model": run.model,
    }
    if agent:
        attributes["reactsite.run.agent"] = attributes["gen_ai.agent.name"] = agent
    if run.parent_id is not None:
        attributes["reactsite.run.parent_id"] = str(run.parent_id)
    if run.thread_id is not None:
        attributes["gen_ai.conversation.id"] = str(run.thread_id)
    return attributes


def _request_attributes(run: Any, model: str, request: Any) -> dict[str, Any]:
    """What a `chat` span says of its request (no message of it: content capture adds those)."""
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": PROVIDER_NAMES.get(run.provider, run.provider) if run is not None else "unknown",
        "gen_ai.request.model": model,
    }
    if request.temperature is not None:
        attributes["gen_ai.request.temperature"] = request.temperature
    if request.max_output_tokens is not None:
        attributes["gen_ai.request.max_tokens"] = request.max_output_tokens
    if request.on_text is not None:
        attributes["gen_ai.request.stream"] = True
    return attributes


def _failed(span: Span, exc: BaseException, capture_content: bool) -> None:
    """The error's type (`error.type`, the span's status); its message and stack only with content capture."""
    kind = type(exc)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    span.set_attribute("error.type", name)
    span.set_status(Status(StatusCode.ERROR, name))
    if capture_content:
        span.record_exception(exc)


def _finish_reason(reply: Any) -> str:
    if reply.finish is not None:
        return FINISH_REASONS.get(str(reply.finish), str(reply.finish))
    return "tool_call" if reply.tool_calls else "stop"


# Content capture (AGENT_OTEL_CAPTURE_CONTENT): the GenAI conventions' message formats, as JSON strings on the span.


def _set_input(span: Span, messages: list[dict[str, Any]]) -> None:
    system = [m for m in messages if m.get("role") == "system"]
    if system:
        span.set_attribute("gen_ai.system_instructions", _json([p for m in system for p in _parts(m.get("content"))]))
    chat = [_message(m) for m in messages if m.get("role") != "system"]
    span.set_attribute("gen_ai.input.messages", _json(chat))


def _set_output(span: Span, reply: Any, finish: str) -> None:
    parts = _parts(reply.text) if reply.text else []
    parts += [{"type": "tool_call", "id": c.id, "name": c.name, "arguments": c.arguments} for c in reply.tool_calls]
    message = {"role": "assistant", "parts": parts, "finish_reason": finish}
    span.set_attribute("gen_ai.output.messages", _json([message]))


def _message(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role", "user")
    if role == "tool":
        response = {"type": "tool_call_response", "id": message.get("tool_call_id"), "response": message.get("content")}
        return {"role": "tool", "parts": [response]}
    parts = _parts(message.get("content"))
    for call in message.get("tool_calls") or ():
        parts.append(
            {"type": "tool_call", "id": call.get("id"), "name": call.get("name"), "arguments": call.get("arguments")}
        )
    return {"role": role, "parts": parts}


def _parts(content: Any) -> list[dict[str, Any]]:
    """A content (a string, or the engine's parts: agents/engine/parts.py) as the conventions' parts. An image given
    as data is named, not copied (megabytes of base64)."""
    if content is None or content == "":
        return []
    if isinstance(content, str):
        return [{"type": "text", "content": content}]
    parts: list[dict[str, Any]] = []
    for part in content if isinstance(content, list) else [content]:
        if not isinstance(part, dict):
            parts.append({"type": "text", "content": str(part)})
        elif part.get("type") == "text":
            parts.append({"type": "text", "content": part.get("text", "")})
        elif part.get("url"):
            parts.append({"type": "uri", "modality": "image", "uri": part["url"]})
        else:
            parts.append({"type": "image", "mime_type": part.get("media_type"), "content": "(omitted)"})
    return parts


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)
