"""A thread's earlier runs as the turns a model sees before the new input (API.md v1.1, "Threads").

Each earlier run is one user turn (its input) and one assistant turn (its final answer, or a note of how it stopped);
tool steps are not replayed. The service reads the runs; this module bounds and renders them (pure functions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.engine import parts

NO_ANSWER = "(No final answer: that run stopped with {reason}.)"


def answer_text(turn: dict[str, Any]) -> str:
    """What the assistant said in an earlier run: its final answer, else how the run stopped (never empty)."""
    output = turn.get("output")
    if turn.get("stop_reason") == "final_answer" and isinstance(output, str) and output.strip():
        return output
    return NO_ANSWER.format(reason=turn.get("stop_reason") or "no answer")


def size(turn: dict[str, Any]) -> int:
    """Characters a turn adds to the prompt (its input and its answer)."""
    return len(turn.get("input") or "") + len(answer_text(turn))


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
        answer = answer_text(turn)
        if protocol == "react" and turn.get("stop_reason") == "final_answer":
            answer = f"Final Answer: {answer}"
        question = parts.as_content(turn.get("input_parts"), turn["input"])  # parts when it had images
        rendered += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
    return rendered


IMAGE_LEFT_OUT = "(An image was here; it is not shown again.)"


def images_bounded(turns: Sequence[dict[str, Any]], max_images: int) -> list[dict[str, Any]]:
    """The turns with at most `max_images` images in all, the newest kept: an older image becomes a note (its turn's
    text stays). Turns without images are returned as they are."""
    kept: list[dict[str, Any]] = []
    left = max(max_images, 0)
    for turn in reversed(turns):
        shown = turn.get("input_parts")
        count = len(parts.images(shown))
        if count and count > left:
            shown = _keep_last_images(shown, left)
            turn = {**turn, "input_parts": shown}
        left -= len(parts.images(shown))
        kept.append(turn)
    kept.reverse()
    return kept


def _keep_last_images(content: list[dict[str, Any]], keep: int) -> list[dict[str, Any]]:
    """The parts with only their last `keep` images; the others are notes."""
    total = len(parts.images(content))
    seen = 0
    out = []
    for part in content:
        if part.get("type") == "image":
            seen += 1
            if seen <= total - keep:
                part = {"type": "text", "text": IMAGE_LEFT_OUT}
        out.append(part)
    return out
