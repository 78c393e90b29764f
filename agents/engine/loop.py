"""The step function: `advance` does one unit of work; `decide` records a human decision and goes on.

Both are pure over the state they are given: they return a new state and the events (steps) they appended.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agents.engine import react
from agents.engine.dispatch import Toolset, run_tool, value_error
from agents.engine.pending import approval_for, decision_problem, is_sensitive, pending_actions, pending_calls
from agents.engine.prompts import reflection_messages, render_messages
from agents.engine.state import RunState
from agents.engine.types import (
    Clock,
    HostStop,
    Model,
    ModelError,
    ModelReply,
    ModelRequest,
    Status,
    StopReason,
    ToolCall,
    ToolSpec,
)


class EngineError(Exception):
    """The caller asked for something the run's status does not allow (a programming or client error)."""


@dataclass(frozen=True)
class Final:
    answer: str


@dataclass(frozen=True)
class Act:
    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class Invalid:
    problem: str
    output: bool = False  # a final answer that breaks the run's output schema (the model is shown the schema again)


Outcome = Final | Act | Invalid


# A call that failed this close to the deadline was cut by it (the provider shrinks its timeouts to the time left).
DEADLINE_SLACK_S = 0.05


Interrupt = Callable[[], bool]


class _Recorder:
    """Appends steps with gap-free indexes and collects the ones this unit produced."""

    def __init__(self, state: RunState, clock: Clock, interrupt: Interrupt | None = None) -> None:
        self.state, self.clock, self.interrupt = state, clock, interrupt
        self.events: list[dict[str, Any]] = []

    def interrupted(self) -> bool:
        """True (and the run stopped as cancelled) when the host says so."""
        if self.interrupt is not None and self.interrupt():
            self.stop(StopReason.CANCELLED)
            return True
        return False

    def add(self, kind: str, latency_ms: int = 0, **fields: Any) -> dict[str, Any]:
        step = {"index": len(self.state.steps), "kind": kind, "latency_ms": latency_ms, **fields}
        self.state.steps.append(step)
        self.events.append(step)
        return step

    def stop(self, reason: StopReason, message: str | None = None, output: str | None = None) -> None:
        if message is not None:
            self.add("error", message=message)
        self.state.finish(reason, output=output, error=message if reason == StopReason.MODEL_ERROR else None)


def tool_specs(toolset: Toolset, state: RunState) -> list[ToolSpec]:
    return [ToolSpec(t.name, t.description, t.parameters) for n, t in toolset.tools.items() if n in state.tools]


def advance(
    state: RunState,
    model: Model,
    toolset: Toolset,
    clock: Clock,
    interrupt: Interrupt | None = None,
    *,
    reply_only: bool = False,
) -> tuple[RunState, list[dict[str, Any]]]:
    """One unit: one model call and the tool calls it asked for, pausing before a sensitive one.

    `reply_only` stops after the model's reply is recorded, so the host can store it before any tool runs; the next
    `advance` then runs the calls it asked for (the rest of the same unit). A reply that asks only for instant tools
    (`instant_calls`) is the exception: they run at once, and the host stores the reply with their results.
    """
    if state.status == Status.DONE:
        raise EngineError("the run is done")
    if state.status == Status.AWAITING_APPROVAL:
        raise EngineError("the run is awaiting approval")
    state = state.copy()
    state.status = Status.RUNNING
    rec = _Recorder(state, clock, interrupt)
    if pending_calls(state):
        _run_pending(rec, toolset)
    else:
        _model_turn(rec, model, toolset, run_calls=not reply_only)
    _after_unit(rec)
    return state, rec.events


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
) -> tuple[RunState, list[dict[str, Any]]]:
    """Record decisions on pending calls, then run (or skip) them and the rest of the unit's calls.

    `decisions` is a list of `{"call_id", "approved", "arguments"?, "reason"?}` for calls of `pending_actions`, each at
    most once (recorded in call order); without it, `approved`/`arguments`/`reason` decide the first pending call.
    `reviewer` is None for a decision the system made (an expired approval). Calls left undecided pause the run
    again when their turn comes. `record_only` stops after the decisions are recorded, so the host can store them
    before any tool runs; then `resume_calls` runs the calls (the rest of the same unit).
    """
    if state.status != Status.AWAITING_APPROVAL:
        raise EngineError("the run is not awaiting approval")
    waiting = pending_actions(state)
    if decisions is None:
        if approved is None:
            raise EngineError("no decision given")
        decisions = [{"call_id": waiting[0]["call_id"], "approved": approved, "arguments": arguments, "reason": reason}]
    problem = decision_problem(state, decisions)
    if problem is not None:
        raise EngineError(problem)
    chosen = {d["call_id"]: d for d in decisions}
    state = state.copy()
    rec = _Recorder(state, clock, interrupt)
    for call in pending_calls(state):
        decision = chosen.get(call.id)
        if decision is None:
            continue
        edited = decision.get("arguments")
        rec.add(
            "approval",
            call_id=call.id,
            name=call.name,
            original_arguments=call.arguments,
            arguments=edited if (decision["approved"] and edited is not None) else call.arguments,
            approved=bool(decision["approved"]),
            reviewer=reviewer,
            reason=decision.get("reason"),
        )
    state.status = Status.RUNNING
    if not record_only:
        _run_pending(rec, toolset)
        _after_unit(rec)
    return state, rec.events


