"""Deciding what a model reply means for its run, before anything is done about it.

`plan_reply` is a pure function of a reply and the run's state: it answers a `Plan`, the model step to record and
what comes next (`Next`): a final answer (which the answer gates still check), tool calls to run, a correction the
model is shown, the end of the run, or a paused turn the model continues. `execute.carry_out` does what it says.
Plans are values, never changed once built (slotted rather than frozen: a frozen dataclass is slow to build).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from agents.engine.dispatch import Toolset
from agents.engine.outcomes import Act, Final, Invalid, Outcome, Stop, classify, structured
from agents.engine.pending import is_sensitive
from agents.engine.record import Correct, Halt
from agents.engine.state import RunState
from agents.engine.steps import ErrorStep, ModelStep
from agents.engine.types import Guard, ModelReply, ToolCall


@dataclass(slots=True)
class FinalAnswer:
    """The reply answers the task (the answer gates decide whether the run accepts it)."""

    answer: str


@dataclass(slots=True)
class RunCalls:
    """The reply asks for tool calls. `instant`: every one is to an instant tool that needs no approval, so they run
    with the reply even when the host stores a reply before its calls run."""

    calls: tuple[ToolCall, ...]
    instant: bool


@dataclass(frozen=True)
class Resend:
    """A turn the provider paused: it goes back as it is, and the model continues it in the next call."""


Next = FinalAnswer | RunCalls | Correct | Halt | Resend


@dataclass(slots=True)
class Plan:
    """A reply's model step (its latency with it) and what the run does next."""

    step: ModelStep
    latency_ms: int
    next: Next


def plan_reply(
    reply: ModelReply, latency_ms: int, state: RunState, toolset: Toolset, guard: Guard | None = None
) -> Plan:
    """What a reply means: classified, a final answer checked against the output schema, and what the output
    guardrails redact (PII) replaced in its text, thought and answer (`Guard.redact` does no I/O)."""
    outcome, thought = classify(reply, state, toolset)
    if isinstance(outcome, Final) and state.output_schema is not None:
        outcome = structured(outcome, state.output_schema)
    if guard is not None:
        reply, outcome, thought = redacted(guard, reply, outcome, thought)
    return Plan(model_step(reply, outcome, thought), latency_ms, next_step(outcome, state, toolset))


def redacted(
    guard: Guard, reply: ModelReply, outcome: Outcome, thought: str | None
) -> tuple[ModelReply, Outcome, str | None]:
    """The reply as the record keeps it: what the output guardrails redact replaced in its text, its thought and its
    final answer (the model, the logs and the client see only that)."""
    text = guard.redact("output", reply.text or "")
    if thought is not None:
        thought = guard.redact("output", thought)
    if isinstance(outcome, Final):
        outcome = Final(guard.redact("output", outcome.answer))
    if text != (reply.text or ""):
        reply = dataclasses.replace(reply, text=text)
    return reply, outcome, thought


def model_step(reply: ModelReply, outcome: Outcome, thought: str | None) -> ModelStep:
    """The model step of a reply: its optional fields say how an unusual reply ended (`finish`), the provider's
    blocks to send back unchanged, that the thought is the model's own reasoning output (`thinking`), the fallback
    model that answered and the call's price."""
    return ModelStep(
        thought=thought,
        text=reply.text or "",
        tool_calls=outcome.calls if isinstance(outcome, Act) else (),
        final_answer=outcome.answer if isinstance(outcome, Final) else None,
        usage=reply.usage.as_dict(),
        finish=reply.finish.value if reply.finish is not None else None,
        blocks=reply.blocks,
        thinking=thought is not None and thought is reply.reasoning,
        model=reply.model,
        cost_nanos=reply.cost_nanos,
    )


def next_step(outcome: Outcome, state: RunState, toolset: Toolset) -> Next:
    """What the run does about a reply's outcome."""
    if isinstance(outcome, Final):
        return FinalAnswer(outcome.answer)
    if isinstance(outcome, Act):
        return RunCalls(outcome.calls, instant_calls(state, toolset, outcome.calls))
    if isinstance(outcome, Stop):
        return Halt(outcome.reason, outcome.message, error=outcome.error)
    if isinstance(outcome, Invalid) and outcome.output:
        message = f"The final answer does not fit the output schema: {outcome.problem}"
        return Correct(ErrorStep(message, output=True))
    if isinstance(outcome, Invalid):
        return Correct(ErrorStep(f"Unusable reply: {outcome.problem}"))
    return Resend()  # Paused: the turn goes back as it is


def instant_calls(state: RunState, toolset: Toolset, calls: Sequence[ToolCall]) -> bool:
    """Whether every call is to a tool that declares itself `instant` (no side effects, microseconds, bounded by
    construction: the calculator) and needs no approval. Such calls run with their reply and are stored in the same
    commit, still before the next model call: storing a reply first protects a tool's side effect and the time a
    slow tool takes, neither at stake here, and the run saves a commit per turn."""
    for call in calls:
        if not toolset.instant(call.name) or is_sensitive(state, toolset, call.name):
            return False
    return bool(calls)
