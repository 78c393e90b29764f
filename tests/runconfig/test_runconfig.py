"""The one list of run options: the typed value, its storage, resolution and the validator's messages."""

from __future__ import annotations

from dataclasses import fields

import pytest

from agents.models import Agent, Run
from agents.runconfig import resolve, validate
from agents.runconfig.config import RunConfig
from agents.runconfig.options import BY_NAME, LIMIT_MAX, NAMES
from agents.runs import agent_config, options, submit


def test_the_config_has_the_lists_options_in_its_order():
    assert tuple(f.name for f in fields(RunConfig)) == NAMES


def test_the_limits_bound_is_the_integer_columns():
    column = Run._meta.get_field("max_tool_calls")
    assert LIMIT_MAX == 2_147_483_647 == BY_NAME["max_tool_calls"].high
    assert column.get_internal_type() == "PositiveIntegerField"


def test_a_run_gives_back_the_config_it_was_stored_with(alice):
    run = submit.start_run(owner=alice, options=submit.RunOptions(input="hi", mode="background", max_turns=3))
    config = Run.objects.get(pk=run.pk).config
    assert config == run.config
    assert (config.max_turns, config.provider, config.agents, config.tool_limits) == (3, "demo", [], {})
    assert Run(**config.columns()).config == config  # one value stores and reads back whole


def test_an_agent_made_through_the_orm_is_stored_as_before(db):
    agent = Agent.objects.create(
        name="a", provider="demo", instructions="be brief", max_turns=4, output_schema={"type": "object"}
    )
    stored = Agent.objects.get(pk=agent.pk)
    assert (stored.max_turns, stored.instructions, stored.output_schema) == (4, "be brief", {"type": "object"})
    assert stored.config.max_turns == 4 and stored.config.timeout_s == 60.0


def test_resolution_keeps_an_agents_brakes():
    merged = resolve.over_agent(
        {"max_tool_calls": 9, "guardrails": [{"type": "pii"}], "sensitive_tools": ("b",)},
        {"max_tool_calls": 3, "guardrails": [{"type": "max_length", "chars": 10}], "sensitive_tools": ["a"]},
    )
    assert merged["max_tool_calls"] == 3
    assert merged["guardrails"] == [{"type": "max_length", "chars": 10}, {"type": "pii"}]
    assert merged["sensitive_tools"] == ("a", "b")


@pytest.mark.django_db
def test_one_validator_answers_drf_shaped_problems():
    found = agent_config.problems({"max_turns": 99, "max_tool_calls": 0, "tools": ["nope"]})
    assert found["max_turns"] == ["Must be between 1 and 50."]
    assert found["max_tool_calls"] == [f"Must be a whole number from 1 to {LIMIT_MAX}."]
    assert found["tools"][0].startswith("Unknown tool(s): nope. Known: ")
    assert validate.type_problems({"max_turns": "4", "tools": 3}, lambda value: False) == {
        "max_turns": ["Expected an integer."],
        "tools": ["Expected a list of tool names."],
    }
    assert options.world().tools()  # the registry's tools
