"""Resolution, in one place: a request's options over its agent's over the server's defaults, within the ceilings.

An agent's brakes hold for every run of it: a request may lower its limits, never raise them; its guardrails come
first, before any the request adds; sensitive tools are the union (a run can tighten, never loosen)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from django.conf import settings

from agents.runconfig.config import RunConfig
from agents.runconfig.options import AGENT_OPTIONS, BY_NAME, LIMITS, NAMES

Merge = Callable[[Any, Any], Any]  # (the agent's value, the request's) -> the run's


def _lower(mine: Any, theirs: Any) -> Any:
    """A limit: the request's when it is lower (a malformed one is kept, for the validator to refuse)."""
    return min(mine, theirs) if isinstance(theirs, int) else theirs


def _lower_each(mine: Any, theirs: Any) -> Any:
    """Per-tool limits: the agent's, each lowered by the request's own for that tool."""
    if not isinstance(mine, dict) or not isinstance(theirs, dict):
        return theirs
    limits = dict(theirs)
    for tool, most in mine.items():
        given = limits.get(tool)
        limits[tool] = min(most, given) if isinstance(given, int) and isinstance(most, int) else most
    return limits


def _agent_first(mine: Any, theirs: Any) -> Any:
    """Guardrails: the agent's, then the request's."""
    if not isinstance(mine, list) or not mine:
        return theirs
    return [*mine, *(theirs if isinstance(theirs, list) else [])]


# How an option the request and its agent both give is merged; any other: the request's.
BRAKES: dict[str, Merge] = {
    **{option.name: _lower for option in LIMITS},
    "tool_limits": _lower_each,
    "guardrails": _agent_first,
}


def over_agent(given: Mapping[str, Any], agent: Mapping[str, Any]) -> dict[str, Any]:
    """The options that change when `given` (a request's, None: not given) starts from an agent's values: what it
    left out is the agent's, sensitive tools are both's, and the agent's brakes hold."""
    merged: dict[str, Any] = {}
    for name in AGENT_OPTIONS:
        mine, theirs = agent.get(name), given.get(name)
        if name == "sensitive_tools":
            merged[name] = tuple(sorted({*(theirs or ()), *(mine or [])}))
        elif theirs is None:
            if mine not in (None, ""):
                merged[name] = mine
        elif mine is not None and name in BRAKES:
            merged[name] = BRAKES[name](mine, theirs)
    return merged


def limit_defaults(given: Mapping[str, Any]) -> dict[str, Any]:
    """The server's limits under what was given: a limit left out is AGENT_DEFAULT_*, else the ceiling, else none;
    per-tool limits are AGENT_DEFAULT_TOOL_LIMITS under the given ones."""
    limits: dict[str, Any] = {}
    for option in LIMITS:
        if given.get(option.name) is None:
            default = int(getattr(settings, option.setting or "")) or int(getattr(settings, option.ceiling or ""))
            limits[option.name] = default or None
    limits["tool_limits"] = {**dict(settings.AGENT_DEFAULT_TOOL_LIMITS or {}), **(given.get("tool_limits") or {})}
    return limits


def _default(name: str) -> Any:
    """What a run has for an option nothing gave (limits were given their defaults already: `limit_defaults`)."""
    option = BY_NAME[name]
    if option.limit:
        return None
    if option.setting is not None:
        return getattr(settings, option.setting)
    return [] if option.types == (list,) else option.default


def resolve(values: Mapping[str, Any]) -> RunConfig:
    """The config of checked values (None: the default), typed as a run stores it."""
    resolved: dict[str, Any] = {name: values.get(name) for name in NAMES}
    for name, value in resolved.items():
        if value is None:
            resolved[name] = _default(name)
        elif isinstance(value, tuple):
            resolved[name] = list(value)
    resolved["timeout_s"] = float(resolved["timeout_s"])
    if resolved["prompt_cache"] is None:  # on by default where it must be asked for: Anthropic's cache_control
        resolved["prompt_cache"] = resolved["provider"] == "anthropic"
    return RunConfig(**resolved)


def defaults() -> RunConfig:
    """The config of a run that gives nothing: the server's defaults."""
    return resolve(limit_defaults({}))
