"""Stored rows <-> engine state: how a run row and its steps become a RunState, and a unit's result becomes rows.

Part of the services layer (services call it inside their own transactions); no transactions here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime

from agents.engine import RunState
from agents.models import Run, Step
from agents.runs import tree


def to_epoch(moment: datetime) -> float:
    return moment.timestamp()


def from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def step_events(run: Run) -> list[dict]:
    """The run's steps as the engine's events, in order: read as plain values, not model objects (a take reads them
    all, so building a Step object per step made each advance of a long step run cost more than the last)."""
    values = run.steps.order_by("index").values_list("index", "kind", "latency_ms", "data")
    return [{"index": index, "kind": kind, "latency_ms": latency, **data} for index, kind, latency, data in values]


def state_from_rows(run: Run, steps: list[dict]) -> RunState:
    """Rebuild the engine state from the run row and its steps (as events: `step_events`)."""
    return RunState(
        input=run.input,
        protocol=run.protocol,
        max_turns=run.max_turns,
        deadline=to_epoch(run.deadline),
        tools=list(run.tools) + [tree.tool_name(agent) for agent in run.subagents],
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
        steps=steps,
        history=list(run.history),
        instructions=run.instructions,
        temperature=run.temperature,
        max_output_tokens=run.max_output_tokens,
        output_schema=run.output_schema,
        input_parts=run.input_parts,
        max_total_tokens=run.max_total_tokens,
        max_tool_calls=run.max_tool_calls,
        tool_limits=dict(run.tool_limits or {}),
        cost_nanos=run.cost_nanos,
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
        "output_json": structured_output(state),
        "cost_nanos": state.cost_nanos,
    }


def structured_output(state: RunState):
    """The parsed final answer of a run with an output schema (the engine checked it is valid JSON), else None."""
    if state.output_schema is None or state.output is None:
        return None
    return json.loads(state.output)


STEP_OWN_COLUMNS = frozenset({"index", "kind", "latency_ms"})  # an event's other keys are the step's `data`


def step_data(event: dict) -> dict:
    return {k: v for k, v in event.items() if k not in STEP_OWN_COLUMNS}


def step_rows(run: Run, events: Iterable[dict]) -> list[Step]:
    return [
        Step(run=run, index=e["index"], kind=e["kind"], latency_ms=e["latency_ms"], data=step_data(e)) for e in events
    ]


def step_values(run_id, events: Iterable[dict], created_at: datetime) -> list[tuple]:
    """A unit's new steps as the values of `persist.STEP_COLUMNS`, for the hot path's own INSERT (no model objects)."""
    return [(run_id, e["index"], e["kind"], step_data(e), e["latency_ms"], created_at) for e in events]
