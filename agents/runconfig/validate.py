"""The one validator of run options: given raw values (a request's options, an agent's, a schedule's stored ones) it
answers DRF-shaped problems, `{field: [message, ...]}`, with the messages a client has always been given.

What it needs to know of the rest of the system (the tools this server has, the other agents, whether guardrails
build) comes in a `World`, so this package sits beside the models and imports nothing above them."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from agents.engine import schemas
from agents.errors import InvalidRequest
from agents.providers import ProviderConfigError, validate_choice
from agents.providers.fallback import fallback_problem
from agents.runconfig.options import BY_NAME, LIMIT_MAX, LIMITS, RUN_LIMITS

Problems = dict[str, list[str]]
AGENT_TOOL_PREFIX = "agent_"  # the tool through which a run calls another agent (agents/runs/tree.py)


@dataclass(frozen=True)
class World:
    """What validation asks of the running system: the tools it has now (sorted names), the other agents and whom
    each calls (all but the one named), and why a list of guardrails does not build (or None)."""

    tools: Callable[[], list[str]]
    agents: Callable[[str], dict[str, list[str]]]
    guardrails_problem: Callable[[Any], str | None]


def outside_limits(value: Any) -> bool:
    """Whether a per-run limit (or a per-tool one) is not a whole number from 1 to LIMIT_MAX."""
    return isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= LIMIT_MAX


def checked_model(provider: str | None, model: str | None) -> tuple[str, str]:
    """A request's provider (the default when none is given) and model (the provider's default when none is given),
    checked: InvalidRequest naming the field at fault."""
    provider = provider or settings.AGENT_DEFAULT_PROVIDER
    try:
        return provider, validate_choice(provider, model)
    except ProviderConfigError as exc:
        raise InvalidRequest({"model" if "Model" in str(exc) else "provider": [str(exc)]}) from None


def model_problems(provider: str | None, model: str | None, *, stored: bool = False) -> Problems:
    """The provider and model, checked as a run checks them (the default provider when none is given). `stored`: an
    agent's, whose error names `model` only when it sets one."""
    try:
        validate_choice(provider or settings.AGENT_DEFAULT_PROVIDER, model or None)
    except ProviderConfigError as exc:
        blames_model = "Model" in str(exc) and (bool(model) or not stored)
        return {"model" if blames_model else "provider": [str(exc)]}
    return {}


def tool_problems(names: Any, field: str, known: Collection[str], *, typed: bool = False) -> Problems:
    """Unknown tool names (`typed`: also anything but a list of strings), naming the known ones."""
    if names is None:
        return {}
    if typed and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        return {field: ["A list of tool names."]}
    unknown = sorted({n for n in names if n not in known})
    if unknown:
        return {field: [f"Unknown tool(s): {', '.join(unknown)}. Known: {', '.join(sorted(known))}."]}
    return {}


def bounds_problems(values: Mapping[str, Any]) -> Problems:
    """Settings outside the bounds an agent may give (a request's fields bound them before they get here)."""
    problems: Problems = {}
    for field, (low, high) in RUN_LIMITS.items():
        value = values.get(field)
        if value is not None and not low <= value <= high:
            problems[field] = [f"Must be between {low} and {high}."]
    return problems


def limit_problems(values: Mapping[str, Any], where: str = "") -> Problems:
    """Per-run limits that are not whole numbers within the column's bound and the server's ceiling."""
    problems: Problems = {}
    for option in LIMITS:
        value, ceiling = values.get(option.name), int(getattr(settings, option.ceiling or ""))
        if value is None:
            continue
        if outside_limits(value):
            problems[option.name] = [f"{where}Must be a whole number from 1 to {LIMIT_MAX}."]
        elif ceiling and value > ceiling:
            problems[option.name] = [f"{where}Must be at most {ceiling} (the server's ceiling, {option.ceiling})."]
    return problems


def safety_problems(values: Mapping[str, Any], world: World, where: str = "") -> Problems:
    """What is wrong with the safety settings (limits, per-tool limits, guardrails, fallback models), by field."""
    problems = limit_problems(values, where)
    checks: dict[str, Callable[[Any], str | None]] = {
        "tool_limits": lambda value: tool_limits_problem(value, world, values.get("agents")),
        "guardrails": world.guardrails_problem,
        "fallback_models": fallback_problem,
    }
    for name, check in checks.items():
        value = values.get(name)
        problem = check(value) if value is not None else None
        if problem:
            problems[name] = [where + problem]
    return problems


