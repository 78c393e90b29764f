"""A thread's earlier runs as the turns a model sees before the new input (docs/api.md#threads).

Each earlier run is one user turn (its input) and one assistant turn (its final answer, or a note of how it stopped);
tool steps are not replayed as tool messages. A run cancelled before it finished (interrupted by a newer run on its
thread, docs/double-texting.md) says in its note what it had done so far: its tool calls and their outputs, briefly
(`calls_so_far`), so a later run knows what already happened. With `history: "summarize"` the runs past the budget
are condensed into one summary turn that leads the others (`with_summary`; agents/engine/summary.py makes it). The
service reads the runs; this module bounds and renders them (pure functions).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from agents.engine import parts, wrapping
from agents.engine.steps import StepKind

NO_ANSWER = "(No final answer: that run stopped with {reason}.)"
STOPPED_AFTER = (
    "(No final answer: that run stopped with {reason} before it finished. What it had done so far:\n{calls})"
)
CALLS_SHOWN = 8  # an unfinished run's latest calls shown in a later turn (the earlier ones are counted)
OUTPUT_SHOWN = 500  # characters of each call's output
ARGUMENTS_SHOWN = 300  # characters of each call's arguments (as JSON)


def answer_text(turn: dict[str, Any]) -> str:
    """What the assistant said in an earlier run: its final answer, else how the run stopped (never empty), with
    what it had done so far when the turn lists its calls."""
    output = turn.get("output")
    if turn.get("stop_reason") == "final_answer" and isinstance(output, str) and output.strip():
        return output
    reason = turn.get("stop_reason") or "no answer"
    calls = turn.get("calls")
    if not calls:
        return NO_ANSWER.format(reason=reason)
    lines = [f"- ({turn['earlier_calls']} earlier tool calls not shown)"] if turn.get("earlier_calls") else []
    lines += [_call_line(call) for call in calls]
    return STOPPED_AFTER.format(reason=reason, calls="\n".join(lines))


def _call_line(call: dict[str, Any]) -> str:
    """One call of an unfinished run: the tool, its arguments and its output (wrapped as every tool output is)."""
    head = wrapping.neutralise(f"- {call.get('tool')} {call.get('arguments')}")
    output = call.get("output")
    if not isinstance(output, str):
        return f"{head}: not run"
    return f"{head} {'failed' if call.get('is_error') else 'returned'}:\n{wrapping.wrap(wrapping.neutralise(output))}"


def calls_so_far(steps: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """The tool calls a run made, in order, for a later turn to show of it: `(calls, earlier)`, the latest
    CALLS_SHOWN calls and how many earlier ones were left out. `steps`: the run's steps as events (`kind` and their
    data). Each call is `{"tool", "arguments", "output"}` (arguments as JSON text, both cut to a bound; output None
    when the call was not run: the run stopped first, or it waited for a decision) and `is_error` when it failed."""
    calls: list[dict[str, Any]] = []
    asked: dict[Any, dict[str, Any]] = {}
    for step in steps:
        if step.get("kind") == StepKind.MODEL:
            for call in step.get("tool_calls") or []:
                entry = {"tool": call.get("name"), "arguments": _arguments(call.get("arguments")), "output": None}
                asked[call.get("id")] = entry
                calls.append(entry)
        elif step.get("kind") == StepKind.TOOL:
            found = asked.get(step.get("call_id"))
            if found is None:
                found = {"tool": step.get("name"), "arguments": _arguments(step.get("arguments")), "output": None}
                calls.append(found)
            output = step.get("output")
            found["output"] = wrapping.cut(wrapping.neutralise(output if isinstance(output, str) else ""), OUTPUT_SHOWN)
            if step.get("is_error"):
                found["is_error"] = True
    return calls[-CALLS_SHOWN:], max(len(calls) - CALLS_SHOWN, 0)


def _arguments(arguments: Any) -> str:
    text = json.dumps(arguments, ensure_ascii=False, sort_keys=True, default=str)
    return wrapping.cut(wrapping.neutralise(text), ARGUMENTS_SHOWN)


def size(turn: dict[str, Any]) -> int:
    """Characters a turn adds to the prompt (its input and its answer)."""
    if is_summary(turn):
        return sum(len(m["content"]) for m in _summary_messages(turn, "tools"))
    return len(turn.get("input") or "") + len(answer_text(turn))


# A long thread's summary (run option `history: summarize`, agents/engine/summary.py) leads a run's history as a turn
# of its own, `{"summary", "runs"}`: the thread's first `runs` runs condensed, shown as the user's note of them and
# the assistant's acknowledgement, so the turns stay user/assistant pairs in every provider's format.
SUMMARY_NOTE = "(The earlier part of this conversation, condensed: {runs} earlier runs.)\n{summary}"
SUMMARY_ACK = "Noted: I have the earlier part of our conversation in mind."


def summary_turn(summary: str, runs: int) -> dict[str, Any]:
    return {"summary": summary, "runs": runs}


def is_summary(turn: dict[str, Any]) -> bool:
    return "summary" in turn


def with_summary(turns: Sequence[dict[str, Any]], summary: str, runs: int) -> list[dict[str, Any]]:
    """The turns led by the summary of the runs before them (in place of any summary they had)."""
    return [summary_turn(summary, runs), *(t for t in turns if not is_summary(t))]


def _summary_messages(turn: dict[str, Any], protocol: str) -> list[dict[str, Any]]:
    note = SUMMARY_NOTE.format(runs=turn.get("runs") or 0, summary=turn["summary"])
    ack = f"Final Answer: {SUMMARY_ACK}" if protocol == "react" else SUMMARY_ACK
    return [{"role": "user", "content": note}, {"role": "assistant", "content": ack}]


def bounded(turns: Sequence[dict[str, Any]], max_runs: int, max_chars: int) -> list[dict[str, Any]]:
    """The newest turns (oldest first) that fit both bounds: the oldest are left out first, a whole run at a time.

    The new input is not a turn here: it is never left out.
    """
    kept: list[dict[str, Any]] = []
    used = 0
    for turn in reversed(turns[-max_runs:] if max_runs > 0 else []):
        used += size(turn)
        if used > max_chars:
            break
        kept.append(turn)
    kept.reverse()
    return kept


def messages(turns: Sequence[dict[str, Any]], protocol: str) -> list[dict[str, Any]]:
    """Alternating user/assistant messages, oldest first. In the react protocol an answer reads as the protocol's
    own `Final Answer:` line, so the transcript stays in the format the model is asked to keep."""
    rendered: list[dict[str, Any]] = []
    for turn in turns:
        if is_summary(turn):
            rendered += _summary_messages(turn, protocol)
            continue
        answer = answer_text(turn)
        if protocol == "react" and turn.get("stop_reason") == "final_answer":
            answer = f"Final Answer: {answer}"
        question = parts.as_content(turn.get("input_parts"), turn["input"])  # parts when it had images or documents
        rendered += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return rendered


IMAGE_LEFT_OUT = "(An image was here; it is not shown again.)"


def images_bounded(turns: Sequence[dict[str, Any]], max_images: int) -> list[dict[str, Any]]:
    """The turns with at most `max_images` images in all, the newest kept: an older image becomes a note (its turn's
    text stays). Turns without images are returned as they are."""
    return _bounded(turns, max_images, "image", lambda part: IMAGE_LEFT_OUT)


DOCUMENT_LEFT_OUT = "(A document was here: {name}; it is not shown again.)"


def documents_bounded(turns: Sequence[dict[str, Any]], max_documents: int) -> list[dict[str, Any]]:
    """The turns with at most `max_documents` documents in all, the newest kept: an older one becomes a note naming
    it (its turn's text stays). Turns without documents are returned as they are."""
    return _bounded(
        turns, max_documents, "file", lambda part: DOCUMENT_LEFT_OUT.format(name=part.get("name") or "unnamed")
    )


def _bounded(
    turns: Sequence[dict[str, Any]], most: int, kind: str, note: Callable[[dict[str, Any]], str]
) -> list[dict[str, Any]]:
    """The turns with at most `most` input parts of type `kind` in all, the newest kept; each older one becomes the
    text part `note(part)`."""
    kept: list[dict[str, Any]] = []
    left = max(most, 0)
    for turn in reversed(turns):
        shown = turn.get("input_parts")
        count = len(parts.of_type(shown, kind))
        if count > left:
            drop = count - left  # the turn's first ones: the newest stay
            out = []
            for part in shown:
                if isinstance(part, dict) and part.get("type") == kind and drop > 0:
                    drop -= 1
                    part = {"type": "text", "text": note(part)}
                out.append(part)
            turn, count = {**turn, "input_parts": out}, left
        left -= count
        kept.append(turn)
    kept.reverse()
    return kept
