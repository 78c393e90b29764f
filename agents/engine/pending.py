"""What a paused run waits for: the calls that need a decision, and whether a set of decisions fits them."""

from __future__ import annotations

from typing import Any

from agents.engine.dispatch import Toolset
from agents.engine.state import RunState
from agents.engine.steps import ApprovalStep, StepKind
from agents.engine.types import Status, ToolCall


def decision_problem(state: RunState, decisions: list[dict[str, Any]]) -> str | None:
    """Why these decisions cannot be recorded (an unknown or repeated call id, none at all), or None."""
    if not decisions:
        return "no decision given"
    waiting = {a["call_id"] for a in pending_actions(state)}
    seen: set[str] = set()
    for decision in decisions:
        call_id = str(decision.get("call_id"))
        if call_id in seen:
            return f"call {call_id!r} is decided twice"
        if call_id not in waiting:
            return f"call {call_id!r} is not waiting for a decision"
        seen.add(call_id)
    return None


def pending_action(state: RunState) -> dict[str, Any] | None:
    """The first call awaiting a decision, as the API shows it."""
    actions = pending_actions(state)
    return actions[0] if actions else None


def pending_actions(state: RunState) -> list[dict[str, Any]]:
    """Every call of the current reply still waiting for a decision, in order: the call the run paused at, and each
    later sensitive call of the same reply that has no decision yet (approved calls wait for their turn to run)."""
    if state.status != Status.AWAITING_APPROVAL:
        return []
    calls = pending_calls(state)
    if not calls:
        return []
    decided = _decided_since_reply(state)
    first, rest = calls[0], calls[1:]
    waiting = [first] + [c for c in rest if c.name in state.sensitive_tools and c.id not in decided]
    return [{"call_id": c.id, "tool": c.name, "arguments": c.arguments} for c in waiting]


def _decided_since_reply(state: RunState) -> set[str]:
    """Call ids with a decision recorded since the last model reply."""
    decided: set[str] = set()
    for step in reversed(state.steps):
        if step["kind"] == StepKind.MODEL:
            break
        if step["kind"] == StepKind.APPROVAL:
            decided.add(step["call_id"])
    return decided


def pending_calls(state: RunState) -> list[ToolCall]:
    """Calls of the last model reply that have neither a tool step nor a denial yet."""
    resolved: set[str] = set()
    for step in reversed(state.steps):
        kind = step["kind"]
        if kind == StepKind.MODEL:
            calls = [ToolCall(c["id"], c["name"], c["arguments"]) for c in step["tool_calls"]]
            if step.get("final_answer") is not None:
                return []
            return [c for c in calls if c.id not in resolved]
        if kind == StepKind.TOOL or (kind == StepKind.APPROVAL and not step["approved"]):
            resolved.add(step["call_id"])
        if kind == StepKind.ERROR:
            return []
    return []


def is_sensitive(state: RunState, toolset: Toolset, name: str) -> bool:
    """Listed for this run, or marked sensitive by the tool itself (a run can widen the gate, never narrow it)."""
    return name in state.sensitive_tools or toolset.sensitive(name)


def approval_for(state: RunState, call_id: str) -> ApprovalStep | None:
    """The approving decision for this call, if one was recorded since the last reply."""
    for step in reversed(state.steps):
        if step["kind"] == StepKind.APPROVAL and step["call_id"] == call_id and step["approved"]:
            return ApprovalStep.from_data(step)
        if step["kind"] == StepKind.MODEL:
            return None
    return None