def resume_calls(
    state: RunState, toolset: Toolset, clock: Clock, interrupt: Interrupt | None = None
) -> tuple[RunState, list[dict[str, Any]]]:
    """Run the calls the last reply asked for that are still pending (after a stored decision), pausing before a
    sensitive one; then the between-unit budget checks."""
    if state.status != Status.RUNNING:
        raise EngineError("the run is not running")
    state = state.copy()
    rec = _Recorder(state, clock, interrupt)
    _run_pending(rec, toolset)
    _after_unit(rec)
    return state, rec.events


def cancel(state: RunState) -> RunState:
    """Stop the run now (a host decision)."""
    state = state.copy()
    state.finish(StopReason.CANCELLED)
    return state


def _model_turn(rec: _Recorder, model: Model, toolset: Toolset, run_calls: bool = True) -> None:
    state = rec.state
    if state.attempt_turns >= state.max_turns:
        if state.reflections < state.max_reflections:
            return _reflect(rec, model, toolset)
        return rec.stop(StopReason.MAX_TURNS)
    called = _call_model(rec, model, toolset, "the model call")
    if called is None:
        return None
    reply, latency = called
    outcome, thought = classify(reply, state, toolset)
    if isinstance(outcome, Final) and state.output_schema is not None:
        outcome = structured(outcome, state.output_schema)
    _record_reply(rec, reply, outcome, thought, latency)
    if isinstance(outcome, Act) and (run_calls or instant_calls(state, toolset, outcome.calls)):
        _run_pending(rec, toolset)


def instant_calls(state: RunState, toolset: Toolset, calls: Sequence[ToolCall]) -> bool:
    """Whether every call is to an `instant` tool (no side effects, microseconds, bounded by construction: the
    calculator) that needs no approval. Such calls run with their reply and are stored in the same commit, still
    before the next model call: storing a reply first protects a tool's side effect and the time a slow tool takes,
    neither at stake here, and the run saves a commit per turn."""
    for call in calls:
        tool = toolset.tools.get(call.name)
        if not getattr(tool, "instant", False) or is_sensitive(state, toolset, call.name):
            return False
    return bool(calls)


def _call_model(
    rec: _Recorder, model: Model, toolset: Toolset, what: str, reflect: bool = False
) -> tuple[ModelReply, int] | None:
    """Budget checks, one model call and its accounting: (reply, latency ms), or None when the run stopped."""
    state = rec.state
    if rec.interrupted():
        return None
    now = rec.clock()
    if now >= state.deadline:
        rec.stop(StopReason.TIMEOUT, f"deadline reached before {what}")
        return None
    specs = tool_specs(toolset, state)
    messages = render_messages(state, specs)
    if reflect:  # tool specs still go along: some providers refuse a transcript with tool calls but no tools
        messages = reflection_messages(messages, state.attempt_turns)
    try:
        request = ModelRequest(
            messages,
            specs,
            state.protocol,
            state.deadline - now,
            2 * len(state.history),
            state.temperature,
            state.max_output_tokens,
        )
        reply = model.complete(request)
    except HostStop as exc:
        rec.stop(exc.reason, str(exc))
        return None
    except ModelError as exc:
        state.turns += 1
        message = str(exc) or "the model call failed"
        if state.deadline - rec.clock() <= DEADLINE_SLACK_S:  # the run's own deadline cut the call short
            rec.stop(StopReason.TIMEOUT, f"deadline reached during {what}: {message}")
        else:
            rec.stop(StopReason.MODEL_ERROR, message)
        return None
    state.turns += 1
    state.prompt_tokens += reply.usage.prompt_tokens
    state.completion_tokens += reply.usage.completion_tokens
    return reply, _ms(rec.clock() - now)


def _record_reply(rec: _Recorder, reply: ModelReply, outcome: Outcome, thought: str | None, latency: int) -> None:
    calls = [c.as_dict() for c in outcome.calls] if isinstance(outcome, Act) else []
    final = outcome.answer if isinstance(outcome, Final) else None
    rec.add(
        "model",
        latency,
        thought=thought,
        text=reply.text or "",
        tool_calls=calls,
        final_answer=final,
        usage=reply.usage.as_dict(),
    )
    if isinstance(outcome, Final):
        rec.stop(StopReason.FINAL_ANSWER, output=outcome.answer)
    elif isinstance(outcome, Invalid) and outcome.output:
        rec.add("error", message=f"The final answer does not fit the output schema: {outcome.problem}", output=True)
    elif isinstance(outcome, Invalid):
        rec.add("error", message=f"Unusable reply: {outcome.problem}")


