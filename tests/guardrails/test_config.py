"""The guardrails' configuration (agents/guardrails/config.py): every refusal is one sentence naming the entry."""

from __future__ import annotations

import pytest

from agents.guardrails import guardrails_problem
from agents.guardrails.config import MAX_GUARDRAILS

HOOKS = {"no_competitors": "tests.guardrails.hooks.no_competitors", "gone": "tests.guardrails.nowhere.fn"}


@pytest.fixture(autouse=True)
def _hooks(settings):
    settings.AGENT_GUARDRAIL_HOOKS = HOOKS
    settings.OPENAI_API_KEY = "sk-test-" + "x" * 8


@pytest.mark.parametrize(
    "value",
    [
        [],
        [{"type": "pii"}],
        [{"type": "pii", "kinds": ["card", "iban"], "action": "stop", "on": ["output", "tool_arguments"]}],
        [{"type": "regex", "patterns": ["(?i)password", r"\bsecret\b"], "ignore_case": True, "name": "words"}],
        [{"type": "regex", "patterns": [r"(?:\w+\.)++com"]}],  # a possessive repeat never backtracks
        [{"type": "max_length", "chars": 500, "action": "correct"}],
        [{"type": "tool_schema", "tool": "calculator", "schema": {"properties": {"expression": {"maxLength": 20}}}}],
        [{"type": "moderation", "categories": ["hate", "violence"], "model": "omni-moderation-latest"}],
        [{"type": "hook", "name": "no_competitors", "on": ["output"], "action": "correct"}],
        [{"type": "regex", "patterns": ["a"]}, {"type": "regex", "name": "other", "patterns": ["b"]}],
    ],
)
def test_usable_configurations(value):
    assert guardrails_problem(value) is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"type": "pii"}, "A list of guardrail objects, e.g."),
        (["pii"], 'Guardrail 1 must be an object with a "type"'),
        ([{"type": "pii"}, {"type": "nope"}], "Guardrail 2: unknown type 'nope'. Known: hook, max_length,"),
        ([{"type": "pii", "kind": ["email"]}], "Guardrail 1 (pii): unknown field 'kind'. Its fields: type, name, on,"),
        ([{"type": "pii"}] * (MAX_GUARDRAILS + 1), f"At most {MAX_GUARDRAILS} guardrails (21 given)."),
        ([{"type": "pii"}, {"type": "pii"}], "Guardrail 2 (pii): the name 'pii' is taken by an earlier guardrail"),
        ([{"type": "pii", "name": ""}], 'Guardrail 1 (pii): "name" must be a non-blank string'),
        ([{"type": "pii", "name": 3}], 'Guardrail 1 (pii): "name" must be a non-blank string'),
        ([{"type": "pii", "on": []}], 'Guardrail 1 (pii): "on" must be a non-empty list of stages'),
        ([{"type": "pii", "on": "output"}], 'Guardrail 1 (pii): "on" must be a non-empty list of stages'),
        ([{"type": "pii", "on": ["answer"]}], "Guardrail 1 (pii): unknown stage 'answer'. Stages: input, output,"),
        ([{"type": "pii", "on": ["tool_arguments"]}], "Guardrail 1 (pii): tool arguments are checked, never redacted"),
        ([{"type": "pii", "action": "warn"}], 'Guardrail 1 (pii): "action" must be one of stop, correct, redact.'),
        ([{"type": "pii", "kinds": ["ssn"]}], 'Guardrail 1 (pii): "kinds" must be a non-empty list of email,'),
        (
            [{"type": "regex", "patterns": ["a"], "action": "redact"}],
            'Guardrail 1 (regex): "action" must be one of stop, correct.',
        ),
        ([{"type": "regex"}], 'Guardrail 1 (regex): "patterns" must be a non-empty list of regular expressions'),
        ([{"type": "regex", "patterns": "a"}], 'Guardrail 1 (regex): "patterns" must be a non-empty list'),
        ([{"type": "regex", "patterns": ["ok", "("]}], "Guardrail 1 (regex): pattern 2 does not compile: missing )"),
        ([{"type": "regex", "patterns": ["(a+)+$"]}], "Guardrail 1 (regex): pattern 1 repeats a part that itself"),
        ([{"type": "regex", "patterns": ["a" * 501]}], "Guardrail 1 (regex): pattern 1 is longer than 500 characters"),
        ([{"type": "regex", "patterns": ["a"] * 51}], "Guardrail 1 (regex): at most 50 patterns (51 given)."),
        ([{"type": "regex", "patterns": ["a"], "ignore_case": "yes"}], 'Guardrail 1 (regex): "ignore_case" must be'),
        ([{"type": "max_length", "chars": 0}], 'Guardrail 1 (max_length): "chars" must be a whole number from 1'),
        ([{"type": "max_length", "chars": True}], 'Guardrail 1 (max_length): "chars" must be'),
        ([{"type": "max_length", "chars": 9, "on": ["input"]}], "Guardrail 1 (max_length): it cannot be on input;"),
        ([{"type": "tool_schema", "schema": {}}], 'Guardrail 1 (tool_schema): "tool" must name the tool'),
        ([{"type": "tool_schema", "tool": "calculator", "schema": []}], 'Guardrail 1 (tool_schema): "schema": A JSON'),
        (
            [{"type": "tool_schema", "tool": "calculator", "schema": {"$ref": "https://example.com/s.json"}}],
            "Guardrail 1 (tool_schema): \"schema\": $ref 'https://example.com/s.json' points outside the schema",
        ),
        ([{"type": "moderation", "categories": ["rude"]}], 'Guardrail 1 (moderation): "categories" must be a list'),
        ([{"type": "moderation", "model": ""}], 'Guardrail 1 (moderation): "model" must be'),
        ([{"type": "moderation", "on": ["tool_arguments"]}], "Guardrail 1 (moderation): it cannot be on tool_arg"),
        ([{"type": "hook"}], 'Guardrail 1 (hook): "name" must name a hook of AGENT_GUARDRAIL_HOOKS.'),
        ([{"type": "hook", "name": "nope"}], "Guardrail 1 (hook): unknown hook 'nope' (AGENT_GUARDRAIL_HOOKS; known:"),
        ([{"type": "hook", "name": "gone"}], "Guardrail 1 (hook): hook 'gone' cannot be loaded on this server"),
    ],
)
def test_refusals_name_the_entry(value, problem):
    found = guardrails_problem(value)
    assert found is not None and found.startswith(problem), found


def test_a_hook_that_cannot_load_does_not_show_the_servers_module_path():
    found = guardrails_problem([{"type": "hook", "name": "gone"}])
    assert "tests.guardrails" not in found and found.endswith("(ModuleNotFoundError).")


def test_moderation_needs_the_openai_key(settings):
    settings.OPENAI_API_KEY = ""
    assert guardrails_problem([{"type": "moderation"}]) == (
        "Guardrail 1 (moderation): needs OPENAI_API_KEY (it asks OpenAI's moderation endpoint), which is not set here."
    )
