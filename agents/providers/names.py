"""Tool names on a provider's wire.

Both function-calling APIs take tool names matching ^[a-zA-Z0-9_-]{1,64}$: no dot. Our registry names an MCP server's
tool `<server>.<tool>` (agents/tools/mcp/__init__.py), so in the `tools` protocol the providers send every "." as "__"
(`docs.search` goes out as `docs__search`) — in the tool list and in the tool calls of earlier turns — and name the
calls of a reply back from the tools of that same request. Server names cannot hold "__" and tools whose wire names
would clash are left out of the registry, so the way back is unambiguous. In the `react` protocol no tool list is
sent: the model reads and writes the registry's own names.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from agents.engine.types import ModelReply, ToolSpec

WIRE_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")


def wire_name(name: str) -> str:
    """A registry name as the providers accept it."""
    return name.replace(".", "__")


def fits_the_wire(name: str) -> bool:
    """Whether a registry name can be sent to both providers (once its dots are spelled "__")."""
    return WIRE_NAME.fullmatch(wire_name(name)) is not None


def named_back(reply: ModelReply, tools: Sequence[ToolSpec]) -> ModelReply:
    """The reply with its tool calls named as in our registry again (a name sent as `docs__search` is
    `docs.search`); a name the request did not send is left as the model wrote it."""
    if not reply.tool_calls:
        return reply
    back = {wire_name(t.name): t.name for t in tools if "." in t.name}
    if not back:
        return reply
    calls = tuple(replace(c, name=back.get(c.name, c.name)) for c in reply.tool_calls)
    return replace(reply, tool_calls=calls)
