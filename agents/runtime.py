"""Glue between stored runs and the engine: tools, provider, state. No transactions here (see services)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from datetime import UTC, datetime

from django.conf import settings

from agents.engine import RunState, Toolset
from agents.engine import pending_action as engine_pending_action
from agents.models import Run, Step
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


def to_epoch(moment: datetime) -> float:
    return moment.timestamp()


def from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def state_from_rows(run: Run, steps: Iterable[Step]) -> RunState:
    """Rebuild the engine state from the run row and its steps."""
    return RunState(
        input=run.input,
        protocol=run.protocol,
        max_turns=run.max_turns,
        deadline=to_epoch(run.deadline),
        tools=list(run.tools),
        sensitive_tools=list(run.sensitive_tools),
        status=run.status,
        stop_reason=run.stop_reason,
        output=run.output,
        error=run.error,
        turns=run.turns,
        max_reflections=run.max_reflections,
        reflections=run.reflections,
        attempt_start_turn=run.attempt_start_turn,
        prompt_tokens=run.prompt_tokens,
        completion_tokens=run.completion_tokens,
        steps=[s.as_event() for s in steps],
    )


def run_fields(state: RunState) -> dict:
    """The run-row columns that a unit of work may change."""
    return {
        "status": state.status,
        "stop_reason": state.stop_reason,
        "output": state.output,
        "error": state.error,
        "turns": state.turns,
        "reflections": state.reflections,
        "attempt_start_turn": state.attempt_start_turn,
        "prompt_tokens": state.prompt_tokens,
        "completion_tokens": state.completion_tokens,
    }


def step_rows(run: Run, events: Iterable[dict]) -> list[Step]:
    skip = {"index", "kind", "latency_ms"}
    return [
        Step(
            run=run,
            index=e["index"],
            kind=e["kind"],
            latency_ms=e["latency_ms"],
            data={k: v for k, v in e.items() if k not in skip},
        )
        for e in events
    ]


def pending_action(run: Run) -> dict | None:
    """The call a paused run waits on (`{"call_id", "tool", "arguments"}`), by the engine's own rule.

    Uses steps a caller prefetched (`paused_steps`, or a `steps` prefetch) when present; else reads only the steps
    since the last model reply.
    """
    if run.status != "awaiting_approval":
        return None
    state = getattr(run, "engine_state", None)  # a run a service just drove: its state is still in memory
    if state is not None:
        return engine_pending_action(state)
    steps = getattr(run, "paused_steps", None)
    if steps is None:
        steps = getattr(run, "_prefetched_objects_cache", {}).get("steps")
    if steps is None:
        last_model = run.steps.filter(kind="model").order_by("-index").values_list("index", flat=True).first()
        steps = run.steps.filter(index__gte=last_model or 0).order_by("index")
    return engine_pending_action(RunState(input="", status=run.status, steps=[s.as_event() for s in steps]))
