"""The memory tools. The user is the run's owner from the host context; no argument can name another user."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model

from agents.models import Run
from agents.tools import Tool, ToolContext, ToolError, registry
from memory import services
from memory.models import MAX_FACT_CHARS


def _owner(context: ToolContext):
    if context is None or context.user_id is None:
        raise ToolError("Memory needs a signed-in user.")
    user = get_user_model().objects.filter(pk=context.user_id).first()
    if user is None:
        raise ToolError("Memory needs a signed-in user.")
    return user


def remember(arguments: dict[str, Any], context: ToolContext) -> str:
    """Store one fact for the run's owner."""

    run = Run.objects.filter(pk=context.run_id).first() if context and context.run_id else None
    try:
        fact, created = services.remember(
            _owner(context), arguments["text"], run=run, call_key=getattr(context, "idempotency_key", None)
        )
    except services.MemoryError_ as exc:
        raise ToolError(str(exc)) from None
    return f"{'Remembered' if created else 'Already remembered'}: {fact.text}"


def recall(arguments: dict[str, Any], context: ToolContext) -> str:
    """The owner's facts most relevant to the query, each with how it matched: the query words it contains and its
    similarity of meaning (cosine, 1 the same meaning, 0 unrelated). The engine delimits it as untrusted output."""
    facts = services.recall(_owner(context), arguments["query"], int(arguments.get("limit", 5)))
    if not facts:
        return "No matching facts remembered."
    return "\n".join(f"- {fact.text}{_how(fact)}" for fact in facts)


def _how(fact) -> str:
    parts = []
    if fact.words:
        parts.append("words: " + ", ".join(fact.words))
    if fact.similarity is not None:
        parts.append(f"meaning: {fact.similarity:.2f}")
    return f" ({'; '.join(parts)})" if parts else ""


registry.register(
    Tool(
        name="remember",
        description="Store a fact about the user in long-term memory for later runs.",
        parameters={
            "type": "object",
            "properties": {"text": {"type": "string", "minLength": 1, "maxLength": MAX_FACT_CHARS}},
            "required": ["text"],
            "additionalProperties": False,
        },
        func=remember,
        inline=True,
    )
)
registry.register(
    Tool(
        name="recall",
        description="Look up facts remembered about the user by meaning and words, most relevant first.",
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "maxLength": 500},
                "limit": {"type": "integer", "minimum": 1, "maximum": 20},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        func=recall,
        inline=True,
    )
)
