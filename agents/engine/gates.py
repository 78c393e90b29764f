"""The checks a call passes before it is made, each a small function answering a typed outcome, in order.

- Before a model call, `MODEL_GATES`: the input guardrail (the first call only), a cancel, the deadline, the run's
  token limit.
- Before a tool call, `TOOL_GATES`: a cancel, the deadline, the run's call limit, the tool's own limit (checked
  before a human is asked: a refused call is never run), the arguments guardrail, then the approval of a sensitive
  call that has no decision yet.
- Before a final answer is accepted, `ANSWER_GATES`: the output guardrail.
- After a tool ran, `tool_output`: what the model and the record may see of its result.

A gate answers `PROCEED`, or what happens instead: the run stops (`Halt`), the call is answered in its place
(`AnswerCall`), the run waits for a human decision (`Pause`), or the model is told what to fix (`Correct`).
`run_gates` asks them in order and answers the first outcome that is not `PROCEED`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agents.engine import limits
from agents.engine.dispatch import ToolResult, raw_arguments
from agents.engine.pending import is_sensitive
from agents.engine.record import Correct, Halt, Unit
from agents.engine.state import RunState
from agents.engine.steps import ApprovalStep, ErrorStep, ToolStep
from agents.engine.types import StopReason, ToolCall, Verdict
from agents.engine.wrapping import prepare


@dataclass(frozen=True)
class Proceed:
    """Nothing in this gate stops the call."""


PROCEED = Proceed()


@dataclass(slots=True)
class AnswerCall:
    """The call is answered by this tool step (the tool did not run, or its output is withheld); then the unit goes
    on to its next call or, with `then`, the run stops."""

    step: ToolStep
    latency_ms: int = 0
    then: Halt | None = None


@dataclass(frozen=True)
class Pause:
    """The call waits for a human decision: the run awaits approval."""


PAUSE = Pause()


class Check:
    """What the gates of one call read. `now` is read from the clock when a gate first needs it (after the cancel
    check, which may be a query) and is the call's start from then on."""

    __slots__ = ("_now", "ctx", "state", "unit")

    def __init__(self, unit: Unit) -> None:
        self.unit, self.state, self.ctx = unit, unit.state, unit.ctx
        self._now: float | None = None

    @property
    def now(self) -> float:
        if self._now is None:
            self._now = self.ctx.clock()
        return self._now


class ModelCheck(Check):
    """A model call on its way: `what` it is for the messages ("the model call", "reflecting")."""

    __slots__ = ("reflect", "what")

    def __init__(self, unit: Unit, what: str = "the model call", reflect: bool = False) -> None:
        super().__init__(unit)
        self.what, self.reflect = what, reflect


class CallCheck(Check):
    """A tool call on its way, with the approving decision recorded for it (if any). `arguments`: what the call runs
    with, the reviewer's arguments when it was approved, else the model's."""

    __slots__ = ("approval", "arguments", "call")

    def __init__(self, unit: Unit, call: ToolCall, approval: ApprovalStep | None = None) -> None:
        super().__init__(unit)
        self.call, self.approval = call, approval
        self.arguments: dict[str, Any] = approval.arguments if approval is not None else call.arguments


class AnswerCheck(Check):
    """A final answer on its way to being accepted."""

    __slots__ = ("answer",)

    def __init__(self, unit: Unit, answer: str) -> None:
        super().__init__(unit)
        self.answer = answer


def run_gates[C: Check, Out](gates: Sequence[Callable[[C], Out]], check: C) -> Out:
    """The first outcome of `gates` (asked in order) that is not PROCEED, or PROCEED (the last gate's answer).
    `Out`: what a family of gates answers, PROCEED or what happens instead."""
    for gate in gates[:-1]:
        outcome = gate(check)
        if not isinstance(outcome, Proceed):
            return outcome
    return gates[-1](check)


# Guardrails: a trip stops the run, or (an action "correct") tells the model why, once per guardrail and run.


def corrects(state: RunState, verdict: Verdict) -> bool:
    """Whether a tripped guardrail lets the run go on, the model told why: its action is "correct" and it has not
    corrected this run before (a second trip stops it)."""
    if verdict.action != "correct":
        return False
    return not any(step.get("guardrail") == verdict.guardrail and step.get("correction") for step in state.steps)


def guardrail_halt(verdict: Verdict, stage: str) -> Halt:
    """The run stops with stop reason `guardrail` and an error step naming the guardrail, the stage and why."""
    message = f"Guardrail '{verdict.guardrail}' tripped on the {stage.replace('_', ' ')}: {verdict.reason}"
    return Halt(StopReason.GUARDRAIL, message, guardrail=verdict.guardrail, stage=stage)


# Before a model call.


def input_guardrail(check: ModelCheck) -> Proceed | Halt:
    """The input, before the first model call. A trip always stops: there is nothing to correct."""
    guard, state = check.ctx.guard, check.state
    if guard is None or check.reflect or state.turns != 0:
        return PROCEED
    verdict = guard.check("input", state.input)
    return PROCEED if verdict is None else guardrail_halt(verdict, "input")


def model_cancelled(check: ModelCheck) -> Proceed | Halt:
    """The host stopped the run."""
    return Halt(StopReason.CANCELLED) if check.ctx.cancelled() else PROCEED


def model_deadline(check: ModelCheck) -> Proceed | Halt:
    """The run's deadline has come."""
    if check.now < check.state.deadline:
        return PROCEED
    return Halt(StopReason.TIMEOUT, f"deadline reached before {check.what}")


