"""An agent as runs use it: looked up by name and put under a request's options (its brakes holding), and checked
as a run would check it (the console's form, schedules). The rules are agents/runconfig/'s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from agents.errors import InvalidRequest
from agents.models import Agent
from agents.runconfig import resolve, validate
from agents.runs.options import RunOptions, world


def with_agent(options: RunOptions) -> RunOptions:
    """The options with the named agent's configuration under them: a field the request gave wins; sensitive tools
    are the union (a request can widen the approval gate, never narrow it); the agent's brakes hold
    (agents.runconfig.resolve). Unknown agent: InvalidRequest."""
    if options.agent is None:
        return options
    agent = Agent.objects.filter(name=options.agent).first()
    if agent is None:
        known = ", ".join(Agent.objects.order_by("name").values_list("name", flat=True)[:20]) or "none yet"
        raise InvalidRequest({"agent": [f"No agent named {options.agent!r}. Known: {known}."]})
    merged = resolve.over_agent(options.values(), agent.option_values())
    if "output_schema" in merged:  # stored before references were checked: refused as a request's would be
        problem = validate.output_schema_problem(merged["output_schema"])
        if problem:
            raise InvalidRequest({"output_schema": [f"Agent {agent.name!r}: {problem}"]})
    return replace(options, **merged)


def problems(values: Mapping[str, Any], name: str = "") -> dict[str, list[str]]:
    """What a run would refuse in these agent values (an agent's, or a schedule's options over its agent's)."""
    return validate.agent_problems(values, world(), name)


def agent_problems(agent: Agent) -> dict[str, list[str]]:
    """What a run would refuse in this agent's configuration, by field (the admin shows them before saving)."""
    return problems(agent.option_values(), agent.name)
