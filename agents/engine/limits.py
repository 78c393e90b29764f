"""Per-run usage limits (max_total_tokens, max_tool_calls, tool_limits), checked before the call they would exceed.

Pure reads of the run state: the gates (agents.engine.gates) ask before each model call and each tool call, and stop
the run (stop reason `usage_limit`, an error step naming the limit) or, for a per-tool limit, answer the call with an
observation that the tool is exhausted, so the model may go on without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.engine.state import RunState
from agents.engine.steps import StepKind


@dataclass(frozen=True)
class Refusal:
    """Why a call may not happen: `limit` names it ("max_tool_calls", "tool_limits.search"), `message` says it; with
    `stops` the run ends, else only the call is refused (the model is told)."""

    limit: str
    message: str
    stops: bool


def last_prompt_tokens(state: RunState) -> int:
    """The input tokens of the run's last model call: the next call's input holds at least that transcript."""
    for step in reversed(state.steps):
        if step["kind"] == StepKind.MODEL:
            usage = step.get("usage") or {}
            return int(usage.get("prompt_tokens") or 0)
    return 0


def before_model_call(state: RunState) -> Refusal | None:
    """`max_total_tokens`: the next call would exceed it when the tokens used so far plus the input of the last call
    (which the next call's input contains, and outgrows) reach it. The first call is refused only at 0 left."""
    limit = state.max_total_tokens
    if limit is None:
        return None
    used = state.prompt_tokens + state.completion_tokens
    needs = last_prompt_tokens(state)
    if used + needs < limit and used < limit:
        return None
    detail = f"{used} used" + (f", and the next call's input alone is at least {needs}" if needs else "")
    return Refusal("max_total_tokens", f"Usage limit max_total_tokens ({limit}) reached: {detail}.", stops=True)


def ran(step: dict[str, Any]) -> bool:
    """Whether a tool step is a call that ran: not one a limit or a guardrail on its arguments answered in its place
    (a result a guardrail withheld was a call that ran)."""
    return step["kind"] == StepKind.TOOL and "limit" not in step and ("guardrail" not in step or "withheld" in step)


def _calls_made(state: RunState) -> list[Any]:
    """The tool names of the calls that ran, in order."""
    return [step.get("name") for step in state.steps if ran(step)]


def max_tool_calls(state: RunState) -> Refusal | None:
    """`max_tool_calls`: the run stops before a call past it."""
    total = state.max_tool_calls
    if total is None:
        return None
    made = len(_calls_made(state))
    if made < total:
        return None
    message = f"Usage limit max_tool_calls ({total}) reached: {made} tool call{'s' if made != 1 else ''} made."
    return Refusal("max_tool_calls", message, stops=True)


def tool_limit(state: RunState, name: str) -> Refusal | None:
    """`tool_limits`: a call to a tool past its own limit is answered with a note (the tool is exhausted)."""
    per_tool = state.tool_limits.get(name)
    if per_tool is None or _calls_made(state).count(name) < per_tool:
        return None
    message = (
        f"Tool '{name}' is exhausted: this run may call it at most {per_tool} time{'s' if per_tool != 1 else ''}. "
        "The tool did not run; go on without it."
    )
    return Refusal(f"tool_limits.{name}", message, stops=False)
