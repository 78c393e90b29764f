"""The step function: `advance` does one unit of work; `decide` records a human decision and goes on.

Both are pure over the state they are given: they return a new state and the events (steps) they appended.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from agents.engine import limits, react
from agents.engine.dispatch import Toolset, raw_arguments, run_tool
from agents.engine.outcomes import Act, Final, Invalid, Outcome, Stop, classify, structured
from agents.engine.pending import approval_for, decision_problem, is_sensitive, pending_actions, pending_calls
from agents.engine.prompts import reflection_messages, render_messages
from agents.engine.state import RunState
from agents.engine.types import (
    CallStopped,
    Clock,
    Guard,
    HostStop,
    LiveSink,
    Model,
    ModelError,
    ModelReply,
    ModelRequest,
    Status,
    StopReason,
    ToolCall,
    ToolSpec,
    ToolWaits,
    Verdict,
)
from agents.engine.wrapping import prepare


class EngineError(Exception):
    """The caller asked for something the run's status does not allow (a programming or client error)."""


# A call that failed this close to the deadline was cut by it (the provider shrinks its timeouts to the time left).
DEADLINE_SLACK_S = 0.05


Interrupt = Callable[[], bool]


class _Recorder:
    """Appends steps with gap-free indexes and collects the ones this unit produced."""

    def __init__(
        self,
        state: RunState,
        clock: Clock,
        interrupt: Interrupt | None = None,
        live: LiveSink | None = None,
        guard: Guard | None = None,
    ) -> None:
        self.state, self.clock, self.interrupt, self.live, self.guard = state, clock, interrupt, live, guard
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

    def stop(
        self,
        reason: StopReason,
        message: str | None = None,
        output: str | None = None,
        error: str | None = None,
        **fields: Any,
    ) -> None:
        if message is not None:
            self.add("error", message=message, **fields)
        if error is None and reason in (StopReason.MODEL_ERROR, StopReason.USAGE_LIMIT, StopReason.GUARDRAIL):
            error = message
        self.state.finish(reason, output=output, error=error)


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
    live: LiveSink | None = None,
    guard: Guard | None = None,
) -> tuple[RunState, list[dict[str, Any]]]:
    """One unit: one model call and the tool calls it asked for, pausing before a sensitive one.

    `reply_only` stops after the model's reply is recorded, so the host can store it before any tool runs; the next
    `advance` then runs the calls it asked for (the rest of the same unit). A reply that asks only for instant tools
    (`instant_calls`) is the exception: they run at once, and the host stores the reply with their results.
    `live` hears the reply as it is written and each tool call as it starts and ends (nothing of it is stored).
    `guard`: the run's guardrails (checked on the input, a final answer, each call's arguments and result).
    """
    if state.status == Status.DONE:
        raise EngineError("the run is done")
    if state.status == Status.AWAITING_APPROVAL:
        raise EngineError("the run is awaiting approval")
    state = state.copy()
    state.status, state.waiting = Status.RUNNING, None
    rec = _Recorder(state, clock, interrupt, live, guard)
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
    live: LiveSink | None = None,
    guard: Guard | None = None,
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
    state.waiting = None
    rec = _Recorder(state, clock, interrupt, live, guard)
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
    state: RunState,
    toolset: Toolset,
    clock: Clock,
    interrupt: Interrupt | None = None,
    live: LiveSink | None = None,
    guard: Guard | None = None,
) -> tuple[RunState, list[dict[str, Any]]]:
    """Run the calls the last reply asked for that are still pending (after a stored decision), pausing before a
    sensitive one; then the between-unit budget checks."""
    if state.status != Status.RUNNING:
        raise EngineError("the run is not running")
    state = state.copy()
    state.waiting = None
    rec = _Recorder(state, clock, interrupt, live, guard)
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
    if state.turns == 0 and rec.guard is not None:  # the input, before the first model call (a trip always stops)
        verdict = rec.guard.check("input", state.input)
        if verdict is not None:
            return _stop_for(rec, verdict, "input")  # an input trip always stops: there is nothing to correct
    called = _call_model(rec, model, toolset, "the model call")
    if called is None:
        return None
    reply, latency = called
    outcome, thought = classify(reply, state, toolset)
    if isinstance(outcome, Final) and state.output_schema is not None:
        outcome = structured(outcome, state.output_schema)
    tripped = None
    if rec.guard is not None:
        reply, outcome, thought = _redacted(rec.guard, reply, outcome, thought)
        if isinstance(outcome, Final):  # before the final answer is accepted
            tripped = rec.guard.check("output", outcome.answer)
    _record_reply(rec, reply, outcome, thought, latency, tripped)
    if tripped is None and isinstance(outcome, Act) and (run_calls or instant_calls(state, toolset, outcome.calls)):
        _run_pending(rec, toolset)