def token_limit(check: ModelCheck) -> Proceed | Halt:
    """`max_total_tokens`: the next call would exceed it."""
    refusal = limits.before_model_call(check.state)
    return PROCEED if refusal is None else Halt(StopReason.USAGE_LIMIT, refusal.message, limit=refusal.limit)


MODEL_GATES: tuple[Callable[[ModelCheck], Proceed | Halt], ...] = (
    input_guardrail,
    model_cancelled,
    model_deadline,
    token_limit,
)


# Before a tool call.

ToolGate = Callable[[CallCheck], Proceed | Halt | AnswerCall | Pause]


def call_cancelled(check: CallCheck) -> Proceed | Halt:
    """The host stopped the run. Not asked before an instant tool: the unit's commit finds the run cancelled anyway
    and stores nothing, and the tool left no trace. Others are asked (a query, unless just committed)."""
    if check.ctx.toolset.instant(check.call.name) or not check.ctx.cancelled():
        return PROCEED
    return Halt(StopReason.CANCELLED)


def call_deadline(check: CallCheck) -> Proceed | Halt:
    """The run's deadline has come."""
    if check.now < check.state.deadline:
        return PROCEED
    return Halt(StopReason.TIMEOUT, "deadline reached before a tool call")


def run_call_limit(check: CallCheck) -> Proceed | Halt:
    """`max_tool_calls`: the run stops before a call past it."""
    refusal = limits.max_tool_calls(check.state)
    return PROCEED if refusal is None else Halt(StopReason.USAGE_LIMIT, refusal.message, limit=refusal.limit)


def tool_call_limit(check: CallCheck) -> Proceed | AnswerCall:
    """`tool_limits`: a call past its tool's limit is answered with a note that the tool is exhausted."""
    call = check.call
    refusal = limits.tool_limit(check.state, call.name)
    if refusal is None:
        return PROCEED
    note = prepare(refusal.message, check.ctx.toolset.max_output_chars)
    return AnswerCall(ToolStep(call.id, call.name, call.arguments, note, True, limit=refusal.limit))


def arguments_guardrail(check: CallCheck) -> Proceed | Halt | AnswerCall:
    """The arguments the call would run with (an object: others never run). A correction answers the call with a
    note of the rule, so the model may call again."""
    guard, call = check.ctx.guard, check.call
    if guard is None or raw_arguments(call.arguments) is not None:
        return PROCEED
    verdict = guard.check("tool_arguments", tool=call.name, arguments=check.arguments)
    if verdict is None:
        return PROCEED
    if not corrects(check.state, verdict):
        return guardrail_halt(verdict, "tool_arguments")
    note = prepare(f"Guardrail '{verdict.guardrail}' refused these arguments: {verdict.reason}. The tool did not run; "
                   "call it again with arguments that keep to that rule, or go on without it.",
                   check.ctx.toolset.max_output_chars)  # fmt: skip
    step = ToolStep(call.id, call.name, check.arguments, note, True, guardrail=verdict.guardrail, correction=True)
    return AnswerCall(step)


def approval(check: CallCheck) -> Proceed | Pause:
    """A sensitive call with no decision yet waits for one. A call whose arguments are not a JSON object cannot run:
    the model is told so at once, without a reviewer."""
    call = check.call
    if check.approval is not None or raw_arguments(call.arguments) is not None:
        return PROCEED
    return PAUSE if is_sensitive(check.state, check.ctx.toolset, call.name) else PROCEED


TOOL_GATES: tuple[ToolGate, ...] = (
    call_cancelled,
    call_deadline,
    run_call_limit,
    tool_call_limit,
    arguments_guardrail,
    approval,
)


# Before a final answer is accepted.


def output_guardrail(check: AnswerCheck) -> Proceed | Correct | Halt:
    """The final answer: a correction tells the model why, and it answers again."""
    guard = check.ctx.guard
    verdict = guard.check("output", check.answer) if guard is not None else None
    if verdict is None:
        return PROCEED
    if corrects(check.state, verdict):
        message = f"Guardrail '{verdict.guardrail}': {verdict.reason}"
        return Correct(ErrorStep(message, guardrail=verdict.guardrail, correction=True))
    return guardrail_halt(verdict, "output")


ANSWER_GATES: tuple[Callable[[AnswerCheck], Proceed | Correct | Halt], ...] = (output_guardrail,)


# After a tool ran.


def tool_output(check: CallCheck, result: ToolResult, latency_ms: int) -> AnswerCall:
    """The tool step of a call that ran: its output as the output guardrails redact it, or withheld when one trips
    on it (the tool ran: its output is withheld whether the run goes on or stops)."""
    call, guard = check.call, check.ctx.guard
    delivery = check.ctx.toolset.delivery(call.name)
    output, verdict = result.output, None
    if guard is not None and not result.is_error:
        output = guard.redact("tool_output", output)
        verdict = guard.check("tool_output", output, tool=call.name)
    if verdict is None:
        step = ToolStep(call.id, call.name, check.arguments, output, result.is_error, delivery=delivery)
        return AnswerCall(step, latency_ms)
    goes_on = corrects(check.state, verdict)
    note = prepare(f"Guardrail '{verdict.guardrail}' withheld this tool's output: {verdict.reason}.",
                   check.ctx.toolset.max_output_chars)  # fmt: skip
    step = ToolStep(call.id, call.name, check.arguments, note, True, withheld=True, guardrail=verdict.guardrail,
                    correction=goes_on, delivery=delivery)  # fmt: skip
    return AnswerCall(step, latency_ms, then=None if goes_on else guardrail_halt(verdict, "tool_output"))
