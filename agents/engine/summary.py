"""A long thread's summary (run option `history: summarize`, docs/threads.md#long-threads): the earlier turns the
history budget leaves out, condensed by the run's own model in one call, which later runs extend rather than redo.

The host chooses what to condense (the left-out turns the thread's summary does not cover yet, oldest first) and
stores the new summary on the thread; `summarize` makes the call, records it as a `summary` step (its usage and cost
count as the run's, like any call of its model; it is not a turn) and puts the summary before the turns that fit
(agents.engine.history `with_summary`). A call that fails, or that cannot be made (the deadline has come, the run
was cancelled, its token limit is reached), leaves the run as `truncate` would: those turns left out, after the
thread's summary so far, if it has one. Pure: no Django, database or SDK.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agents.engine import history, limits, react, wrapping
from agents.engine.context import Interrupt
from agents.engine.state import RunState
from agents.engine.steps import SummaryStep
from agents.engine.types import CallStopped, Clock, HostStop, Model, ModelError, ModelRequest, Status, Usage

Events = list[dict[str, Any]]

SUMMARY_MAX_CHARS = 4000  # a summary longer than this is cut (it is asked for in about 300 words)
SUMMARY_MAX_TOKENS = 1024  # the call's output limit
TURN_SHOWN = 4000  # characters of each earlier input and answer the call is sent

SYSTEM = (
    "You condense the earlier part of a conversation between a user and an assistant, so that the assistant can go "
    "on without the full transcript. Keep what a later turn may need: the user's goals and preferences, facts, "
    "names and numbers given or found, answers given, decisions made and questions left open. Drop greetings and "
    "repetition. Write in the conversation's language, in at most about 300 words. Reply with the summary only."
)
SUMMARY_MARK = SYSTEM.split(",")[0]  # how a model (the offline demo) tells a summary request from a turn
SO_FAR = "The summary so far, of the conversation's earlier turns:"
EXTEND = "Later turns, oldest first. Reply with the summary extended to cover them too:"
FIRST = "The turns to condense, oldest first:"
TURN = "Turn {number}\nUser: {input}\nAssistant: {answer}"


@dataclass(frozen=True)
class Condense:
    """What to condense: the thread's summary so far (`summary`, "" for none, covering its first `covered` runs),
    the turns it does not cover yet (oldest first: the thread's runs `covered` to `runs`), and `runs`, how many of
    the thread's runs the new summary covers."""

    summary: str
    covered: int
    turns: Sequence[dict[str, Any]]
    runs: int


def request_messages(job: Condense) -> list[dict[str, Any]]:
    """The call's messages: the instructions, then the summary so far (when there is one) and the turns."""
    lines = [f"{SO_FAR}\n{job.summary}\n\n{EXTEND}"] if job.summary else [FIRST]
    for number, turn in enumerate(job.turns, start=job.covered + 1):
        question = wrapping.cut(turn.get("input") or "", TURN_SHOWN)
        answer = wrapping.cut(history.answer_text(turn), TURN_SHOWN)
        lines.append(TURN.format(number=number, input=question, answer=answer))
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(lines)}]


def summarize(
    state: RunState, model: Model, clock: Clock, job: Condense, interrupt: Interrupt | None = None
) -> tuple[RunState, Events, str | None]:
    """Condense `job` with one model call before the run's first turn: the new state (its history led by the new
    summary), the `summary` step it appended, and the summary (None: no call, or it failed: the history is led by
    the summary so far, if any, and the turns left out stay out)."""
    state = state.copy()
    fallback = history.with_summary(state.history, job.summary, job.covered) if job.summary else list(state.history)
    now = clock()
    if state.status != Status.RUNNING or now >= state.deadline or limits.before_model_call(state) is not None:
        state.history = fallback
        return state, [], None
    if interrupt is not None and interrupt():
        state.history = fallback
        return state, [], None
    request = ModelRequest(
        request_messages(job), [], state.protocol, state.deadline - now, max_output_tokens=SUMMARY_MAX_TOKENS
    )
    record = SummaryStep(summary=None, runs=job.runs, condensed=len(job.turns), extended=bool(job.summary))
    text: str | None = None
    try:
        reply = model.complete(request)
    except (HostStop, ModelError) as exc:
        record = _failed(record, str(exc) or "the summary call failed")
    except CallStopped as exc:
        _spent(state, exc.usage.prompt_tokens, exc.usage.completion_tokens, None)
        record = _failed(record, str(exc), usage=exc.usage.as_dict())
    else:
        _spent(state, reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.cost_nanos)
        text = wrapping.cut(react.strip_think(reply.text or "")[0].strip(), SUMMARY_MAX_CHARS) or None
        usage = reply.usage.as_dict()
        record = SummaryStep(text, job.runs, len(job.turns), bool(job.summary), usage, reply.model, reply.cost_nanos)
        if text is None:
            record = _failed(record, "the model's summary was empty", usage=usage)
    state.history = fallback if text is None else history.with_summary(state.history, text, job.runs)
    step = {"index": len(state.steps), "kind": record.kind.value, "latency_ms": max(0, round((clock() - now) * 1000))}
    step.update(record.to_data())
    state.steps.append(step)
    return state, [step], text


def _failed(record: SummaryStep, error: str, usage: dict[str, int] | None = None) -> SummaryStep:
    usage = usage if usage is not None else Usage().as_dict()
    runs, condensed, extended = record.runs, record.condensed, record.extended
    return SummaryStep(None, runs, condensed, extended, usage, record.model, record.cost_nanos, error)


def _spent(state: RunState, prompt_tokens: int, completion_tokens: int, cost_nanos: int | None) -> None:
    """The call's tokens and price count as the run's (its usage, its limits, its owner's quota); it is no turn."""
    state.prompt_tokens += prompt_tokens
    state.completion_tokens += completion_tokens
    if cost_nanos is not None:
        state.cost_nanos = (state.cost_nanos or 0) + cost_nanos
