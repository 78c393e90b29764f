"""One configured MCP server as seen from our event loop: its session, its tools, and when to look at it again.

Everything here runs on the loop of agents/tools/mcp/bridge.py. A session is opened by a task of its own that holds
the SDK's `Client` context open until it is told to close (the SDK's contexts must be left by the task that entered
them), so sessions outlive the calls that use them: a stdio server keeps running between calls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import httpx2
import mcp.types as types
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client

from agents.tools.mcp.config import IDEMPOTENCY_META_KEY, Limits, ServerConfig
from agents.tools.mcp.stdio import stdio_transport
from agents.tools.registry import ToolError

log = logging.getLogger("agents.tools.mcp")

MAX_PAGES = 20  # of a tools/list answer: a server that pages forever cannot hold discovery up
RETRY_GAP_S = 1.0  # between two connection attempts: a dead server is not hammered by every call
CLOSE_S = 7.0  # for a session to close (a stdio server is given 2 s after stdin, 2 after SIGTERM, 2 after SIGKILL)
SSE_READ_TIMEOUT_S = 300.0  # the server-to-client event stream stays open; each call has its own bound
CLIENT_INFO = types.Implementation(name="reactsite", version="1")


class McpUnavailable(ToolError):
    """The server cannot be reached now: the call fails as a tool error, the model may try again later."""


class Session:
    """A server's connection (or its absence), the tools it listed last, and its schedule."""

    def __init__(self, config: ServerConfig, limits: Limits, on_tools: Callable[[], None]) -> None:
        self.config, self.limits, self.on_tools = config, limits, on_tools
        self.client: Client | None = None
        self.tools: tuple[types.Tool, ...] = ()  # the last listing; kept while the server is down
        self.error: str | None = None
        self.failures = 0
        self.next_check = 0.0  # monotonic: when the refresher looks at this server again
        self._last_attempt = -RETRY_GAP_S
        self._attempt: asyncio.Future[None] | None = None
        self._holder: asyncio.Task[None] | None = None
        self._closing: asyncio.Event | None = None
        self._ready: asyncio.Future[Client] | None = None

    @property
    def name(self) -> str:
        return self.config.name

    # --- calls ---------------------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any], key: str | None = None) -> types.CallToolResult:
        """One tools/call, carrying the call's idempotency key (if any) in its `_meta`; every failure is a ToolError,
        and a broken connection is dropped to be made again."""
        client = await self.connected()
        meta = cast(types.RequestParamsMeta, {IDEMPOTENCY_META_KEY: key}) if key else None
        try:
            return await client.call_tool(tool, arguments, meta=meta)
        except MCPError as exc:
            if exc.code != types.CONNECTION_CLOSED:
                raise ToolError(f"MCP server '{self.name}' refused the call: {exc.message[:300]}") from None
            failure: BaseException = exc
        except Exception as exc:  # noqa: BLE001 - transport errors of every kind (httpx2, anyio, OS)
            failure = exc
        self.broken(failure)
        raise McpUnavailable(f"MCP server '{self.name}' failed: {describe(failure)}. It is being reconnected.")

    async def connected(self) -> Client:
        """The open session, opening one first when there is none (one attempt shared by every caller)."""
        if self.client is None:
            await self.connect()
        if self.client is None:  # closed again in the meantime
            raise McpUnavailable(f"MCP server '{self.name}' is unavailable.")
        return self.client

    async def connect(self) -> None:
        """Open a session and list the tools; McpUnavailable when that fails or was tried less than a second ago."""
        if self._attempt is None:
            if self.error is not None and time.monotonic() - self._last_attempt < RETRY_GAP_S:
                raise McpUnavailable(f"MCP server '{self.name}' is unavailable ({self.error}).")
            self._attempt = asyncio.ensure_future(self._connect())
            self._attempt.add_done_callback(_retrieved)  # its failure is reported to whoever still waits, or no one
        await asyncio.shield(self._attempt)  # a caller giving up does not cancel the others' attempt

    async def _connect(self) -> None:
        self._last_attempt = time.monotonic()
        try:
            async with asyncio.timeout(self.limits.connect_s):
                client = await self._open()
                tools = await list_tools(client)
        except BaseException as exc:
            await self.disconnect()
            if not isinstance(exc, Exception):
                raise
            self._failed(exc)
            raise McpUnavailable(f"MCP server '{self.name}' is unavailable ({self.error}).") from None
        finally:
            self._attempt = None
        self.client, self.error, self.failures = client, None, 0
        self.next_check = time.monotonic() + self.limits.refresh_s
        log.info("MCP server %r connected: %d tool(s)", self.name, len(tools))
        self._listed(tools)

    def _failed(self, exc: BaseException) -> None:
        self.error, self.failures = describe(exc), self.failures + 1
        delay = min(self.limits.refresh_s, RETRY_GAP_S * 2 ** (self.failures - 1))
        self.next_check = time.monotonic() + delay
        log.warning("MCP server %r is unavailable: %s (next attempt in %.3g s)", self.name, self.error, delay)

    def broken(self, exc: BaseException) -> None:
        """The session failed under a call: close it in the background and connect again soon."""
        log.warning("MCP server %r: the session failed (%s); reconnecting", self.name, describe(exc))
        self.error = describe(exc)
        self.next_check = time.monotonic() + RETRY_GAP_S
        background(self._close(*self._detach()))

    # --- listing -------------------------------------------------------------------------------------------

    async def refresh(self) -> None:
        """The refresher's visit: list the tools of a live session again, or try to connect a missing one."""
        if self.client is None:
            with contextlib.suppress(ToolError):
                await self.connect()
            return
        try:
            async with asyncio.timeout(self.limits.connect_s):
                tools = await list_tools(self.client)
        except Exception as exc:  # noqa: BLE001
            self.broken(exc)
            return
        self.next_check = time.monotonic() + self.limits.refresh_s
        self._listed(tools)

    def _listed(self, tools: tuple[types.Tool, ...]) -> None:
        if tools != self.tools:
            self.tools = tools
            self.on_tools()

    # --- the session's own task ----------------------------------------------------------------------------

    async def _open(self) -> Client:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        self._ready, self._closing = ready, asyncio.Event()
        self._holder = asyncio.create_task(self._hold(ready, self._closing), name=f"mcp-{self.name}")
        return await ready

    async def _hold(self, ready: asyncio.Future[Client], closing: asyncio.Event) -> None:
        """Enter the SDK's client, hand it over, and leave it when told to (or when it fails)."""
        try:
            async with Client(self._transport(), cache=None, client_info=CLIENT_INFO) as client:
                if ready.done():  # the opener gave up meanwhile
                    return
                ready.set_result(client)
                await closing.wait()
        except Exception as exc:  # noqa: BLE001 - reported to the opener, or logged once the session was in use
            if not ready.done():
                ready.set_exception(exc)
            else:
                log.info("MCP server %r: session ended (%s)", self.name, describe(exc))
        finally:
            if not ready.done():
                ready.cancel()

    def _transport(self) -> Any:
        if self.config.transport == "stdio":
            return stdio_transport(self.config)
        return http_transport(self.config, self.limits)

    async def disconnect(self) -> None:
        """Close the session (if any) and wait, boundedly, for its server to be let go."""
        await self._close(*self._detach())

    def _detach(self) -> tuple[asyncio.Task[None] | None, asyncio.Event | None, bool]:
        """Forget the session at once (no call uses it any more); hand back what closes it, and whether it opened."""
        holder, closing, ready = self._holder, self._closing, self._ready
        self.client, self._holder, self._closing, self._ready = None, None, None, None
        opened = ready is not None and ready.done() and not ready.cancelled() and ready.exception() is None
        return holder, closing, opened

    @staticmethod
    async def _close(holder: asyncio.Task[None] | None, closing: asyncio.Event | None, opened: bool) -> None:
        """An open session leaves its client in order; one still opening (a server that does not answer) is
        cancelled at once. Either way its transport stops the server, boundedly."""
        if holder is None or closing is None:
            return
        closing.set()
        if opened:
            await asyncio.wait([holder], timeout=CLOSE_S)
        if not holder.done():
            holder.cancel()
            await asyncio.wait([holder], timeout=CLOSE_S)


@contextlib.asynccontextmanager
async def http_transport(config: ServerConfig, limits: Limits) -> AsyncIterator[Any]:
    """The SDK's streamable HTTP transport on an HTTP client carrying the configured headers."""
    timeout = httpx2.Timeout(limits.connect_s, read=SSE_READ_TIMEOUT_S)
    async with httpx2.AsyncClient(headers=dict(config.headers), timeout=timeout) as http:
        async with streamable_http_client(config.url, http_client=http) as streams:
            yield streams


async def list_tools(client: Client) -> tuple[types.Tool, ...]:
    """Every tool the server lists, page after page (at most MAX_PAGES)."""
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tuple(tools)


def describe(exc: BaseException) -> str:
    """A short, credential-free account of a failure: its kind, and the OS's reason for an OS error."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, MCPError):
        return f"MCP error {exc.code}: {exc.message[:200]}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}"
    return type(exc).__name__


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()


_BACKGROUND: set[asyncio.Task[Any]] = set()


def background(coro: Any) -> None:
    """Run a coroutine on the current loop without waiting for it (kept referenced until it ends)."""
    task = asyncio.ensure_future(coro)
    _BACKGROUND.add(task)
    task.add_done_callback(_BACKGROUND.discard)
