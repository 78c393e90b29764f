"""MCP servers lending their tools to runs (docs/configuration.md#mcp-servers)."""

import json

from reactsite.settings.base import env


def _json_or_text(text: str) -> object:
    """The JSON `text` holds (empty: no servers), or the text itself when it is not JSON, so the system check
    (reactsite.E002) reports it instead of the settings failing to load."""
    try:
        return json.loads(text) if text.strip() else []
    except ValueError:
        return text


# A JSON list of {"name", "command", "args", "env"} (stdio) or {"name", "url", "headers"} (streamable HTTP), each with
# "sensitive" (default true).
AGENT_MCP_SERVERS = _json_or_text(env.str("AGENT_MCP_SERVERS", default=""))
AGENT_MCP_TIMEOUT_S = env.float("AGENT_MCP_TIMEOUT_S", default=30.0)  # one call of an MCP tool
AGENT_MCP_CONNECT_TIMEOUT_S = env.float("AGENT_MCP_CONNECT_TIMEOUT_S", default=10.0)  # a connection and its listing
AGENT_MCP_REFRESH_S = env.float("AGENT_MCP_REFRESH_S", default=300.0)  # between two listings of a server's tools