def classify(reply: ModelReply, state: RunState, toolset: Toolset) -> tuple[Outcome, str | None]:
    """Decide what a reply means: a final answer, tool calls, or an unusable reply."""
    if state.protocol == "react":
        return _classify_react(reply, state, toolset)
    text, think = react.strip_think(reply.text or "")
    thought = reply.reasoning or think
    if reply.tool_calls:
        calls = tuple(_with_id(c, len(state.steps), i) for i, c in enumerate(reply.tool_calls))
        return Act(calls), thought or (text.strip() or None)
    answer = react.parse(text).final_answer if react.has_final_answer(text) else text.strip()
    if answer:
        return Final(answer), thought
    return Invalid("the reply was empty"), thought


_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.S)


def structured(outcome: Final, schema: dict[str, Any]) -> Final | Invalid:
    """A final answer checked against the run's output schema: its JSON text (a code fence removed), or Invalid with
    the validator's message (the model gets it back while turns remain)."""
    text = outcome.answer.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return Invalid(f"it is not JSON ({exc.msg} at position {exc.pos})", output=True)
    problem = value_error(schema, value)
    if problem is not None:
        return Invalid(problem, output=True)
    return Final(text)


def _classify_react(reply: ModelReply, state: RunState, toolset: Toolset) -> tuple[Outcome, str | None]:
    parsed = react.parse(reply.text or "")
    thought = parsed.thought or reply.reasoning
    if parsed.final_answer is not None:
        if parsed.final_answer:
            return Final(parsed.final_answer), thought
        return Invalid("the Final Answer was empty"), thought
    if parsed.action is None:
        return Invalid(parsed.error or "no action"), thought
    tool = toolset.tools.get(parsed.action)
    arguments = react.action_arguments(parsed.action_input or "", tool.parameters if tool else None)
    return Act((ToolCall(f"call_{len(state.steps)}", parsed.action, arguments),)), thought


def _with_id(call: ToolCall, step_index: int, position: int) -> ToolCall:
    return call if call.id else ToolCall(f"call_{step_index}_{position}", call.name, call.arguments)


def _run_pending(rec: _Recorder, toolset: Toolset) -> None:
    """Run the unit's remaining calls in order; pause before a sensitive call that has no decision yet."""
    state = rec.state
    for call in pending_calls(state):
        # A cancellation check before an instant tool buys nothing: the unit's commit finds the run cancelled anyway
        # and stores nothing, and the tool left no trace. Others are checked (a query, unless just committed).
        if not getattr(toolset.tools.get(call.name), "instant", False) and rec.interrupted():
            return None
        now = rec.clock()
        if now >= state.deadline:
            return rec.stop(StopReason.TIMEOUT, "deadline reached before a tool call")
        approval = approval_for(state, call.id)
        if approval is None and is_sensitive(state, toolset, call.name):
            state.status = Status.AWAITING_APPROVAL
            return
        arguments = approval["arguments"] if approval else call.arguments
        result = run_tool(toolset, call.name, arguments, state.deadline - now, step=len(state.steps))
        rec.add(
            "tool",
            _ms(rec.clock() - now),
            call_id=call.id,
            name=call.name,
            arguments=arguments,
            output=result.output,
            is_error=result.is_error,
        )


def _reflect(rec: _Recorder, model: Model, toolset: Toolset) -> None:
    """Ask the model to critique the attempt that ran out of turns; a new attempt starts with that critique."""
    state = rec.state
    called = _call_model(rec, model, toolset, "reflecting", reflect=True)
    if called is None:
        return None
    reply, latency = called
    critique = react.strip_think(reply.text or "")[0].strip() or "(no critique given)"
    state.reflections += 1
    state.attempt_start_turn = state.turns
    rec.add(
        "model",
        latency,
        thought=f"Reflection on attempt {state.reflections}",
        text=critique,
        tool_calls=[],
        final_answer=None,
        usage=reply.usage.as_dict(),
        reflection=True,
    )


def _after_unit(rec: _Recorder) -> None:
    """Budgets that end a run between units: turns used up, deadline passed."""
    state = rec.state
    if state.status != Status.RUNNING or pending_calls(state):
        return
    if state.attempt_turns >= state.max_turns:
        if state.reflections < state.max_reflections and rec.clock() < state.deadline:
            return  # the next unit reflects and starts a new attempt
        rec.stop(StopReason.MAX_TURNS)
    elif rec.clock() >= state.deadline:
        rec.stop(StopReason.TIMEOUT, "deadline reached")


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))
