"""A team's own checks: AGENT_GUARDRAIL_HOOKS names each by the dotted path of a callable (docs/guardrails.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string


class HookProblem(ValueError):
    """A hook that is not configured, or that cannot be loaded (the message, shown to clients, names no path)."""


def configured() -> dict[str, Any]:
    """AGENT_GUARDRAIL_HOOKS, read now (a dict of names to dotted paths)."""
    hooks = getattr(settings, "AGENT_GUARDRAIL_HOOKS", None) or {}
    return hooks if isinstance(hooks, dict) else {}


def load(name: str) -> Callable[..., Any]:
    """The callable of hook `name`; HookProblem when it is not configured or cannot be loaded."""
    hooks = configured()
    if name not in hooks:
        known = ", ".join(sorted(str(n) for n in hooks)) or "none are configured"
        raise HookProblem(f"unknown hook {name!r} (AGENT_GUARDRAIL_HOOKS; known: {known})")
    hook, problem = imported(hooks[name])
    if hook is None:  # the details (a server's module path) are for its operators: the system check shows them
        raise HookProblem(f"hook {name!r} cannot be loaded on this server ({problem.split(':')[0]})")
    return hook


def imported(path: Any) -> tuple[Callable[..., Any] | None, str]:
    """(the callable at a dotted path, "") or (None, why not): it must import and be callable."""
    try:
        hook = import_string(str(path))
    except Exception as exc:  # whatever its module raises as it is imported
        return None, f"{type(exc).__name__}: {exc}"
    if not callable(hook):
        return None, f"TypeError: {path} is not callable"
    return hook, ""
