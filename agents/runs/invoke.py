"""A tool called directly, outside any run (`POST /api/v1/tools/{name}/invoke`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from agents.engine.dispatch import ToolResult, Toolset, run_tool, schema_error
from agents.errors import InvalidRequest, NotAllowed, UnknownTool
from agents.permissions import can_invoke_sensitive
from agents.runs import runtime
from agents.tools import ToolContext


def invoke_tool(*, actor, name: str, arguments: Any) -> ToolResult:
    """Run one tool directly for the actor (no run): sensitive tools need the approval right."""
    tool = runtime.tool_registry().get(name)
    if tool is None:
        raise UnknownTool(f"Unknown tool '{name}'.")
    if runtime.is_sensitive(tool) and not can_invoke_sensitive(actor):
        raise NotAllowed("This tool is sensitive: invoking it needs the agents.review_run permission.")
    problem = schema_error(tool.parameters, arguments)
    if problem is not None:
        raise InvalidRequest({"arguments": [problem]})
    toolset = Toolset({name: tool}, ToolContext(user_id=actor.pk), settings.AGENT_MAX_TOOL_OUTPUT_CHARS)
    return run_tool(toolset, name, arguments, tool.timeout_s)
