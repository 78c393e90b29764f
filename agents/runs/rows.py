"""Stored rows <-> engine state: how a run row and its steps become a RunState, and a unit's result becomes rows.

Part of the services layer (services call it inside their own transactions); no transactions here.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import fields
from datetime import UTC, datetime

from agents.engine import RunState
from agents.models import Run, Step
from agents.runconfig.config import RunConfig
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


# The run's options the engine's state holds, under the same names.
_STATE_FIELDS = frozenset(f.name for f in fields(RunState))


def engine_options(config: RunConfig) -> dict:
    """The part of a run's config the engine reads, as RunState takes it (fresh lists and objects): its tools are
    the run's with its sub-agents' added."""
    values = {name: value for name, value in config.columns().items() if name in _STATE_FIELDS}
    values["tools"] += [tree.tool_name(agent) for agent in config.agents]
    return values


def state_from_rows(run: Run, steps: list[dict]) -> RunState:
    """Rebuild the engine state from the run row (its config, counters and record) and its steps (as events:
    `step_events`)."""
    return RunState(
        **engine_options(run.config),
        input=run.input,
        deadline=to_epoch(run.deadline),
        status=run.status,
        stop_reason=run.stop_reason,
        output=run.output,
        error=run.error,
        turns=run.turns,
        reflections=run.reflections,
        attempt_start_turn=run.attempt_start_turn,
        prompt_tokens=run.prompt_tokens,
        completion_tokens=run.completion_tokens,
        steps=steps,
        history=list(run.history),
        input_parts=run.input_parts,
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
