"""The configured MCP servers of one process: their sessions on the event loop, their listings as registry Tools,
the refresher, and the synchronous call a Tool makes (agents/tools/mcp/__init__.py says when this is created)."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import mcp.types as types

from agents.engine.schemas import schema_problem
from agents.providers.names import fits_the_wire
from agents.tools.mcp.bridge import EventLoopThread
from agents.tools.mcp.config import Limits, McpTool, ServerConfig
from agents.tools.mcp.session import RETRY_GAP_S, Session
from agents.tools.registry import Tool, ToolError, ToolFunc, ToolRegistry

log = logging.getLogger("agents.tools.mcp")

TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # the MCP specification's characters for a tool name
MAX_DESCRIPTION = 1024  # a server's text reaches the model's prompt: a bounded amount of it
MAX_OUTPUT_CHARS = 100_000  # before the engine's own cut (AGENT_MAX_TOOL_OUTPUT_CHARS): bounds the work of wrapping
SHUTDOWN_S = 8.0

Invoke = Callable[..., str]  # (server, tool, arguments, context) -> output


class McpTools:
    """The configured servers of this process, their sessions on one event loop, and the tools they lend."""

    def __init__(
        self, configs: tuple[ServerConfig, ...], limits: Limits, loop: EventLoopThread, invoke: Invoke
    ) -> None:
        self.configs, self.limits, self.loop, self.invoke = configs, limits, loop, invoke
        self.sessions = {c.name: Session(c, limits, self._changed) for c in configs}
        self.version = 0
        self._built: tuple[int, tuple[Tool, ...]] = (-1, ())
        self.merged: tuple[Any, ToolRegistry] | None = None  # the registry with these tools (agents.tools.mcp)
        self._refresher: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Connect to every server at once, waiting at most the connection bound; then keep their lists fresh."""
        started = self.loop.submit(self._start())
        try:
            started.result(self.limits.connect_s + 1.0)
        except TimeoutError:
            log.warning("MCP servers: not all answered within %.3g s; their tools come later", self.limits.connect_s)

    async def _start(self) -> None:
        await asyncio.gather(*(s.refresh() for s in self.sessions.values()))
        self._refresher = asyncio.create_task(self._refresh_forever(), name="mcp-refresher")

    async def _refresh_forever(self) -> None:
        """Visit each server when it is due: a listing every refresh interval, a reconnection after a failure.
        It looks at least every RETRY_GAP_S, so a session that failed under a call is reconnected that soon."""
        while True:
            now = time.monotonic()
            await asyncio.gather(*(s.refresh() for s in self.sessions.values() if s.next_check <= now))
            pause = min(s.next_check for s in self.sessions.values()) - time.monotonic()
            await asyncio.sleep(min(max(pause, 0.05), RETRY_GAP_S))

    def _changed(self) -> None:
        self.version += 1

    def snapshot(self) -> tuple[int, tuple[Tool, ...]]:
        """(version, every listed tool as a registry Tool), built again only when a server's listing changed."""
        built, version = self._built, self.version
        if built[0] != version:
            built = (version, tuple(t for s in self.sessions.values() for t in self._tools_of(s)))
            self._built = built
        return built

    def _tools_of(self, session: Session) -> list[Tool]:
        made = (make_tool(session.config, listed, self.limits, self.invoke) for listed in session.tools)
        return [tool for tool in made if tool is not None]

    def call(self, server: str, tool: str, arguments: dict[str, Any], key: str | None = None) -> str:
        """One call (sync), bounded by AGENT_MCP_TIMEOUT_S; ToolError (or TimeoutError) when it fails. `key`: the
        call's idempotency key, sent in the request's `_meta` (agents/tools/mcp/config.py, IDEMPOTENCY_META_KEY)."""
        session = self.sessions.get(server)
        if session is None:
            raise ToolError(f"MCP server '{server}' is not configured.")
        result = self.loop.run(session.call(tool, arguments, key), self.limits.call_s)
        return result_text(result)

    def close(self) -> None:
        """Stop the refresher and close every session (stdio servers exit), waiting a bounded time."""
        try:
            self.loop.run(self._close(), SHUTDOWN_S)
        except Exception as exc:  # noqa: BLE001 - leaving anyway; mcp_stdio.kill_all() is the last resort
            log.warning("MCP servers did not close cleanly: %s", type(exc).__name__)

    async def _close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
        await asyncio.gather(*(s.disconnect() for s in self.sessions.values()))


def make_tool(config: ServerConfig, listed: types.Tool, limits: Limits, invoke: Invoke) -> Tool | None:
    """A registry Tool for one listed MCP tool; None (logged) when its name or schema cannot be used."""
    name = f"{config.name}.{listed.name}"
    if not TOOL_NAME.fullmatch(listed.name) or not fits_the_wire(name):
        log.warning("MCP server %r: tool %r left out (its name does not fit the providers' rules)", config.name, name)
        return None
    schema = {"type": "object", **(listed.input_schema or {})}
    problem = schema_problem(schema)
    if problem is not None or schema.get("type") != "object":  # arguments are always an object
        log.warning("MCP server %r: tool %r left out (%s)", config.name, name, problem or "its input is not an object")
        return None
    description = listed.description or listed.title or f"The {listed.name} tool of MCP server {config.name}."
    func: ToolFunc = functools.partial(invoke, config.name, listed.name)
    return McpTool(
        name=name,
        description=description.strip()[:MAX_DESCRIPTION],
        parameters=schema,
        func=func,
        sensitive=config.sensitive,
        timeout_s=limits.call_s,
        delivery=config.delivery,
    )


def result_text(result: types.CallToolResult) -> str:
    """The result's content as text (structured content as JSON when there is no text); ToolError when is_error."""
    text = "\n".join(filter(None, (_block_text(block) for block in result.content or [])))
    if not text and result.structured_content is not None:
        text = json.dumps(result.structured_content, ensure_ascii=False)
    text = text[:MAX_OUTPUT_CHARS]
    if result.is_error:
        raise ToolError(text or "the tool reported an error")
    return text


def _block_text(block: Any) -> str:
    """Text as it is; other content named by its kind (this runtime feeds text only to models)."""
    kind = getattr(block, "type", "")
    if kind == "text":
        return str(block.text)
    if kind == "resource":
        inner = block.resource
        return str(getattr(inner, "text", None) or f"[resource {inner.uri}]")
    if kind == "resource_link":
        return f"[resource link {block.uri}]"
    mime = getattr(block, "mime_type", "") or ""
    return f"[{kind or 'content'}{' ' + mime if mime else ''}]"
