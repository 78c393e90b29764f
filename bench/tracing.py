"""`manage.py bench --only tracing`: what tracing costs a run, in this process. The same three-turn runs (the demo
model, two calculator calls; `submit.start_run` then `drive.execute`, as the persisted section) with tracing off and
on, in interleaved batches, the order alternating: CPU per run (`time.process_time`, every thread of the process, so
the batch processor's export thread is counted too). On, the spans go as a process sends them
(`tracing.exporting()`: a batch processor, OTLP over HTTP) to a sink on 127.0.0.1 that this section starts: it
accepts each POST /v1/traces and keeps its body, decoded after the timing to count the spans that arrived.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from django.contrib.auth import get_user_model
from django.db import connection
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agents.runs import drive, submit, telemetry
from bench.support import RUN_INPUT, Row
from reactsite.observability import tracing


class _Sink(ThreadingHTTPServer):
    """An OTLP/HTTP receiver: keeps the bodies of POST /v1/traces, answers 200 (decoding waits for the end)."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _SinkHandler)
        self.bodies: list[bytes] = []
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1/traces"

    def __enter__(self) -> _Sink:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()

    def spans(self) -> int:
        count = 0
        for body in self.bodies:
            request = ExportTraceServiceRequest()
            request.ParseFromString(body)
            count += sum(len(scope.spans) for rs in request.resource_spans for scope in rs.scope_spans)
        return count


class _SinkHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # the exporter keeps its connection
    server: _Sink

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path == "/v1/traces":
            self.server.bodies.append(body)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format, *args) -> None:  # noqa: A002 - silence
        return


def _runs(user, count: int) -> float:
    """CPU seconds of `count` runs, start to end."""
    started = time.process_time()
    for _ in range(count):
        run = submit.start_run(owner=user, options=submit.RunOptions(input=RUN_INPUT, tools=["calculator"]))
        drive.execute(run_id=run.pk)
    return time.process_time() - started


def measure(progress: Callable[[str], None], *, runs: int = 100, rounds: int = 6) -> list[Row]:
    """Rows: CPU per run off and on (medians of the rounds), their ratio (the median of each round's own), the spans
    the sink received and the exports that carried them."""
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
    per_run: dict[bool, list[float]] = {False: [], True: []}
    ratios: list[float] = []
    try:
        with _Sink() as sink:
            provider = tracing.exporting(OTLPSpanExporter(endpoint=sink.url))
            observer = tracing.install(provider)
            try:
                _runs(user, 5)  # warm-up: imports, prepared statements, the exporter's connection
                telemetry.add_observer(observer)
                _runs(user, 5)
                provider.force_flush()
                telemetry.remove_observer(observer)
                sink.bodies.clear()
                for round_ in range(rounds):
                    progress(f"  tracing: round {round_ + 1} of {rounds}, {runs} runs off and on …")
                    got: dict[bool, float] = {}
                    for on in (False, True) if round_ % 2 == 0 else (True, False):
                        if on:
                            telemetry.add_observer(observer)
                        try:
                            started = time.process_time()
                            _runs(user, runs)
                            if on:
                                provider.force_flush()  # this batch's export counted in it
                            got[on] = (time.process_time() - started) / runs
                        finally:
                            telemetry.remove_observer(observer)
                        per_run[on].append(got[on])
                    ratios.append(got[True] / got[False])
            finally:
                telemetry.remove_observer(observer)
                tracing.uninstall(observer)
                provider.shutdown()
            exports, spans = len(sink.bodies), sink.spans()
    finally:
        user.delete()
    work = (
        f"{runs} 3-turn runs (demo model, 2 calculator calls) in this process, {rounds} rounds off/on interleaved, "
        f"{connection.vendor}; on: OTLP/HTTP to a local sink"
    )
    off, traced = statistics.median(per_run[False]), statistics.median(per_run[True])
    return [
        Row("tracing: CPU per run, off", off * 1000, "ms", work),
        Row("tracing: CPU per run, on", traced * 1000, "ms", work),
        Row("tracing: on / off", statistics.median(ratios), "×", work + f"; rounds {_spread(ratios)}"),
        Row("tracing: spans per run", spans / (runs * rounds), "spans", "received by the sink"),
        Row("tracing: spans per export", spans / max(exports, 1), "spans", "POST /v1/traces received by the sink"),
    ]


def _spread(values: list[float]) -> str:
    return ", ".join(f"{v:.3f}" for v in values)
