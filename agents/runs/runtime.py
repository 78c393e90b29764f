"""Factories of a run's engine inputs: the clock, its tools (with the host-injected context) and its model."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Collection

from django.conf import settings

from agents import providers
from agents.engine import Toolset, wrapping
from agents.engine.types import Model
from agents.models import Run
from agents.providers import get_provider
from agents.providers.fallback import with_fallbacks
from agents.runs import telemetry
from agents.tools import Tool, ToolContext, ToolRegistry, load_builtin_tools, mcp
from memory import embeddings
from memory import tools as memory_tools  # noqa: F401  (registers remember and recall)


def warm() -> None:
    """Build before serving what a process would otherwise build during its first runs, while every run then in flight
    in that (gevent) process waits, about a second in all: the SDKs of the providers that can be used, and the
    engine's look-alike table for tool output (~0.25 s), and memory's embedding model (~0.7 s, with MEMORY_VECTORS).
    gunicorn's post_worker_init and run_worker call it. Nothing with AGENT_WARM_UP off."""
    if not settings.AGENT_WARM_UP:
        return
    wrapping.warm()
    providers.warm()
    if settings.MEMORY_VECTORS:
        embeddings.warm_up(background=False)


def clock() -> float:
    """Wall-clock seconds: deadlines are shared between processes."""
    return time.time()


def tool_registry() -> ToolRegistry:
    """Every registered tool (built-ins and app tools) and the tools of the configured MCP servers."""
    return mcp.with_mcp_tools(load_builtin_tools())


def sensitive_floor() -> list[str]:
    """AGENT_SENSITIVE_TOOLS and the tools of every MCP server not configured `"sensitive": false`."""
    return list(settings.AGENT_SENSITIVE_TOOLS) + mcp.sensitive_names()


def is_sensitive(tool: Tool, floor: Collection[str] | None = None) -> bool:
    """The one rule: a tool needs a human's approval (in a run) or the approval right (invoked directly) when it says
    so itself or the deployment lists it (`sensitive_floor`; pass it when judging many tools at once)."""
    return tool.sensitive or tool.name in (sensitive_floor() if floor is None else floor)


def sensitive_names(names: list[str] | None, also: Collection[str] = ()) -> list[str]:
    """A new run's approval gate: the deployment's floor, the run's tools that are sensitive, and what the client or
    agent adds (`also`): a run can widen the gate, never narrow it."""
    floor = set(sensitive_floor())
    tools = tool_registry().select(names).values()
    return sorted(floor | {t.name for t in tools if is_sensitive(t, floor)} | set(also))


# Where a run's tools beyond the registry's come from: each source gives the tools of a run (its sub-agents: added by
# agents/runs/children.py when the app is ready, as that module drives runs and so sits above this one).
_tool_sources: list[Callable[[Run], dict[str, Tool]]] = []


def add_tool_source(source: Callable[[Run], dict[str, Tool]]) -> None:
    if source not in _tool_sources:
        _tool_sources.append(source)


def build_toolset(run: Run) -> Toolset:
    """The run's tools with a host-injected context: the owner comes from the run, never from the model."""
    context = ToolContext(user_id=run.owner_id, run_id=str(run.id))
    tools = run_tools(run.tools)
    for source in _tool_sources:
        tools |= source(run)
    if telemetry.active():  # each call observed (traces, metrics); off, the tools are the registry's own objects
        tools = {name: _observed(run, tool) for name, tool in tools.items()}
    return Toolset(tools=tools, context=context, max_output_chars=settings.AGENT_MAX_TOOL_OUTPUT_CHARS)


def _observed(run: Run, tool: Tool) -> Tool:
    def func(arguments, context):
        with telemetry.tool_call(run, tool.name, getattr(context, "call_id", None)) as record:
            record.output = str(tool(arguments, context))
            return record.output

    return dataclasses.replace(tool, func=func)


def run_tools(names: list[str] | None) -> dict[str, Tool]:
    """The named tools (all when None), in name order. An MCP tool this process has no listing of now (its server
    is down, or was at start) gets a stand-in that reaches the server if it is back: the run goes on, with a tool
    error if the server is still down."""
    registry = tool_registry()
    if names is None:
        return registry.select()
    stand_ins = {n: t for n in names if registry.get(n) is None and (t := mcp.placeholder(n)) is not None}
    tools = registry.select([n for n in names if n not in stand_ins]) | stand_ins
    return dict(sorted(tools.items()))


def build_model(run: Run) -> Model:
    """The run's model; with fallback models, the primary falling back to each in turn (providers/fallback.py)."""
    primary = get_provider(run.provider, run.model)
    return with_fallbacks(primary, list(run.fallback_models)) if run.fallback_models else primary
