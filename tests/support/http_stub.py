"""A scripted HTTP server on 127.0.0.1 for tests: real sockets, no network beyond loopback.

Usage:
    with StubServer() as stub:
        stub.add("POST", "/v1/chat/completions", json={...})            # answered once, in order
        stub.add("POST", "/v1/chat/completions", status=500, repeat=True)  # answered every time after
        ... point a client at stub.url ...
        stub.requests  # [(method, path, headers, body_bytes), ...]
"""

from __future__ import annotations

import json as jsonlib
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class StubResponse:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    repeat: bool = False
    # A callable gets the recorded request and returns (status, headers, body) — for echoing input.
    handler: Callable[[RecordedRequest], tuple[int, dict[str, str], bytes]] | None = None


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    peer: tuple = ()  # the client's (host, port): one per TCP connection

    def json(self) -> Any:
        return jsonlib.loads(self.body or b"null")


class StubServer:
    """Answers scripted responses per (method, path without query); 404 JSON when nothing is scripted."""

    def __init__(self) -> None:
        self._scripts: dict[tuple[str, str], deque[StubResponse]] = defaultdict(deque)
        self._lock = threading.Lock()
        self.requests: list[RecordedRequest] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._make_handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add(
        self,
        method: str,
        path: str,
        *,
        status: int = 200,
        json: Any = None,
        body: bytes | str | None = None,
        headers: dict[str, str] | None = None,
        delay_s: float = 0.0,
        repeat: bool = False,
        handler: Callable[[RecordedRequest], tuple[int, dict[str, str], bytes]] | None = None,
    ) -> None:
        hdrs = dict(headers or {})
        if json is not None:
            payload = jsonlib.dumps(json).encode()
            hdrs.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            payload = body.encode()
        else:
            payload = body or b""
        with self._lock:
            self._scripts[(method.upper(), path)].append(StubResponse(status, payload, hdrs, delay_s, repeat, handler))

    def count(self, method: str, path: str) -> int:
        return sum(1 for r in self.requests if r.method == method.upper() and r.path.split("?")[0] == path)

    def _next(self, method: str, path: str) -> StubResponse | None:
        with self._lock:
            queue = self._scripts.get((method, path))
            if not queue:
                return None
            resp = queue[0]
            if not resp.repeat:
                queue.popleft()
            return resp

    def _make_handler(self) -> type[BaseHTTPRequestHandler]:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out at once: no 40 ms delayed-ACK stall

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - keep test output quiet
                return

            def handle(self) -> None:
                try:
                    super().handle()
                except (ConnectionResetError, BrokenPipeError):
                    pass  # the client closed with data unread (oversized-body tests)

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                sent = {k.lower(): v for k, v in self.headers.items()}
                rec = RecordedRequest(self.command, self.path, sent, body, tuple(self.client_address))
                with stub._lock:
                    stub.requests.append(rec)
                resp = stub._next(self.command, self.path.split("?")[0])
                if resp is None:
                    status, headers, payload = 404, {"Content-Type": "application/json"}, b'{"error": "not scripted"}'
                elif resp.handler is not None:
                    status, headers, payload = resp.handler(rec)
                    time.sleep(resp.delay_s)
                else:
                    time.sleep(resp.delay_s)
                    status, headers, payload = resp.status, resp.headers, resp.body
                if status == 200 and isinstance(payload, bytes) and _is_json(headers) and _asks_to_stream(body):
                    # A model API asked for a stream gets the scripted reply as that API streams it.
                    from tests.providers.stub_llm import as_stream

                    headers, payload = {"Content-Type": "text/event-stream"}, as_stream(payload)
                try:
                    self.send_response(status)
                    for k, v in headers.items():
                        self.send_header(k, v)
                    if isinstance(payload, bytes):
                        self.send_header("Content-Length", str(len(payload)))
                        self.end_headers()
                        self.wfile.write(payload)
                        return
                    # Pieces written one by one (a float is a pause, None cuts the connection), as a stream.
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.close_connection = True
                    for piece in payload:
                        if piece is None:
                            return
                        if isinstance(piece, float | int):
                            time.sleep(piece)
                            continue
                        self.wfile.write(piece)
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            do_GET = do_POST = do_PUT = do_DELETE = _handle

        return Handler

    def start(self) -> StubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _asks_to_stream(body: bytes) -> bool:
    if b'"stream"' not in body:
        return False
    try:
        return jsonlib.loads(body).get("stream") is True
    except (ValueError, AttributeError):
        return False


def _is_json(headers: dict[str, str]) -> bool:
    return any(k.lower() == "content-type" and "json" in v for k, v in headers.items())
