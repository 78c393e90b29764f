"""The SDKs' HTTP transport: httpx's own, whose streams probe an idle connection with one `poll(2)` instead of a round
trip through gevent's hub, and hold a request's writes until its answer is read, so each call is one `send`
(docs/performance.md, the SDK transport). Where httpx's layout is not the expected one, it stays exactly httpx's.
"""

from __future__ import annotations

import select
import sys
from typing import Any

import httpcore2
import httpx2

_original_poll: Any = None


def _os_poll() -> Any:
    """The operating system's `select.poll`, looked up once (patched or not, the original stays the original)."""
    global _original_poll
    if _original_poll is None:
        monkey = sys.modules.get("gevent.monkey")
        if monkey is not None and monkey.is_module_patched("select"):
            _original_poll = monkey.get_original("select", "poll")
        else:
            _original_poll = select.poll
    return _original_poll


def readable(sock: Any) -> bool:
    """Whether an idle connection's socket has something to read (data, or the server's close): one poll(2)."""
    if sock is None:
        return True
    fileno = sock.fileno()
    if fileno < 0:
        return True
    poller = _os_poll()()
    poller.register(fileno, select.POLLIN)
    return bool(poller.poll(0))


COALESCE_MAX = 64 * 1024  # bytes held before they are sent anyway (a large request body streams as it is written)


class _Stream(httpcore2.NetworkStream):
    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner
        self._held: list[bytes] = []
        self._held_size = 0
        self._timeout: float | None = None

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if self._held:
            self._flush()
        return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        self._held.append(buffer)
        self._held_size += len(buffer)
        self._timeout = timeout
        if self._held_size > COALESCE_MAX:
            self._flush()

    def _flush(self) -> None:
        data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
        self._held, self._held_size = [], 0
        self._inner.write(data, self._timeout)

    def close(self) -> None:
        self._held, self._held_size = [], 0
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore2.NetworkStream:
        if self._held:
            self._flush()
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            return readable(self._inner.get_extra_info("socket"))
        return self._inner.get_extra_info(info)


class ProbeBackend(httpcore2.SyncBackend):
    """httpcore's own socket backend; its streams probe readability with poll(2)."""

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore2.NetworkStream:
        return _Stream(super().connect_tcp(*args, **kwargs))

    def connect_unix_socket(self, *args: Any, **kwargs: Any) -> httpcore2.NetworkStream:
        return _Stream(super().connect_unix_socket(*args, **kwargs))


class Transport(httpx2.HTTPTransport):
    def __init__(self, *, limits: httpx2.Limits) -> None:
        super().__init__(limits=limits)
        if type(getattr(self, "_pool", None)) is httpcore2.ConnectionPool:  # a direct pool (no proxy configured)
            self._pool = httpcore2.ConnectionPool(
                ssl_context=httpx2.create_ssl_context(),
                max_connections=limits.max_connections,
                max_keepalive_connections=limits.max_keepalive_connections,
                keepalive_expiry=limits.keepalive_expiry,
                network_backend=ProbeBackend(),
            )