def tool_limits_problem(value: Any, world: World, agents: list[str] | None = None) -> str | None:
    """Why `value` is not an object of known tool names to whole numbers >= 1 (at most the tool-call ceiling)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return 'An object of tool names to the most calls each, e.g. {"search": 3}.'
    known = set(world.tools()) | {AGENT_TOOL_PREFIX + a for a in agents or [] if isinstance(a, str)}
    unknown = sorted(str(n) for n in value if n not in known)
    if unknown:
        return f"Unknown tool(s): {', '.join(unknown)}. Known: {', '.join(sorted(known))}."
    ceiling = int(settings.AGENT_MAX_TOOL_CALLS_CEILING)
    for name, limit in value.items():
        if outside_limits(limit):
            return f"The limit of {name!r} must be a whole number from 1 to {LIMIT_MAX}."
        if ceiling and limit > ceiling:
            return f"The limit of {name!r} must be at most {ceiling} (AGENT_MAX_TOOL_CALLS_CEILING)."
    return None


def agents_problem(name: str, names: Any, world: World) -> str | None:
    """Why the agents an agent lists (to call as tools) cannot be saved: not a list of names, an unknown agent, or
    a cycle (A calls B calls A: a run could never end but by its budgets)."""
    if names is None or names == []:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return "A list of agent names."
    graph = world.agents(name)
    unknown = sorted({n for n in names if n not in graph and n != name})
    if unknown:
        return f"Unknown agent(s): {', '.join(unknown)}. Known: {', '.join(sorted(graph)) or 'none yet'}."
    graph[name] = names
    path = _cycle(graph, name)
    if path:
        return f"These agents would call each other in a cycle: {' -> '.join(path)}."
    return None


def _cycle(graph: dict[str, list[str]], start: str) -> list[str] | None:
    """A path from `start` back to itself through `graph` (names -> the names they call), or None."""
    stack, seen = [(start, [start])], set()
    while stack:
        name, path = stack.pop()
        for nxt in graph.get(name, []):
            if nxt == start:
                return [*path, nxt]
            if nxt not in seen:
                seen.add(nxt)
                stack.append((nxt, [*path, nxt]))
    return None


def output_schema_problem(schema: Any) -> str | None:
    """Why `schema` is not a usable output schema (a valid JSON Schema object whose references all resolve inside
    it: nothing is ever fetched), or None."""
    return schemas.schema_problem(schema)


# Checks of an option's value beyond its type, by option: what a request's field runs too.
VALUE_CHECKS: dict[str, Callable[[Any], str | None]] = {"output_schema": output_schema_problem}


def agent_problems(values: Mapping[str, Any], world: World, name: str = "") -> Problems:
    """What a run would refuse in an agent's values (or a schedule's options over its agent's), by field."""
    problems: Problems = {}
    if values.get("provider") or values.get("model"):
        problems |= model_problems(values.get("provider"), values.get("model"), stored=True)
    known = world.tools()
    for field in ("tools", "sensitive_tools"):
        problems |= tool_problems(values.get(field), field, known, typed=True)
    problem = agents_problem(name, values.get("agents"), world)
    if problem:
        problems["agents"] = [problem]
    problems |= bounds_problems(values)
    problem = output_schema_problem(values["output_schema"]) if values.get("output_schema") is not None else None
    if problem:
        problems["output_schema"] = [problem]
    return problems | safety_problems(values, world)


_TYPE_NAMES = {
    bool: "true or false",
    str: "a string",
    int: "an integer",
    float: "a number",
    list: "a list",
    dict: "an object",
}


def type_problems(options: Mapping[str, Any], has_nul: Callable[[Any], bool]) -> Problems:
    """Stored options whose value is not of the option's type (or holds a NUL character), by field."""
    problems: Problems = {}
    for name, value in options.items():
        option = BY_NAME.get(name)
        kinds = option.types if option else (str,)  # `agent`: an agent's name
        if (isinstance(value, bool) and bool not in kinds) or not isinstance(value, kinds):
            described = option.described if option and option.described else _TYPE_NAMES[kinds[-1]]
            problems[name] = [f"Expected {described}."]
        elif name == "tools" and isinstance(value, list) and not all(isinstance(n, str) for n in value):
            problems[name] = ["Expected a list of tool names."]
        elif has_nul(value):
            problems[name] = ["Null characters are not allowed."]
    return problems