def _redacted(
    guard: Guard, reply: ModelReply, outcome: Outcome, thought: str | None
) -> tuple[ModelReply, Outcome, str | None]:
    """The reply as the record keeps it: what the output guardrails redact (PII) replaced in its text, its thought
    and its final answer (the model, the logs and the client see only that)."""
    text = guard.redact("output", reply.text or "")
    if thought is not None:
        thought = guard.redact("output", thought)
    if isinstance(outcome, Final):
        outcome = Final(guard.redact("output", outcome.answer))
    if text != (reply.text or ""):
        reply = dataclasses.replace(reply, text=text)
    return reply, outcome, thought


def _corrected_before(state: RunState, guardrail: str) -> bool:
    return any(step.get("guardrail") == guardrail and step.get("correction") for step in state.steps)


def _corrects(state: RunState, verdict: Verdict) -> bool:
    """Whether a tripped guardrail lets the run go on, the model told why: its action is "correct" and it has not
    corrected this run before (once per guardrail and run: a second trip stops it)."""
    return verdict.action == "correct" and not _corrected_before(state, verdict.guardrail)


def _stop_for(rec: _Recorder, verdict: Verdict, stage: str) -> None:
    """The run stops with stop reason `guardrail` and an error step naming the guardrail, the stage and why."""
    message = f"Guardrail '{verdict.guardrail}' tripped on the {stage.replace('_', ' ')}: {verdict.reason}"
    rec.stop(StopReason.GUARDRAIL, message, guardrail=verdict.guardrail, stage=stage)


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
    refusal = limits.before_model_call(state)
    if refusal is not None:
        rec.stop(StopReason.USAGE_LIMIT, refusal.message, limit=refusal.limit)
        return None
    specs = tool_specs(toolset, state)
    messages = render_messages(state, specs)
    if reflect:  # tool specs still go along: some providers refuse a transcript with tool calls but no tools
        messages = reflection_messages(messages, state.attempt_turns)
    live, turn = rec.live, state.turns + 1
    try:
        request = ModelRequest(
            messages,
            specs,
            state.protocol,
            state.deadline - now,
            2 * len(state.history),
            state.temperature,
            state.max_output_tokens,
            on_text=(lambda text: live.text(turn, text)) if live is not None else None,
            on_retry=(lambda: live.retry(turn)) if live is not None else None,
            interrupted=rec.interrupt,
        )
        reply = model.complete(request)
    except HostStop as exc:
        rec.stop(exc.reason, str(exc))
        return None
    except CallStopped as exc:  # a streamed call cut short: its usage so far counts, no partial step is kept
        state.turns += 1
        state.prompt_tokens += exc.usage.prompt_tokens
        state.completion_tokens += exc.usage.completion_tokens
        if exc.reason == StopReason.CANCELLED:
            rec.stop(StopReason.CANCELLED)
        else:
            rec.stop(StopReason.TIMEOUT, f"deadline reached during {what}")
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
    if reply.cost_nanos is not None:
        state.cost_nanos = (state.cost_nanos or 0) + reply.cost_nanos
    return reply, _ms(rec.clock() - now)


def _record_reply(
    rec: _Recorder,
    reply: ModelReply,
    outcome: Outcome,
    thought: str | None,
    latency: int,
    tripped: Verdict | None = None,
) -> None:
    """Store the reply as a model step, then what its outcome means; `tripped`: an output guardrail refused its final
    answer (kept in the step's text, not as the final answer)."""
    calls = [c.as_dict() for c in outcome.calls] if isinstance(outcome, Act) else []
    final = outcome.answer if isinstance(outcome, Final) and tripped is None else None
    unusual = reply.finish or reply.blocks or reply.reasoning or reply.model or reply.cost_nanos is not None
    extra = _unusual_fields(reply, thought) if unusual else {}
    rec.add(
        "model",
        latency,
        thought=thought,
        text=reply.text or "",
        tool_calls=calls,
        final_answer=final,
        usage=reply.usage.as_dict(),
        **extra,
    )
    if tripped is not None:
        if _corrects(rec.state, tripped):  # the model is told why, and answers again
            rec.add("error", message=f"Guardrail '{tripped.guardrail}': {tripped.reason}", **_correction(tripped))
        else:
            _stop_for(rec, tripped, "output")
    elif isinstance(outcome, Final):
        rec.stop(StopReason.FINAL_ANSWER, output=outcome.answer)
    elif isinstance(outcome, Stop):
        rec.stop(outcome.reason, outcome.message, error=outcome.error)
    elif isinstance(outcome, Invalid) and outcome.output:
        rec.add("error", message=f"The final answer does not fit the output schema: {outcome.problem}", output=True)
    elif isinstance(outcome, Invalid):
        rec.add("error", message=f"Unusable reply: {outcome.problem}")


