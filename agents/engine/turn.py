"""One model call of a unit: its gates, the request, the call and its accounting; and a reflection, the call that
critiques an attempt that ran out of turns."""

from __future__ import annotations

from agents.engine import react
from agents.engine.dispatch import Toolset
from agents.engine.gates import MODEL_GATES, ModelCheck, Proceed, run_gates
from agents.engine.prompts import reflection_messages, render_messages
from agents.engine.record import Halt, Unit
from agents.engine.state import RunState
from agents.engine.steps import ModelStep
from agents.engine.types import (
    CallStopped,
    HostStop,
    Model,
    ModelError,
    ModelReply,
    ModelRequest,
    StopReason,
    ToolSpec,
    Usage,
)

# A call that failed this close to the deadline was cut by it (the provider shrinks its timeouts to the time left).
DEADLINE_SLACK_S = 0.05


def tool_specs(toolset: Toolset, state: RunState) -> list[ToolSpec]:
    """What the model is told of the run's enabled tools."""
    return [ToolSpec(t.name, t.description, t.parameters) for n, t in toolset.tools.items() if n in state.tools]


def call_model(unit: Unit, model: Model, what: str, reflect: bool = False) -> tuple[ModelReply, int] | None:
    """The model gates, one model call and its accounting: (reply, latency ms), or None when the run stopped."""
    check = ModelCheck(unit, what, reflect)
    gate = run_gates(MODEL_GATES, check)
    if not isinstance(gate, Proceed):
        unit.halt(gate)
        return None
    try:
        reply = model.complete(request(check))
    except (HostStop, CallStopped, ModelError) as exc:
        unit.halt(failed(unit, exc, what))
        return None
    spent(unit.state, reply.usage, reply.cost_nanos)
    return reply, unit.ms_since(check.now)


def request(check: ModelCheck) -> ModelRequest:
    """The request of the call: the transcript (with the request for a critique when it reflects), the enabled
    tools, the time left, and the live sink's hooks when the host listens."""
    state, live, turn = check.state, check.ctx.live, check.state.turns + 1
    specs = tool_specs(check.ctx.toolset, state)
    messages = render_messages(state, specs)
    if check.reflect:  # tool specs still go along: some providers refuse a transcript with tool calls but no tools
        messages = reflection_messages(messages, state.attempt_turns)
    return ModelRequest(
        messages,
        specs,
        state.protocol,
        state.deadline - check.now,
        2 * len(state.history),
        state.temperature,
        state.max_output_tokens,
        prompt_cache=state.prompt_cache,
        on_text=(lambda text: live.text(turn, text)) if live is not None else None,
        on_retry=(lambda: live.retry(turn)) if live is not None else None,
        interrupted=check.ctx.interrupt,
    )


def spent(state: RunState, usage: Usage, cost_nanos: int | None = None) -> None:
    """Count a call that was made: a turn, its tokens and its price."""
    state.turns += 1
    state.prompt_tokens += usage.prompt_tokens
    state.completion_tokens += usage.completion_tokens
    if cost_nanos is not None:
        state.cost_nanos = (state.cost_nanos or 0) + cost_nanos


def failed(unit: Unit, exc: HostStop | CallStopped | ModelError, what: str) -> Halt:
    """How a call that raised ends the run. A host stop made no call; a streamed call cut short counts its usage so
    far (no partial step is kept); a failure close to the deadline was cut by it."""
    state = unit.state
    if isinstance(exc, HostStop):
        return Halt(exc.reason, str(exc))
    if isinstance(exc, CallStopped):
        spent(state, exc.usage)
        if exc.reason == StopReason.CANCELLED:
            return Halt(StopReason.CANCELLED)
        return Halt(StopReason.TIMEOUT, f"deadline reached during {what}")
    spent(state, Usage())
    message = str(exc) or "the model call failed"
    if state.deadline - unit.ctx.clock() <= DEADLINE_SLACK_S:  # the run's own deadline cut the call short
        return Halt(StopReason.TIMEOUT, f"deadline reached during {what}: {message}")
    return Halt(StopReason.MODEL_ERROR, message)


def reflect(unit: Unit, model: Model) -> None:
    """Ask the model to critique the attempt that ran out of turns; a new attempt starts with that critique."""
    called = call_model(unit, model, "reflecting", reflect=True)
    if called is None:
        return
    reply, latency = called
    state = unit.state
    critique = react.strip_think(reply.text or "")[0].strip() or "(no critique given)"
    state.reflections += 1
    state.attempt_start_turn = state.turns
    step = ModelStep(
        thought=f"Reflection on attempt {state.reflections}",
        text=critique,
        usage=reply.usage.as_dict(),
        reflection=True,
        model=reply.model,
        cost_nanos=reply.cost_nanos,
    )
    unit.add(step, latency)
