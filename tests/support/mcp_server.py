"""A small MCP server for the tests, written with the official SDK: over stdio (the default) or streamable HTTP.

    python tests/support/mcp_server.py                          # stdio: what AGENT_MCP_SERVERS' "command" starts
    python tests/support/mcp_server.py --http --port 8765       # streamable HTTP on 127.0.0.1:8765/mcp

Tools: `echo`, `add`, `distance` (its schema has `$defs`), `greet` (its greeting comes from the MCP_TEST_GREETING
environment variable: the stdio config's "env" reaches the server), `environment` (the names it was given), `header`
(a request header, over HTTP: the config's "headers" reach it), `meta` (the request's `_meta`: the call's idempotency
key reaches it), `slow` (sleeps), `boom` (raises), `big` (a long output) and `learn` (adds a tool to the listing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
from typing import TypedDict

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

server = MCPServer("reactsite-test", log_level="WARNING")


@server.tool()
def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Point(TypedDict):
    x: float
    y: float


@server.tool()
def distance(a: Point, b: Point) -> float:
    """The distance between two points (its schema refers to a definition: `$defs`)."""
    return float(((a["x"] - b["x"]) ** 2 + (a["y"] - b["y"]) ** 2) ** 0.5)


@server.tool()
def greet(name: str) -> str:
    """Greet someone (the greeting is set by the server's environment)."""
    return f"{os.environ.get('MCP_TEST_GREETING', 'Hello')}, {name}!"


@server.tool()
def environment() -> str:
    """The names of the server's environment variables, comma-separated."""
    return ",".join(sorted(os.environ))


@server.tool()
def header(name: str, ctx: Context) -> str:
    """The value of one header of the HTTP request that carried this call ('' over stdio or when absent)."""
    request = getattr(ctx.request_context, "request", None)
    headers = getattr(request, "headers", None)
    return str(headers.get(name, "")) if headers is not None else ""


@server.tool()
def meta(ctx: Context) -> str:
    """The `_meta` of the tools/call request that carried this call, as a JSON object ({} when it had none)."""
    return json.dumps(dict(ctx.request_context.meta or {}), sort_keys=True, default=str)


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep (without holding up the server's other calls), then answer."""
    await asyncio.sleep(seconds)
    return f"slept {seconds}"


@server.tool()
def boom() -> str:
    """Always fails."""
    raise ToolError("the test server's boom tool failed on purpose")


@server.tool()
def big(size: int) -> str:
    """A long output."""
    return "x" * size


@server.tool()
def learn(name: str) -> str:
    """Add a tool called `name` (it echoes): the server's listing changes while its session lives on."""

    def learned(text: str) -> str:
        return text

    server.add_tool(learned, name=name, description="A tool added at run time.")
    return f"learned {name}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", action="store_true")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.port)
    else:
        server.run()


if __name__ == "__main__":
    main()
