"""Guardrails (docs/guardrails.md): checks of a run's input, its final answer, its tool calls' arguments and results,
configured on an agent or a run as a list of objects. Services layer: built-ins, the provider's moderation endpoint,
and a team's own hooks (AGENT_GUARDRAIL_HOOKS). The engine asks the `Guard` this package builds for a run."""

from __future__ import annotations

from typing import Any

from agents.guardrails import checks  # noqa: F401  (registers the system check of AGENT_GUARDRAIL_HOOKS)
from agents.guardrails.config import STAGES, Problem, parse
from agents.guardrails.rails import BrokenRail, PiiRail, RunGuard


def guard_for(run: Any) -> RunGuard | None:
    """The Guard of a run's `guardrails` (None when it has none). Guardrails stored with the run that no longer build
    (a hook or the moderation key removed since) give a guard that stops the run at its next check: fail closed."""
    if not run.guardrails:
        return None
    try:
        rails = parse(run.guardrails)
    except Problem as exc:
        rails = [BrokenRail(name="guardrails", on=frozenset(STAGES), action="stop", problem=str(exc))]
    return RunGuard(rails, deadline=lambda: run.deadline)


def guardrails_problem(value: Any) -> str | None:
    """Why `value` is not a usable list of guardrails (a 400 naming `guardrails`), or None."""
    try:
        parse(value)
    except Problem as exc:
        return str(exc)
    return None


def redacted_parts(guardrails: Any, input_parts: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """A list input's text parts as `redact_input` leaves them (images as they are); None stays None."""
    if input_parts is None or not guardrails:
        return input_parts
    return [
        {**part, "text": redact_input(guardrails, part["text"])}
        if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        else part
        for part in input_parts
    ]


def redact_input(guardrails: Any, text: str) -> str:
    """A run's input as it is stored and shown to the model: the personal data its pii guardrails with action
    "redact" on the input (the default) replace, in their order. Unusable guardrails change nothing (the run is
    refused, or its guard stops it)."""
    try:
        rails = parse(guardrails) if guardrails else []
    except Problem:
        return text
    for rail in rails:
        if isinstance(rail, PiiRail) and "input" in rail.on:
            text = rail.redact(text)
    return text
