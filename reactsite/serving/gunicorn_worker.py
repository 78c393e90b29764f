"""gunicorn's gevent worker, whose responses leave in one `send` instead of two.

gunicorn writes a response's head (status line and headers) with one `sendall` and its body with another. On
loopback or a LAN each `send` costs a syscall plus the receiver's wake-up, charged to the sender, and under gevent
the socket wrapper's bookkeeping too: about 1.5 % of a worker's CPU per `send` in a three-turn run (py-spy, W3 at 8
clients). This worker hands gunicorn a socket that holds a head with a `Content-Length` (the body follows at once)
and sends it together with the body's first `sendall`. A streamed (chunked) response's head is sent at once, so an
event stream's client sees its headers before the first event; a head with no body to follow is sent when the
request is done. Anything else asked of the socket (sendfile, fileno, close, ...) sends what is held first.

`GUNICORN_WORKER_CLASS=gevent` (the default) selects this worker (gunicorn.conf.py); gunicorn's own is
`gunicorn.workers.ggevent.GeventWorker`.

Both our workers (this one and `ThreadWorker`, for `gthread`) answer gunicorn's own errors (a request line over
4 KB: 414, headers over 8 KB: 431, a NUL in a header: 400, ...) in JSON like every other error of the API, where
gunicorn writes an HTML page: gunicorn still decides the status and the message and logs them (`JsonErrors`).
"""

from __future__ import annotations

import html
import json
from typing import Any

from gunicorn import util
from gunicorn.workers.ggevent import GeventWorker as _GeventWorker
from gunicorn.workers.gthread import ThreadWorker as _ThreadWorker

_HEAD_END = b"\r\n\r\n"
_SIZED = b"\r\ncontent-length:"


class CoalescingSocket:
    """Holds a sized response head until the body's first `sendall` (or `flush`); delegates everything else."""

    __slots__ = ("_sock", "_head", "_started")

    def __init__(self, sock: Any) -> None:
        self._sock = sock
        self._head: bytes | None = None
        self._started = False  # a response's head is its first write: only that one may be held

    def sendall(self, data: bytes, *args: Any) -> None:
        head, first = self._head, not self._started
        self._started = True
        if head is not None:
            self._head = None
            self._sock.sendall(head + data, *args)
        elif first and not args and data.endswith(_HEAD_END) and _SIZED in data.lower():
            self._head = bytes(data)
        else:
            self._sock.sendall(data, *args)

    def flush(self) -> None:
        head = self._head
        if head is not None:
            self._head = None
            self._sock.sendall(head)

    def __getattr__(self, name: str) -> Any:
        self.flush()
        return getattr(self._sock, name)


class _Page:
    """Stands in for the client's socket while gunicorn writes an error page: keeps the bytes (everything else is the
    real socket's)."""

    def __init__(self, sock: Any) -> None:
        self._sock, self.data = sock, bytearray()

    def gettimeout(self) -> float:
        return 0.0  # already "non-blocking": gunicorn then writes straight away

    def sendall(self, data: bytes, *args: Any) -> None:
        self.data += data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def json_error(page: bytes) -> bytes:
    """gunicorn's HTML error response as the API's JSON one: same status line, `{"detail": "<reason>: <message>"}`."""
    head, _, body = page.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 1)[1]  # "414 URI Too Long"
    reason = status.split(" ", 1)[1] if " " in status else status
    text = body.decode("latin-1")
    message = html.unescape(text.partition("</h1>")[2].partition("</body>")[0]).strip()
    payload = json.dumps({"detail": f"{reason}: {message}" if message else reason}).encode()
    lines = [f"HTTP/1.1 {status}", "Connection: close", "Content-Type: application/json"]
    return ("\r\n".join([*lines, f"Content-Length: {len(payload)}", "", ""])).encode("latin-1") + payload


class JsonErrors:
    """gunicorn's own error answers in JSON (see the module's docstring)."""

    def handle_error(self, req: Any, client: Any, addr: Any, exc: Exception) -> None:
        page = _Page(client)
        super().handle_error(req, page, addr, exc)  # type: ignore[misc]
        if page.data:
            try:
                util.write_nonblock(client, json_error(bytes(page.data)))
            except Exception:  # noqa: BLE001 - the client went away, as gunicorn itself tolerates
                pass


class ThreadWorker(JsonErrors, _ThreadWorker):
    """gunicorn's gthread worker, its own errors in JSON."""


class GeventWorker(JsonErrors, _GeventWorker):
    """gunicorn's gevent worker; each request's response goes through a CoalescingSocket, its own errors in JSON."""

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> Any:
        wrapped = CoalescingSocket(sock)
        try:
            return super().handle_request(listener_name, req, wrapped, addr)
        finally:
            wrapped.flush()
