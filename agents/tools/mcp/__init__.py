"""Tools from MCP servers (AGENT_MCP_SERVERS), through the official `mcp` SDK: they join the registry as
`<server>.<tool>` (sent to the providers as `<server>__<tool>`: see agents/providers/names.py).

Per process: the first look at the registry connects to every configured server (each bounded by
AGENT_MCP_CONNECT_TIMEOUT_S) and lists its tools; a background task lists them again every AGENT_MCP_REFRESH_S and
retries a server that is down, sooner after a failure (1 s, 2 s, 4 s… up to the refresh interval). Requests never
wait for a listing. A server down at start has no tools until it answers; a server that fails later keeps its last
listing, and calls to it fail as tool errors the model can read until it is back. Every call is bounded by
AGENT_MCP_TIMEOUT_S (and the run's own per-tool bound), and stdio servers run for as long as the process does.

A run's call carries its idempotency key, "<run id>:<step>:<call id>", in the request's `_meta`: a resumed run repeats a
call that was in flight when its worker died with the same key. Only a server configured `"idempotent": true` is
taken to honour it; the calls of any other are at-least-once, and their tool steps say so (`delivery`).

This module imports no SDK: without a configured server the SDK is never loaded (agents/tools/mcp/servers.py is).
"""

from __future__ import annotations

import atexit
import functools
import logging
import math
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from django.conf import settings

from agents.providers.names import wire_name
from agents.tools.mcp.bridge import EventLoopThread
from agents.tools.mcp.config import AT_LEAST_ONCE, Limits, McpConfigError, McpTool, parse_servers
from agents.tools.registry import Tool, ToolContext, ToolError, ToolRegistry

if TYPE_CHECKING:
    from agents.tools.mcp.servers import McpTools

log = logging.getLogger(__name__)

_lock = threading.Lock()
# key: what the current configuration was made from; raw: the setting's value (kept alive: its id is in the key)
_state: dict[str, Any] = {"key": None, "raw": None, "tools": None, "loop": None, "bad": None, "atexit": False}


def current() -> McpTools | None:
    """This process's MCP tools for the current settings (started on first use); None when no server is configured
    or the setting is invalid (the system check says why)."""
    raw = settings.AGENT_MCP_SERVERS
    if not raw and _state["tools"] is None:
        return None  # the common case, kept cheap
    key = (id(raw), *_limit_values())
    if _state["key"] != key:
        with _lock:
            if _state["key"] != key:
                _configure(raw, key)
    tools: McpTools | None = _state["tools"]
    return tools


def _limit_values() -> tuple[Any, Any, Any]:
    return settings.AGENT_MCP_TIMEOUT_S, settings.AGENT_MCP_CONNECT_TIMEOUT_S, settings.AGENT_MCP_REFRESH_S


def _configure(raw: Any, key: tuple[Any, ...]) -> None:
    """Start the servers of a new configuration, closing the previous one's (unless it is the same)."""
    from agents.tools.mcp.servers import McpTools

    try:
        configs, limits = parse_servers(raw or ()), _limits()
    except McpConfigError as exc:
        if _state["bad"] != str(exc):
            log.error("MCP servers are disabled: %s", exc)
        configs, limits, _state["bad"] = (), None, str(exc)
    previous: McpTools | None = _state["tools"]
    if previous is not None and (previous.configs, previous.limits) == (configs, limits):
        _state.update(key=key, raw=raw)
        return
    if previous is not None:
        previous.close()
    tools = McpTools(configs, limits, _loop(), invoke) if configs and limits else None
    _state.update(key=key, raw=raw, tools=tools)
    if tools is not None:
        tools.start()


def _limits() -> Limits:
    values = [v if isinstance(v, int | float) and not isinstance(v, bool) else math.nan for v in _limit_values()]
    if not all(v > 0 for v in values):
        raise McpConfigError("AGENT_MCP_TIMEOUT_S, AGENT_MCP_CONNECT_TIMEOUT_S and AGENT_MCP_REFRESH_S must be > 0.")
    return Limits(*(float(v) for v in values))


