"""The system check of AGENT_GUARDRAIL_HOOKS: a hook that does not import would stop every run that names it (its
guardrail fails closed), so `manage.py check` and start-up say so first."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks

from agents.guardrails import hooks

HINT = 'e.g. AGENT_GUARDRAIL_HOOKS=\'{"no_competitors": "myteam.guardrails.no_competitors"}\' (docs/guardrails.md)'


def check_guardrail_hooks(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Every AGENT_GUARDRAIL_HOOKS entry is a name and the dotted path of a callable that imports."""
    value = getattr(settings, "AGENT_GUARDRAIL_HOOKS", None) or {}
    if not isinstance(value, dict):
        return [checks.Error("AGENT_GUARDRAIL_HOOKS must be a JSON object of names to dotted paths.", hint=HINT,
                             id="guardrails.E001")]  # fmt: skip
    errors: list[checks.CheckMessage] = []
    for name, path in value.items():
        _, problem = hooks.imported(path) if isinstance(path, str) else (None, "not a dotted path")
        if problem:
            errors.append(checks.Error(f"Guardrail hook {name!r} ({path}): {problem}", hint=HINT, id="guardrails.E001"))
    return errors


checks.register(check_guardrail_hooks)
