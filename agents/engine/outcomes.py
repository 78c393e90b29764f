"""What a model's reply means for its run: a final answer, tool calls, an unusable reply, the end of the run, or a
paused turn. The loop records the outcome; this module only reads replies."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agents.engine import react
from agents.engine.dispatch import Toolset, value_error
from agents.engine.state import RunState
from agents.engine.types import Finish, ModelReply, StopReason, ToolCall


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


@dataclass(frozen=True)
class Stop:
    """A reply that ends the run as it is (cut off, filtered, refused): none of its tool calls runs."""

    reason: StopReason
    message: str  # the error step
    error: str  # the run's `error`


@dataclass(frozen=True)
class Paused:
    """A turn the provider paused (Anthropic `pause_turn`): it goes back as it is and the model continues it."""


Outcome = Final | Act | Invalid | Stop | Paused


def classify(reply: ModelReply, state: RunState, toolset: Toolset) -> tuple[Outcome, str | None]:
    """Decide what a reply means: a final answer, tool calls, an unusable reply, or (a reply that did not end the
    ordinary way) the end of the run or a paused turn."""
    if reply.finish is not None:
        return unfinished(reply, state), reply.reasoning
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


def unfinished(reply: ModelReply, state: RunState) -> Stop | Paused:
    """What a reply that did not end the ordinary way means. Its tool calls never run: a cut-off call's arguments
    are incomplete, and a refused or filtered reply is not the model's decision to act."""
    if reply.finish == Finish.PAUSED:
        return Paused()
    if reply.finish == Finish.REFUSED:
        said = (reply.text or "").strip()
        message = f"The model refused: {said}" if said else "The model refused to answer."
        return Stop(StopReason.REFUSED, message, said or "the model refused to answer")
    if reply.finish == Finish.FILTERED:
        message = "The provider's content filter stopped the reply."
        return Stop(StopReason.CONTENT_FILTERED, message, message)
    cap = state.max_output_tokens
    limit = "the provider's default" if cap is None else f"max_output_tokens: {cap}"
    cut = f"; its {len(reply.tool_calls)} tool call(s) were cut off and not run" if reply.tool_calls else ""
    message = f"The reply was cut off at the output token limit ({limit}){cut}."
    return Stop(StopReason.OUTPUT_TRUNCATED, message, message)


def structured(outcome: Final, schema: dict[str, Any]) -> Final | Invalid:
    """A final answer checked against the run's output schema: its JSON text (a code fence removed), or Invalid with
    the validator's message (the model gets it back while turns remain)."""
    text = react.unfence(outcome.answer)
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
    name = react.resolve_name(parsed.action, state.tools)
    tool = toolset.tools.get(name)
    arguments = react.action_arguments(parsed.action_input or "", tool.parameters if tool else None)
    return Act((ToolCall(f"call_{len(state.steps)}", name, arguments),)), thought


def _with_id(call: ToolCall, step_index: int, position: int) -> ToolCall:
    return call if call.id else ToolCall(f"call_{step_index}_{position}", call.name, call.arguments)
