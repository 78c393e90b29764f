"""Carrying out what was decided: a reply's plan (agents.engine.plan), and the calls it asked for, each through its
gates (agents.engine.gates) in order."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from agents.engine.dispatch import run_tool
from agents.engine.gates import (
    ANSWER_GATES,
    TOOL_GATES,
    AnswerCall,
    AnswerCheck,
    CallCheck,
    Pause,
    Proceed,
    run_gates,
    tool_output,
)
from agents.engine.pending import approval_for, pending_calls
from agents.engine.plan import FinalAnswer, Plan, RunCalls
from agents.engine.record import Correct, Halt, Unit
from agents.engine.types import Status, ToolCall, ToolWaits


@dataclass(frozen=True)
class Wait:
    """The call's result is not ready (the tool raised ToolWaits): the call stays pending, the unit ends, and the
    run waits for `ref` (`RunState.waiting`)."""

    ref: str


CallOutcome = Halt | AnswerCall | Pause | Wait


def carry_out(unit: Unit, plan: Plan, run_calls: bool = True) -> None:
    """Record a reply's model step and do what its plan says. With `run_calls` False the calls it asked for wait
    for the next unit (the host stores the reply first), unless they are all instant."""
    then = plan.next
    if isinstance(then, FinalAnswer):
        return _final_answer(unit, plan, then.answer)
    unit.add(plan.step, plan.latency_ms)
    if isinstance(then, Halt):
        unit.halt(then)
    elif isinstance(then, Correct):
        unit.add(then.step)
    elif isinstance(then, RunCalls) and (run_calls or then.instant):
        run_pending(unit)
    return None


def _final_answer(unit: Unit, plan: Plan, answer: str) -> None:
    """A final answer through the answer gates: accepted, it ends the run; refused, the model step keeps it only in
    its text, and the model is told why or the run stops."""
    outcome = run_gates(ANSWER_GATES, AnswerCheck(unit, answer))
    if isinstance(outcome, Proceed):
        unit.add(plan.step, plan.latency_ms)
        return unit.answer(answer)
    unit.add(dataclasses.replace(plan.step, final_answer=None), plan.latency_ms)
    if isinstance(outcome, Correct):
        unit.add(outcome.step)
    else:
        unit.halt(outcome)
    return None


def run_pending(unit: Unit) -> None:
    """Run the unit's remaining calls in order, each through its gates; stop at the first whose outcome ends the
    unit (the run stops, pauses for a decision, or waits for a result)."""
    for call in pending_calls(unit.state):
        if not apply_outcome(unit, call_outcome(unit, call)):
            return


def call_outcome(unit: Unit, call: ToolCall) -> CallOutcome:
    """The tool gates of a call, then (when they all let it through) the call itself."""
    check = CallCheck(unit, call, approval_for(unit.state, call.id))
    outcome = run_gates(TOOL_GATES, check)
    return invoke(check) if isinstance(outcome, Proceed) else outcome


def invoke(check: CallCheck) -> AnswerCall | Wait:
    """Run the call's tool, the live sink told as it starts and ends; its result as the output gate lets it be."""
    ctx, state, call = check.ctx, check.state, check.call
    arguments = check.arguments
    if ctx.live is not None:
        ctx.live.tool_started(call.id, call.name, arguments)
    timeout = state.deadline - check.now
    try:
        result = run_tool(ctx.toolset, call.name, arguments, timeout, step=len(state.steps), call_id=call.id)
    except ToolWaits as exc:  # the call stays pending; the host takes the run up again when its result is there
        return Wait(exc.ref)
    latency = check.unit.ms_since(check.now)
    if ctx.live is not None:
        ctx.live.tool_finished(call.id, call.name, result.is_error, latency)
    return tool_output(check, result, latency)


def apply_outcome(unit: Unit, outcome: CallOutcome) -> bool:
    """Do what a call's outcome says; whether the unit goes on to its next call."""
    if isinstance(outcome, AnswerCall):
        unit.add(outcome.step, outcome.latency_ms)
        if outcome.then is None:
            return True
        unit.halt(outcome.then)
    elif isinstance(outcome, Halt):
        unit.halt(outcome)
    elif isinstance(outcome, Pause):
        unit.state.status = Status.AWAITING_APPROVAL
    else:
        unit.state.waiting = outcome.ref
    return False
