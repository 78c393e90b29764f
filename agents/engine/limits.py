"""Per-run usage limits (max_total_tokens, max_tool_calls, tool_limits), checked before the call they would exceed.

Pure reads of the run state: the loop asks before each model call and each tool call, and stops the run (stop reason
`usage_limit`, an error step naming the limit) or, for a per-tool limit, answers the call with an observation that
the tool is exhausted, so the model may go on without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.engine.state import RunState


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
        if step["kind"] == "model":
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
    return step["kind"] == "tool" and "limit" not in step and ("guardrail" not in step or "withheld" in step)


def before_tool_call(state: RunState, name: str) -> Refusal | None:
    """`max_tool_calls` (the run stops) and `tool_limits` (the tool is exhausted: the call is answered with a note)."""
    total, per_tool = state.max_tool_calls, state.tool_limits.get(name)
    if total is None and per_tool is None:
        return None
    made = [step.get("name") for step in state.steps if ran(step)]
    if total is not None and len(made) >= total:
        message = (
            f"Usage limit max_tool_calls ({total}) reached: {len(made)} tool call{'s' if len(made) != 1 else ''} made."
        )
        return Refusal("max_tool_calls", message, stops=True)
    if per_tool is not None and made.count(name) >= per_tool:
        message = (
            f"Tool '{name}' is exhausted: this run may call it at most {per_tool} time{'s' if per_tool != 1 else ''}. "
            "The tool did not run; go on without it."
        )
        return Refusal(f"tool_limits.{name}", message, stops=False)
    return None
