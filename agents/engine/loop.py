"""The step function: `advance` does one unit of work; `decide` records a human decision and goes on.

Both are pure over the state they are given: they return a new state and the events (steps) they appended. A unit
decides, then does: a model call (agents.engine.turn) answers a reply, `plan.plan_reply` decides what it means, and
`execute.carry_out` records it and runs the calls it asked for, each through the gates of agents.engine.gates.
"""

from __future__ import annotations

from typing import Any

from agents.engine.context import Interrupt, RunContext
from agents.engine.dispatch import Toolset
from agents.engine.execute import carry_out, run_pending
from agents.engine.pending import decision_problem, pending_actions, pending_calls
from agents.engine.plan import plan_reply
from agents.engine.record import Halt, Unit
from agents.engine.state import RunState
from agents.engine.steps import ApprovalStep
from agents.engine.turn import call_model, reflect
from agents.engine.types import Clock, Guard, LiveSink, Model, Status, StopReason, ToolCall

Events = list[dict[str, Any]]


class EngineError(Exception):
    """The caller asked for something the run's status does not allow (a programming or client error)."""


def advance(
    state: RunState,
    model: Model,
    toolset: Toolset,
    clock: Clock,
    interrupt: Interrupt | None = None,
    *,
    reply_only: bool = False,
    live: LiveSink | None = None,
    guard: Guard | None = None,
) -> tuple[RunState, Events]:
    """One unit: one model call and the tool calls it asked for, pausing before a sensitive one.

    `reply_only` stops after the model's reply is recorded, so the host can store it before any tool runs; the next
    `advance` then runs the calls it asked for (the rest of the same unit). A reply that asks only for instant tools
    (`plan.instant_calls`) is the exception: they run at once, and the host stores the reply with their results.
    `live` hears the reply as it is written and each tool call as it starts and ends (nothing of it is stored).
    `guard`: the run's guardrails (checked on the input, a final answer, each call's arguments and result)."""
    if state.status == Status.DONE:
        raise EngineError("the run is done")
    if state.status == Status.AWAITING_APPROVAL:
        raise EngineError("the run is awaiting approval")
    unit = _start(state, RunContext(toolset, clock, interrupt, live, guard))
    unit.state.status = Status.RUNNING
    if pending_calls(unit.state):
        run_pending(unit)
    else:
        _model_turn(unit, model, run_calls=not reply_only)
    _after_unit(unit)
    return unit.state, unit.events


def decide(
    state: RunState,
    toolset: Toolset,
    clock: Clock,
    *,
    approved: bool | None = None,
    reviewer: str | None = None,
    arguments: dict[str, Any] | None = None,
    reason: str | None = None,
    decisions: list[dict[str, Any]] | None = None,
    interrupt: Interrupt | None = None,
    record_only: bool = False,
    live: LiveSink | None = None,
    guard: Guard | None = None,
) -> tuple[RunState, Events]:
    """Record decisions on pending calls, then run (or skip) them and the rest of the unit's calls.

    `decisions`: `{"call_id", "approved", "arguments"?, "reason"?}` for calls of `pending_actions`, each at most once
    (recorded in call order); without it, `approved`/`arguments`/`reason` decide the first pending call. `reviewer`
    is None for a decision the system made (an expired approval). Calls left undecided pause the run again when
    their turn comes. `record_only` stops once the decisions are recorded, so the host can store them before any
    tool runs; `resume_calls` then runs the calls (the rest of the same unit)."""
    chosen = _chosen(state, decisions, approved, arguments, reason)
    unit = _start(state, RunContext(toolset, clock, interrupt, live, guard))
    _record_decisions(unit, chosen, reviewer)
    unit.state.status = Status.RUNNING
    if not record_only:
        run_pending(unit)
        _after_unit(unit)
    return unit.state, unit.events


def resume_calls(
    state: RunState,
    toolset: Toolset,
    clock: Clock,
    interrupt: Interrupt | None = None,
    live: LiveSink | None = None,
    guard: Guard | None = None,
) -> tuple[RunState, Events]:
    """Run the calls the last reply asked for that are still pending (after a stored decision), pausing before a
    sensitive one; then the between-unit budget checks."""
    if state.status != Status.RUNNING:
        raise EngineError("the run is not running")
    unit = _start(state, RunContext(toolset, clock, interrupt, live, guard))
    run_pending(unit)
    _after_unit(unit)
    return unit.state, unit.events


def cancel(state: RunState) -> RunState:
    """Stop the run now (a host decision)."""
    state = state.copy()
    state.finish(StopReason.CANCELLED)
    return state


def _start(state: RunState, ctx: RunContext) -> Unit:
    """A unit on a copy of the state, which no longer waits for anything."""
    state = state.copy()
    state.waiting = None
    return Unit(state, ctx)


def _chosen(
    state: RunState,
    decisions: list[dict[str, Any]] | None,
    approved: bool | None,
    arguments: dict[str, Any] | None,
    reason: str | None,
) -> dict[str, dict[str, Any]]:
    """The decisions `decide` was given, by call id, once they fit the calls waiting for one. Given as arguments,
    the one decision is on the first call waiting."""
    if state.status != Status.AWAITING_APPROVAL:
        raise EngineError("the run is not awaiting approval")
    if decisions is None:
        if approved is None:
            raise EngineError("no decision given")
        call_id = pending_actions(state)[0]["call_id"]
        decisions = [{"call_id": call_id, "approved": approved, "arguments": arguments, "reason": reason}]
    problem = decision_problem(state, decisions)
    if problem is not None:
        raise EngineError(problem)
    return {d["call_id"]: d for d in decisions}


def _record_decisions(unit: Unit, chosen: dict[str, dict[str, Any]], reviewer: str | None) -> None:
    """An approval step for each pending call that has a decision, in call order."""
    for call in pending_calls(unit.state):
        decision = chosen.get(call.id)
        if decision is not None:
            unit.add(_approval(call, decision, reviewer))


def _approval(call: ToolCall, decision: dict[str, Any], reviewer: str | None) -> ApprovalStep:
    """A decision as its step: an approval with edited arguments runs with them."""
    approved, edited = bool(decision["approved"]), decision.get("arguments")
    runs_with = edited if (approved and edited is not None) else call.arguments
    return ApprovalStep(call.id, call.name, call.arguments, runs_with, approved, reviewer, decision.get("reason"))


def _model_turn(unit: Unit, model: Model, run_calls: bool = True) -> None:
    """A model call, then what its reply means carried out; a reflection instead when the attempt is out of turns
    and reflections remain."""
    state = unit.state
    if state.attempt_turns >= state.max_turns:
        if state.reflections < state.max_reflections:
            return reflect(unit, model)
        return unit.halt(Halt(StopReason.MAX_TURNS))
    called = call_model(unit, model, "the model call")
    if called is None:
        return None
    reply, latency = called
    carry_out(unit, plan_reply(reply, latency, state, unit.ctx.toolset, unit.ctx.guard), run_calls)
    return None


def _after_unit(unit: Unit) -> None:
    """Budgets that end a run between units: turns used up, deadline passed."""
    state = unit.state
    if state.status != Status.RUNNING or pending_calls(state):
        return
    if state.attempt_turns >= state.max_turns:
        if state.reflections < state.max_reflections and unit.ctx.clock() < state.deadline:
            return  # the next unit reflects and starts a new attempt
        unit.halt(Halt(StopReason.MAX_TURNS))
    elif unit.ctx.clock() >= state.deadline:
        unit.halt(Halt(StopReason.TIMEOUT, "deadline reached"))