def _unusual_fields(reply: ModelReply, thought: str | None) -> dict[str, Any]:
    """The model step's optional fields: `finish` (how an unusual reply ended), `blocks` (the provider's content
    blocks to send back unchanged) and `thinking` (the thought is the model's own reasoning output)."""
    extra: dict[str, Any] = {}
    if reply.finish is not None:
        extra["finish"] = reply.finish.value
    if reply.blocks:
        extra["blocks"] = list(reply.blocks)
    if thought is not None and thought is reply.reasoning:
        extra["thinking"] = True
    if reply.model is not None:
        extra["model"] = reply.model
    if reply.cost_nanos is not None:
        extra["cost_nanos"] = reply.cost_nanos
    return extra


def _correction(verdict: Verdict) -> dict[str, Any]:
    return {"guardrail": verdict.guardrail, "correction": True}


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
        refusal = limits.before_tool_call(state, call.name)  # before a human is asked: a refused call is never run
        if refusal is not None and refusal.stops:
            return rec.stop(StopReason.USAGE_LIMIT, refusal.message, limit=refusal.limit)
        if refusal is not None:
            note = prepare(refusal.message, toolset.max_output_chars)
            rec.add("tool", call_id=call.id, name=call.name, arguments=call.arguments, output=note, is_error=True,
                    limit=refusal.limit)  # fmt: skip
            continue
        if rec.guard is not None and raw_arguments(call.arguments) is None:
            checked = approval["arguments"] if approval else call.arguments
            verdict = rec.guard.check("tool_arguments", tool=call.name, arguments=checked)
            if verdict is not None:
                if not _corrects(state, verdict):
                    return _stop_for(rec, verdict, "tool_arguments")
                note = prepare(f"Guardrail '{verdict.guardrail}' refused these arguments: {verdict.reason}. The tool "
                               "did not run; call it again with arguments that keep to that rule, or go on without "
                               "it.", toolset.max_output_chars)  # fmt: skip
                rec.add("tool", call_id=call.id, name=call.name, arguments=checked, output=note, is_error=True,
                        **_correction(verdict))  # fmt: skip
                continue
        # A call whose arguments are not a JSON object cannot run: the model is told so at once, without a reviewer.
        if approval is None and is_sensitive(state, toolset, call.name) and raw_arguments(call.arguments) is None:
            state.status = Status.AWAITING_APPROVAL
            return
        arguments = approval["arguments"] if approval else call.arguments
        if rec.live is not None:
            rec.live.tool_started(call.id, call.name, arguments)
        try:
            result = run_tool(
                toolset, call.name, arguments, state.deadline - now, step=len(state.steps), call_id=call.id
            )
        except ToolWaits as exc:  # the call stays pending; the host takes the run up again when its result is there
            state.waiting = exc.ref
            return None
        latency = _ms(rec.clock() - now)
        if rec.live is not None:
            rec.live.tool_finished(call.id, call.name, result.is_error, latency)
        delivery = _delivery(toolset, call.name)
        output, is_error, verdict = result.output, result.is_error, None
        if rec.guard is not None and not is_error:  # what the model (and the record) may see of the result
            output = rec.guard.redact("tool_output", output)
            verdict = rec.guard.check("tool_output", output, tool=call.name)
        if verdict is None:
            rec.add("tool", latency, call_id=call.id, name=call.name, arguments=arguments, output=output,
                    is_error=is_error, **delivery)  # fmt: skip
            continue
        goes_on = _corrects(state, verdict)
        note = prepare(f"Guardrail '{verdict.guardrail}' withheld this tool's output: {verdict.reason}.",
                       toolset.max_output_chars)  # fmt: skip
        marks = _correction(verdict) if goes_on else {"guardrail": verdict.guardrail}
        rec.add("tool", latency, call_id=call.id, name=call.name, arguments=arguments, output=note, is_error=True,
                withheld=True, **marks, **delivery)  # fmt: skip
        if not goes_on:  # the tool ran: its output is withheld either way
            return _stop_for(rec, verdict, "tool_output")


def _delivery(toolset: Toolset, name: str) -> dict[str, Any]:
    """`{"delivery": …}` for a tool that says how its calls are delivered ("at-least-once": an MCP server that is not
    known to honour the call's idempotency key, so a resumed run may have run the call twice), else nothing."""
    delivery = getattr(toolset.tools.get(name), "delivery", None)
    return {"delivery": delivery} if isinstance(delivery, str) and delivery else {}


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
        **({"cost_nanos": reply.cost_nanos} if reply.cost_nanos is not None else {}),
        **({"model": reply.model} if reply.model is not None else {}),
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
