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
"""

from __future__ import annotations

from typing import Any

from gunicorn.workers.ggevent import GeventWorker as _GeventWorker

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


class GeventWorker(_GeventWorker):
    """gunicorn's gevent worker; each request's response goes through a CoalescingSocket."""

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> Any:
        wrapped = CoalescingSocket(sock)
        try:
            return super().handle_request(listener_name, req, wrapped, addr)
        finally:
            wrapped.flush()