def _loop() -> EventLoopThread:
    loop: EventLoopThread | None = _state["loop"]
    if loop is None:
        loop = _state["loop"] = EventLoopThread()
        if not _state["atexit"]:
            atexit.register(shutdown)
            _state["atexit"] = True
    return loop


def shutdown() -> None:
    """At exit: close the sessions (stopping stdio servers), kill whatever is left, and stop the loop."""
    tools, loop = _state["tools"], _state["loop"]
    if tools is not None and loop is not None and loop.pid == os.getpid():
        tools.close()
    if stdio := sys.modules.get("agents.tools.mcp.stdio"):
        stdio.kill_all()
    if loop is not None:
        loop.stop()
    _state.update(key=None, raw=None, tools=None, loop=None)


def _forget_after_fork() -> None:
    """A forked child has no loop thread and must not touch its parent's servers: it starts afresh."""
    _state.update(key=None, raw=None, tools=None, loop=None, bad=None)
    if stdio := sys.modules.get("agents.tools.mcp.stdio"):
        stdio.forget_all()


os.register_at_fork(after_in_child=_forget_after_fork)


def invoke(server: str, tool: str, arguments: dict[str, Any], context: ToolContext) -> str:
    """An MCP tool's function (the host context stays here: a server never learns who the user is)."""
    tools = current()
    if tools is None:
        raise ToolError(f"MCP server '{server}' is not configured.")
    return tools.call(server, tool, arguments, call_key(context))


def call_key(context: ToolContext) -> str | None:
    """The idempotency key of a run's call: "<run id>:<step>:<call id>" (None outside a run: an invoke has no key).
    The step makes it unique in the run: a provider that sends no call id gets `call_0` made up on every turn."""
    step_key, call_id = getattr(context, "idempotency_key", None), getattr(context, "call_id", None)
    return f"{step_key}:{call_id}" if step_key and call_id else None


# --- what agents.runs.runtime asks ----------------------------------------------------------------------------------


def with_mcp_tools(base: ToolRegistry) -> ToolRegistry:
    """`base` plus the MCP tools (`base` itself when no server is configured). An MCP tool whose wire name another
    tool has already is left out (logged)."""
    tools = current()
    if tools is None:
        return base
    version, listed = tools.snapshot()
    key = (version, tuple(base.names()))
    if tools.merged is not None and tools.merged[0] == key:
        return tools.merged[1]
    merged = ToolRegistry()
    taken = set()
    for name, tool in base.select().items():
        merged.register(tool)
        taken.add(wire_name(name))
    for tool in listed:
        if wire_name(tool.name) in taken:
            log.warning("MCP tool %r left out: another tool has the wire name %r", tool.name, wire_name(tool.name))
            continue
        taken.add(wire_name(tool.name))
        merged.register(tool)
    tools.merged = (key, merged)
    return merged


def sensitive_names() -> list[str]:
    """The MCP tools of servers not configured `"sensitive": false` (the server's floor includes them)."""
    tools = current()
    return [t.name for t in tools.snapshot()[1] if t.sensitive] if tools is not None else []


def placeholder(name: str) -> Tool | None:
    """A stand-in for `<server>.<tool>` named by a run but not listed here now (its server is down, or was when
    this process started): calling it reaches the server if it is back, else fails as a tool error."""
    server, dot, tool = name.partition(".")
    if not dot or not tool:
        return None
    tools = current()
    config = next((c for c in tools.configs if c.name == server), None) if tools is not None else None
    return McpTool(
        name=name,
        description=f"The {tool} tool of MCP server {server} (not listed at the moment).",
        parameters={"type": "object"},
        func=functools.partial(invoke, server, tool),
        sensitive=config.sensitive if config is not None else True,
        timeout_s=tools.limits.call_s if tools is not None else 10.0,
        delivery=config.delivery if config is not None else AT_LEAST_ONCE,
    )
