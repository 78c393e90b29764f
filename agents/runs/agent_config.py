"""An agent as runs use it: looked up by name and put under a request's options (its brakes holding), and checked
as a run would check it (the console's form, schedules). The rules are agents/runconfig/'s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from agents.errors import InvalidRequest
from agents.models import Agent, AgentVersion
from agents.runconfig import resolve, validate
from agents.runconfig.options import AGENT_OPTIONS
from agents.runs.options import RunOptions, world

VERSION_SEPARATOR = "@"  # "name@3": version 3 of agent `name` (docs/agents.md#versions)
REF_MAX_LENGTH = 80  # an agent's name (64) with "@" and a version


@dataclass(frozen=True)
class AgentChoice:
    """The agent a request names, found: its name, the version it runs, and that version's option values."""

    name: str
    version: int | None
    values: dict[str, Any]


def split_ref(ref: str) -> tuple[str, int | None]:
    """An agent's name and the version a reference asks for ("name" → None: its current one; "name@3" → 3).
    A version that is not a whole number from 1: InvalidRequest naming `agent`."""
    name, separator, number = ref.partition(VERSION_SEPARATOR)
    if not separator:
        return ref, None
    if not number.isascii() or not number.isdigit() or int(number) < 1:
        message = f"A version is a whole number from 1 ({name}@1, {name}@2, …), not {number!r}."
        raise InvalidRequest({"agent": [message]})
    return name, int(number)


def find(ref: str) -> AgentChoice:
    """The agent a request names ("name" or "name@n"): its current configuration, or version n's. An unknown agent or
    version: InvalidRequest naming `agent`, with what is known."""
    name, number = split_ref(ref)
    agent = Agent.objects.filter(name=name).first()
    if agent is None:
        known = ", ".join(Agent.objects.order_by("name").values_list("name", flat=True)[:20]) or "none yet"
        raise InvalidRequest({"agent": [f"No agent named {name!r}. Known: {known}."]})
    if number is None or number == agent.version:
        return AgentChoice(agent.name, agent.version or None, agent.option_values())
    stored = AgentVersion.objects.filter(name=name, version=number).values_list("config", flat=True).first()
    if stored is None:
        message = f"Agent {name!r} has no version {number} (its versions: 1 to {agent.version})."
        raise InvalidRequest({"agent": [message]})
    return AgentChoice(agent.name, number, {option: stored.get(option) for option in AGENT_OPTIONS})


def with_agent(options: RunOptions) -> RunOptions:
    """The options with the named agent's configuration (its current version's, or `name@n`'s) under them: a field
    the request gave wins; sensitive tools are the union (a request can widen the approval gate, never narrow it);
    the agent's brakes hold (agents.runconfig.resolve). The run records the agent's name and version. Unknown agent
    or version: InvalidRequest."""
    if options.agent is None:
        return options
    choice = find(options.agent)
    merged = resolve.over_agent(options.values(), choice.values)
    if "output_schema" in merged:  # stored before references were checked: refused as a request's would be
        problem = validate.output_schema_problem(merged["output_schema"])
        if problem:
            raise InvalidRequest({"output_schema": [f"Agent {choice.name!r}: {problem}"]})
    return replace(options, **merged, agent=choice.name, agent_version=choice.version)


def problems(values: Mapping[str, Any], name: str = "") -> dict[str, list[str]]:
    """What a run would refuse in these agent values (an agent's, or a schedule's options over its agent's)."""
    return validate.agent_problems(values, world(), name)


def agent_problems(agent: Agent) -> dict[str, list[str]]:
    """What a run would refuse in this agent's configuration, by field (the admin shows them before saving)."""
    return problems(agent.option_values(), agent.name)
