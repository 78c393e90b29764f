"""The guardrails' configuration (docs/guardrails.md): a list of objects, checked and built into rails in one pass,
so what validation accepts is exactly what a run builds.

Each object: `{"type", "name"?, "on"?, "action"?, ...its type's own fields}`. `name` (default: the type; a hook's is
the hook's own name) is unique in the list; `on` lists the stages it applies to (default per type); `action` is
"stop" (the default), "correct", or for pii "redact" (its default).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agents.engine import schemas
from agents.guardrails import hooks, patterns, pii
from agents.guardrails.rails import (
    HookRail,
    MaxLengthRail,
    ModerationRail,
    PiiRail,
    Rail,
    RegexRail,
    ToolSchemaRail,
)

MAX_GUARDRAILS = 20
MAX_NAME_CHARS = 64
MAX_CHARS = 1_000_000  # a max_length above any answer a model writes
STAGES = ("input", "output", "tool_arguments", "tool_output")
ACTIONS = ("stop", "correct")
COMMON = ("type", "name", "on", "action")
EXAMPLE = '[{"type": "pii"}, {"type": "regex", "patterns": ["(?i)password"]}]'
# OpenAI's moderation categories (its API reference): a guardrail may trip on some of them only.
MODERATION_CATEGORIES = (
    "harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent", "self-harm",
    "self-harm/instructions", "self-harm/intent", "sexual", "sexual/minors", "violence", "violence/graphic",
)  # fmt: skip


class Problem(ValueError):
    """Why a list of guardrails cannot be used: one sentence naming the entry."""


@dataclass(frozen=True)
class Kind:
    """A type of guardrail: its own fields, the stages it may be on and is on by default, and how it is built."""

    fields: tuple[str, ...]
    stages: tuple[str, ...]
    default_on: tuple[str, ...]
    build: Callable[[dict[str, Any], str], Callable[..., Rail]]
    default_action: str = "stop"


def parse(value: Any) -> list[Rail]:
    """The rails of a list of guardrails, in order; Problem naming the first entry that cannot be used."""
    if not isinstance(value, list):
        raise Problem(f"A list of guardrail objects, e.g. {EXAMPLE}.")
    if len(value) > MAX_GUARDRAILS:
        raise Problem(f"At most {MAX_GUARDRAILS} guardrails ({len(value)} given).")
    rails: list[Rail] = []
    for number, entry in enumerate(value, 1):
        rail = _rail(entry, number)
        if any(rail.name == earlier.name for earlier in rails):
            raise Problem(
                f"Guardrail {number} ({entry['type']}): the name {rail.name!r} is taken by an earlier guardrail; give "
                'each its own "name".'
            )
        rails.append(rail)
    return rails


def _rail(entry: Any, number: int) -> Rail:
    if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
        raise Problem(f'Guardrail {number} must be an object with a "type", e.g. {{"type": "pii"}}.')
    kind = KINDS.get(entry["type"])
    if kind is None:
        shown = entry["type"][:40]
        raise Problem(f"Guardrail {number}: unknown type {shown!r}. Known: {', '.join(sorted(KINDS))}.")
    where = f"Guardrail {number} ({entry['type']})"
    unknown = sorted(str(key) for key in entry if key not in COMMON + kind.fields)
    if unknown:
        raise Problem(f"{where}: unknown field {unknown[0][:40]!r}. Its fields: {', '.join(COMMON + kind.fields)}.")
    make = kind.build(entry, where)
    name = entry.get("name", entry["type"])
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
        raise Problem(f'{where}: "name" must be a non-blank string of at most {MAX_NAME_CHARS} characters.')
    action = _action(entry, kind, where)
    return make(name=name, on=_stages(entry, kind, action, where), action=action)


def _action(entry: dict[str, Any], kind: Kind, where: str) -> str:
    action = entry.get("action", kind.default_action)
    allowed = ACTIONS + (("redact",) if kind.default_action == "redact" else ())
    if action not in allowed:
        raise Problem(f'{where}: "action" must be one of {", ".join(allowed)}.')
    return str(action)


def _stages(entry: dict[str, Any], kind: Kind, action: str, where: str) -> frozenset[str]:
    on = entry.get("on", list(kind.default_on))
    if not isinstance(on, list) or not on or not all(isinstance(stage, str) for stage in on):
        raise Problem(f'{where}: "on" must be a non-empty list of stages, e.g. {list(kind.default_on)}.')
    for stage in on:
        if stage not in STAGES:
            raise Problem(f"{where}: unknown stage {stage[:40]!r}. Stages: {', '.join(STAGES)}.")
        if stage not in kind.stages:
            raise Problem(f"{where}: it cannot be on {stage}; it can be on {', '.join(kind.stages)}.")
    if action == "redact" and "tool_arguments" in on:
        raise Problem(f'{where}: tool arguments are checked, never redacted: use "action" "stop" or "correct" there.')
    return frozenset(on)


# --- each type's own fields ------------------------------------------------------------------------------------


def _regex(entry: dict[str, Any], where: str) -> Callable[..., Rail]:
    given, ignore_case = entry.get("patterns"), entry.get("ignore_case", False)
    if not isinstance(given, list) or not given or not all(isinstance(p, str) and p for p in given):
        raise Problem(f'{where}: "patterns" must be a non-empty list of regular expressions (Python re).')
    if len(given) > patterns.MAX_PATTERNS:
        raise Problem(f"{where}: at most {patterns.MAX_PATTERNS} patterns ({len(given)} given).")
    if not isinstance(ignore_case, bool):
        raise Problem(f'{where}: "ignore_case" must be true or false.')
    compiled = []
    for number, pattern in enumerate(given, 1):
        try:
            compiled.append(patterns.compiled(pattern, ignore_case))
        except patterns.PatternProblem as exc:
            raise Problem(f"{where}: pattern {number} {exc}.") from None
    return _with(RegexRail, patterns=tuple(compiled))


def _pii(entry: dict[str, Any], where: str) -> Callable[..., Rail]:
    kinds = entry.get("kinds", list(pii.KINDS))
    if not isinstance(kinds, list) or not kinds or any(kind not in pii.KINDS for kind in kinds):
        raise Problem(f'{where}: "kinds" must be a non-empty list of {", ".join(pii.KINDS)}.')
    return _with(PiiRail, kinds=tuple(kind for kind in pii.KINDS if kind in kinds))


def _max_length(entry: dict[str, Any], where: str) -> Callable[..., Rail]:
    chars = entry.get("chars")
    if isinstance(chars, bool) or not isinstance(chars, int) or not 1 <= chars <= MAX_CHARS:
        raise Problem(f'{where}: "chars" must be a whole number from 1 to {MAX_CHARS}.')
    return _with(MaxLengthRail, chars=chars)


def _tool_schema(entry: dict[str, Any], where: str) -> Callable[..., Rail]:
    tool, schema = entry.get("tool"), entry.get("schema")
    if not isinstance(tool, str) or not tool.strip():
        raise Problem(f'{where}: "tool" must name the tool whose arguments the schema checks.')
    problem = schemas.schema_problem(schema)
    if problem is not None:
        raise Problem(f'{where}: "schema": {problem}')
    return _with(ToolSchemaRail, tool=tool, schema=schema)


def _moderation(entry: dict[str, Any], where: str) -> Callable[..., Rail]:
    model, categories = entry.get("model"), entry.get("categories", [])
    if model is not None and (not isinstance(model, str) or not model.strip() or len(model) > 100):
        raise Problem(f'{where}: "model" must be a moderation model\'s name, e.g. "omni-moderation-latest".')
    if not isinstance(categories, list) or any(c not in MODERATION_CATEGORIES for c in categories):
        raise Problem(f'{where}: "categories" must be a list of {", ".join(MODERATION_CATEGORIES)}.')
    if not str(getattr(settings, "OPENAI_API_KEY", "") or "").strip():
        raise Problem(f"{where}: needs OPENAI_API_KEY (it asks OpenAI's moderation endpoint), which is not set here.")
    return _with(ModerationRail, model=model, categories=tuple(categories))


def _hook(entry: dict[str, Any], where: str) -> Callable[..., Rail]:
    name = entry.get("name")
    if not isinstance(name, str) or not name:
        raise Problem(f'{where}: "name" must name a hook of AGENT_GUARDRAIL_HOOKS.')
    try:
        hook = hooks.load(name)
    except hooks.HookProblem as exc:
        raise Problem(f"{where}: {exc}.") from None
    return _with(HookRail, hook=hook)


def _with(cls: type[Rail], **fields: Any) -> Callable[..., Rail]:
    """The rail's class with its own fields set; the common ones (name, on, action) come last."""
    return lambda **common: cls(**common, **fields)


ALL = STAGES
KINDS: dict[str, Kind] = {
    "regex": Kind(("patterns", "ignore_case"), ALL, ALL, _regex),
    "pii": Kind(("kinds",), ALL, ("input", "output", "tool_output"), _pii, default_action="redact"),
    "max_length": Kind(("chars",), ("output",), ("output",), _max_length),
    "tool_schema": Kind(("tool", "schema"), ("tool_arguments",), ("tool_arguments",), _tool_schema),
    "moderation": Kind(("model", "categories"), ("input", "output"), ("input", "output"), _moderation),
    "hook": Kind((), ALL, ALL, _hook),
}
