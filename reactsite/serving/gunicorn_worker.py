"""gunicorn's gevent and gthread workers, unchanged but for their own error answers (400, 414, 431, ...): JSON like
every other error of the API, where gunicorn writes an HTML page; gunicorn still decides the status and the message
and logs them."""

from __future__ import annotations

import html
import json
from typing import Any

from gunicorn import util
from gunicorn.workers.ggevent import GeventWorker as _GeventWorker
from gunicorn.workers.gthread import ThreadWorker as _ThreadWorker


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
    """gunicorn's own error answers in JSON: the same status line, `{"detail": "<reason>: <message>"}`."""

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
    """gunicorn's gevent worker, its own errors in JSON."""
