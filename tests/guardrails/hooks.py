"""Guardrail hooks for the tests, named in AGENT_GUARDRAIL_HOOKS by their dotted paths."""

from __future__ import annotations

from agents.engine.types import Verdict

CALLS: list[tuple] = []


def no_competitors(stage, text, tool=None, arguments=None):
    """Refuses any text that names ACME (a team's own rule); records what it was asked."""
    CALLS.append((stage, text, tool, arguments))
    return "it names a competitor" if "acme" in (text or "").lower() else None


def verdict(stage, text, tool=None, arguments=None):
    return Verdict("house-rules", "the house rules say no", "correct")


def raises(stage, text, tool=None, arguments=None):
    raise RuntimeError(f"boom on {text}")  # the text must not reach the reason


def answers_a_number(stage, text, tool=None, arguments=None):
    return 42


NOT_CALLABLE = "a string"


HELD: list[bool] = []


def notes_the_connection(stage, text, tool=None, arguments=None):
    """Passes everything; records whether this thread held an open database connection while it was asked."""
    from django.db import connection

    HELD.append(connection.connection is not None)
    return None
