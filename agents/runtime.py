"""Factories of a run's engine inputs: the clock, its tools (with the host-injected context) and its model."""

from __future__ import annotations

import time

from django.conf import settings

from agents.engine import Toolset
from agents.models import Run
from agents.providers import Provider, get_provider
from agents.tools import ToolContext, ToolRegistry, load_builtin_tools


def clock() -> float:
    """Wall-clock seconds: deadlines are shared between processes."""
    return time.time()


def tool_registry() -> ToolRegistry:
    """Every registered tool (built-ins and app tools)."""
    import memory.tools  # noqa: F401  (registers remember/recall)

    return load_builtin_tools()


def sensitive_floor() -> list[str]:
    return list(settings.AGENT_SENSITIVE_TOOLS)


def build_toolset(run: Run) -> Toolset:
    """The run's tools with a host-injected context: the owner comes from the run, never from the model."""
    tools = tool_registry().select(run.tools)
    context = ToolContext(user_id=run.owner_id, run_id=str(run.id))
    return Toolset(tools=tools, context=context, max_output_chars=settings.AGENT_MAX_TOOL_OUTPUT_CHARS)


def build_model(run: Run) -> Provider:
    return get_provider(run.provider, run.model)
