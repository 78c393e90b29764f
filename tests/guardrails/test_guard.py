"""The Guard a run's guardrails make (agents.guardrails.guard_for): stages, order, actions, redaction, hooks."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from agents.engine.types import Verdict
from agents.guardrails import guard_for, redact_input
from tests.guardrails import hooks

HOOKS = {
    "no_competitors": "tests.guardrails.hooks.no_competitors",
    "verdict": "tests.guardrails.hooks.verdict",
    "raises": "tests.guardrails.hooks.raises",
    "number": "tests.guardrails.hooks.answers_a_number",
}


@pytest.fixture(autouse=True)
def _hooks(settings):
    settings.AGENT_GUARDRAIL_HOOKS = HOOKS
    hooks.CALLS.clear()


def guard(*guardrails):
    return guard_for(SimpleNamespace(guardrails=list(guardrails), deadline=None))


def test_no_guardrails_no_guard():
    assert guard() is None
    assert guard_for(SimpleNamespace(guardrails=None, deadline=None)) is None


def test_only_moderation_and_hooks_call_out(settings):
    settings.OPENAI_API_KEY = "sk-test-" + "x" * 8
    assert guard({"type": "pii"}, {"type": "regex", "patterns": ["x"]}).calls_out is False
    assert guard({"type": "pii"}, {"type": "moderation"}).calls_out is True
    assert guard({"type": "hook", "name": "no_competitors"}).calls_out is True


def test_a_deny_pattern_names_its_number_never_what_matched():
    g = guard({"type": "regex", "patterns": ["nothing", r"pass\w+"], "name": "words"})
    assert g.check("input", "my password is hunter2") == Verdict("words", "the text matches deny pattern 2", "stop")
    assert g.check("input", "my PASSWORD is hunter2") is None  # case matters unless ignore_case
    assert guard({"type": "regex", "patterns": ["password"], "ignore_case": True}).check("output", "PASSWORD")


def test_tool_arguments_are_checked_as_their_json_text():
    g = guard({"type": "regex", "patterns": [r'"expression": "[^"]*\*'], "action": "correct"})
    verdict = g.check("tool_arguments", tool="calculator", arguments={"expression": "12*7"})
    assert verdict == Verdict("regex", "the arguments match deny pattern 1", "correct")
    assert g.check("tool_arguments", tool="calculator", arguments={"expression": "12+7"}) is None


def test_a_guardrail_checks_only_its_own_stages():
    g = guard({"type": "regex", "patterns": ["x"], "on": ["output"]})
    assert g.check("input", "x") is None
    assert g.check("tool_output", "x", tool="search") is None
    assert g.check("output", "x") is not None


def test_the_first_guardrail_that_trips_wins():
    g = guard(
        {"type": "regex", "patterns": ["zzz"], "name": "first"},
        {"type": "max_length", "chars": 3, "name": "second"},
        {"type": "regex", "patterns": ["long"], "name": "third"},
    )
    assert g.check("output", "a long answer").guardrail == "second"
    assert g.check("output", "zzz long").guardrail == "first"


def test_redaction_applies_every_pii_guardrail_of_the_stage_in_order():
    g = guard(
        {"type": "pii", "kinds": ["email"], "name": "mails"},
        {"type": "pii", "kinds": ["card"], "name": "cards", "on": ["output"]},
    )
    text = "jane@example.com paid with 4111 1111 1111 1111"
    assert g.redact("output", text) == "[email] paid with [card]"
    assert g.redact("tool_output", text) == "[email] paid with 4111 1111 1111 1111"
    assert g.check("output", text) is None  # redacted already: nothing left to trip on


def test_pii_that_stops_names_the_kinds_found_not_the_data():
    g = guard({"type": "pii", "action": "stop", "on": ["output", "tool_arguments"]})
    verdict = g.check("output", "Mail jane@example.com or call +44 20 7946 0958")
    assert verdict == Verdict("pii", "it contains personal data (email, phone)", "stop")
    assert g.redact("output", "jane@example.com") == "jane@example.com"  # it stops; it does not redact
    assert g.check("tool_arguments", tool="search", arguments={"query": "card 4111111111111111"}).reason == (
        "it contains personal data (card)"
    )


def test_max_length_counts_the_final_answers_characters():
    g = guard({"type": "max_length", "chars": 5, "action": "correct"})
    assert g.check("output", "12345") is None
    assert g.check("output", "123456") == Verdict("max_length", "it is 6 characters long, more than 5", "correct")


def test_a_tool_schema_checks_its_own_tools_arguments_only():
    g = guard({"type": "tool_schema", "tool": "calculator", "schema": {"properties": {"expression": {"maxLength": 4}}}})
    verdict = g.check("tool_arguments", tool="calculator", arguments={"expression": "12*7+1"})
    assert verdict.guardrail == "tool_schema"
    assert verdict.reason == "they do not fit its schema: expression: '12*7+1' is too long"
    assert g.check("tool_arguments", tool="calculator", arguments={"expression": "12*7"}) is None
    assert g.check("tool_arguments", tool="search", arguments={"expression": "12*7+1"}) is None


def test_a_hooks_string_trips_with_the_guardrails_action():
    g = guard({"type": "hook", "name": "no_competitors", "action": "correct"})
    assert g.check("output", "ACME is better") == Verdict("no_competitors", "it names a competitor", "correct")
    assert g.check("output", "We are better") is None
    g.check("tool_arguments", tool="search", arguments={"query": "acme"})
    assert hooks.CALLS[-1] == ("tool_arguments", '{"query": "acme"}', "search", {"query": "acme"})


def test_a_hooks_verdict_is_its_answer():
    assert guard({"type": "hook", "name": "verdict"}).check("input", "hi") == Verdict(
        "house-rules", "the house rules say no", "correct"
    )


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("raises", "the hook raised RuntimeError"),
        ("number", "the hook returned a int, not None, a string or a Verdict"),
    ],
)
def test_a_hook_that_fails_stops_the_run_without_showing_its_error(name, why, caplog):
    verdict = guard({"type": "hook", "name": name, "action": "correct"}).check("input", "card 4111 1111 1111 1111")
    assert verdict == Verdict(name, f"the check could not be made ({why})", "stop")
    assert "4111" not in caplog.text and "boom" not in caplog.text


def test_guardrails_that_no_longer_build_stop_the_run(settings):
    """A hook removed from the settings after the run was made: its guard fails closed at the next check."""
    run = SimpleNamespace(guardrails=[{"type": "hook", "name": "no_competitors"}], deadline=None)
    settings.AGENT_GUARDRAIL_HOOKS = {}
    g = guard_for(run)
    verdict = g.check("output", "fine")
    assert (verdict.guardrail, verdict.action) == ("guardrails", "stop")
    assert verdict.reason.startswith("the check could not be made (the guardrails cannot be used: Guardrail 1 (hook)")


def test_redact_input_applies_the_pii_guardrails_on_the_input():
    text = "I am jane@example.com, card 4111 1111 1111 1111"
    assert redact_input([{"type": "pii"}], text) == "I am [email], card [card]"
    assert redact_input([{"type": "pii", "kinds": ["card"]}], text) == "I am jane@example.com, card [card]"
    assert redact_input([{"type": "pii", "on": ["output"]}], text) == text
    assert redact_input([{"type": "pii", "action": "stop"}], text) == text  # it stops the run instead
    assert redact_input([], text) == text
    assert redact_input(None, text) == text
