"""The system check of AGENT_GUARDRAIL_HOOKS (agents/guardrails/checks.py): every hook imports and is callable."""

from __future__ import annotations

from django.core import checks

from agents.guardrails.checks import check_guardrail_hooks


def test_hooks_that_import_pass(settings):
    settings.AGENT_GUARDRAIL_HOOKS = {"no_competitors": "tests.guardrails.hooks.no_competitors"}
    assert check_guardrail_hooks() == []
    assert check_guardrail_hooks in checks.registry.registry.get_checks()  # so `manage.py check` runs it


def test_each_hook_that_does_not_import_is_an_error_naming_it(settings):
    settings.AGENT_GUARDRAIL_HOOKS = {
        "fine": "tests.guardrails.hooks.no_competitors",
        "gone": "tests.guardrails.nowhere.check",
        "typo": "tests.guardrails.hooks.no_such_function",
        "value": "tests.guardrails.hooks.NOT_CALLABLE",
    }
    errors = check_guardrail_hooks()
    assert [e.id for e in errors] == ["guardrails.E001"] * 3
    assert [e.msg.split(":")[0] for e in errors] == [
        "Guardrail hook 'gone' (tests.guardrails.nowhere.check)",
        "Guardrail hook 'typo' (tests.guardrails.hooks.no_such_function)",
        "Guardrail hook 'value' (tests.guardrails.hooks.NOT_CALLABLE)",
    ]
    assert "ModuleNotFoundError" in errors[0].msg and "is not callable" in errors[2].msg


def test_the_setting_must_be_an_object(settings):
    settings.AGENT_GUARDRAIL_HOOKS = ["tests.guardrails.hooks.no_competitors"]
    [error] = check_guardrail_hooks()
    assert error.msg == "AGENT_GUARDRAIL_HOOKS must be a JSON object of names to dotted paths."
