"""AGENT_MCP_SERVERS: which MCP servers lend us tools, read and checked without importing the MCP SDK.

A JSON list of servers, each either stdio (`command`, optional `args` and `env`) or streamable HTTP (`url`, optional
`headers`), with a `name`, an optional `sensitive` (default true) and an optional `idempotent` (default false: the
server is not known to honour the idempotency key every call carries, so its calls are at-least-once). A mistake
is a McpConfigError naming the entry and the field, never quoting a value (env and headers hold credentials):
agents.checks turns it into a system check error, and the tools simply stay away until the setting is fixed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any
from urllib.parse import urlsplit

from agents.tools.registry import Tool

# Letters, digits, "-" and "_" (never "__", which stands for the "." of `<server>.<tool>` on a provider's wire).
SERVER_NAME = re.compile(r"[A-Za-z0-9_-]{1,32}")
STDIO_KEYS = frozenset({"name", "command", "args", "env", "sensitive", "idempotent"})
HTTP_KEYS = frozenset({"name", "url", "headers", "sensitive", "idempotent"})
ENV_NAME = re.compile(r"[^=\x00]+")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP token

# The `params._meta` entry of every tools/call made for a run's call: "<run id>:<step>:<call id>", the same when a
# resumed run repeats the call. MCP's rules for a `_meta` key: a prefix of dot-separated labels in reverse DNS
# notation and a "/", then a name; a prefix whose second label is `modelcontextprotocol` or `mcp` is the
# specification's own.
IDEMPOTENCY_META_KEY = "io.reactsite/idempotency-key"
# A tool step's `delivery` when its server is not configured `"idempotent": true`: a call that was in flight when
# its worker died runs again when the run is resumed, and nothing tells the server it is a repeat it may skip.
AT_LEAST_ONCE = "at-least-once"


class McpConfigError(ValueError):
    """AGENT_MCP_SERVERS cannot be used as it is; the message says where and why."""


@dataclass(frozen=True)
class ServerConfig:
    """One MCP server as configured (hashable: a changed setting is a different configuration)."""

    name: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    sensitive: bool = True
    idempotent: bool = False  # the server honours IDEMPOTENCY_META_KEY: a repeated key is not run again

    @property
    def transport(self) -> str:
        return "stdio" if self.command else "http"

    @property
    def delivery(self) -> str | None:
        """What a tool step of this server's records as its `delivery` (None: nothing, the call is keyed)."""
        return None if self.idempotent else AT_LEAST_ONCE


@dataclass(frozen=True)
class McpTool(Tool):
    """A registry Tool lent by an MCP server; the engine records its `delivery` in the call's tool step."""

    delivery: str | None = AT_LEAST_ONCE


@dataclass(frozen=True)
class Limits:
    """Seconds: one tool call; one connection with its tool listing; between two listings of a healthy server."""

    call_s: float
    connect_s: float
    refresh_s: float


def parse_servers(raw: Any) -> tuple[ServerConfig, ...]:
    """The configured servers, from the setting's value (a list, or JSON text of one); McpConfigError when invalid."""
    if isinstance(raw, str):
        if not raw.strip():
            return ()
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise McpConfigError(f"AGENT_MCP_SERVERS is not valid JSON (line {_line(exc)}).") from None
    if raw is None:
        return ()
    if not isinstance(raw, list | tuple):
        raise McpConfigError("AGENT_MCP_SERVERS must be a JSON list of server objects.")
    servers = tuple(_server(index, entry) for index, entry in enumerate(raw))
    names = [s.name for s in servers]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise McpConfigError(f"AGENT_MCP_SERVERS names more than one server {', '.join(map(repr, repeated))}.")
    return servers


def _line(exc: ValueError) -> int:
    return int(getattr(exc, "lineno", 1) or 1)


def _server(index: int, entry: Any) -> ServerConfig:
    where = f"AGENT_MCP_SERVERS[{index}]"
    if not isinstance(entry, Mapping):
        raise McpConfigError(f"{where} must be an object.")
    name = entry.get("name")
    if not isinstance(name, str) or not SERVER_NAME.fullmatch(name) or "__" in name:
        raise McpConfigError(
            f"{where}: 'name' must be 1-32 letters, digits, '-' or '_' (no '__'): it prefixes the server's tools."
        )
    where = f"AGENT_MCP_SERVERS[{index}] ({name!r})"
    has_command, has_url = "command" in entry, "url" in entry
    if has_command == has_url:
        raise McpConfigError(f"{where} needs either 'command' (stdio) or 'url' (streamable HTTP), not both.")
    allowed = STDIO_KEYS if has_command else HTTP_KEYS
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise McpConfigError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; allowed: {sorted(allowed)}.")
    sensitive, idempotent = entry.get("sensitive", True), entry.get("idempotent", False)
    for key, value in (("sensitive", sensitive), ("idempotent", idempotent)):
        if not isinstance(value, bool):
            raise McpConfigError(f"{where}: '{key}' must be true or false.")
    server = _stdio(where, name, entry, sensitive) if has_command else _http(where, name, entry, sensitive)
    return replace(server, idempotent=idempotent)


def _stdio(where: str, name: str, entry: Mapping[str, Any], sensitive: bool) -> ServerConfig:
    command = entry["command"]
    if not isinstance(command, str) or not command.strip() or "\x00" in command:
        raise McpConfigError(f"{where}: 'command' must be a non-empty string.")
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) and "\x00" not in a for a in args):
        raise McpConfigError(f"{where}: 'args' must be a list of strings.")
    env = _strings(where, "env", entry.get("env", {}))
    return ServerConfig(name=name, command=command, args=tuple(args), env=env, sensitive=sensitive)


def _http(where: str, name: str, entry: Mapping[str, Any], sensitive: bool) -> ServerConfig:
    url = entry["url"]
    if not isinstance(url, str) or not _is_http_url(url):
        raise McpConfigError(f"{where}: 'url' must be an http:// or https:// URL.")
    headers = _strings(where, "headers", entry.get("headers", {}))
    return ServerConfig(name=name, url=url, headers=headers, sensitive=sensitive)


def _is_http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
        return parts.scheme in ("http", "https") and bool(parts.hostname) and parts.port != 0
    except ValueError:  # a malformed host or port
        return False


def _strings(where: str, key: str, value: Any) -> tuple[tuple[str, str], ...]:
    """An object of names to strings as sorted pairs (values are never quoted in errors: they may be secrets)."""
    name, forbidden = (HEADER_NAME, "\x00\r\n") if key == "headers" else (ENV_NAME, "\x00")
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and name.fullmatch(k) and isinstance(v, str) and not any(c in v for c in forbidden)
        for k, v in value.items()
    ):
        raise McpConfigError(f"{where}: '{key}' must be an object of {key[:-1]} names to string values.")
    return tuple(sorted(value.items()))
