"""A run request's options and how they become the run's config: the request as the services take it
(`RunOptions`), checked against the tools and models this server has and its safety ceilings, then resolved into a
`RunConfig` (agents/runconfig/). Services layer: what validation asks of the system (`world`) is read here."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, make_dataclass, replace
from typing import TYPE_CHECKING, Any

from django.conf import settings

from agents.engine import parts
from agents.errors import InvalidRequest
from agents.guardrails import guardrails_problem
from agents.models import Agent, RunMode
from agents.providers import accepts_documents, accepts_images
from agents.runconfig import resolve, validate
from agents.runconfig.config import RunConfig
from agents.runconfig.options import LIMIT_MAX, NAMES, OPTIONS, REQUEST_LIMITS, RUN_LIMITS, Option
from agents.runs import runtime

__all__ = ["LIMIT_MAX", "REQUEST_LIMITS", "RUN_LIMITS"]

# What a run created on a thread that has a run in progress does (API: `multitask_strategy`; agents/runs/multitask.py).
MULTITASK_STRATEGIES = ("reject", "enqueue", "interrupt", "rollback")


@dataclass(frozen=True)
class ChildLink:
    """Where a child run comes from: its parent run, the model step and call that asked for it, its depth."""

    parent_id: uuid.UUID
    step: int | None
    call_id: str
    depth: int


@dataclass(frozen=True)
class RunRequest:
    """What a run request is besides its options: its input, mode, thread, agent and labels."""

    input: str  # with parts, their text (agents.engine.parts.text_of)
    mode: str = RunMode.SYNC
    thread_id: uuid.UUID | str | None = None
    agent: str | None = None  # an Agent's name: the run starts from its configuration; fields given here override it
    agent_version: int | None = None  # the agent's version it runs (set from `agent`'s "name@n", else its current)
    input_parts: list[dict] | None = None  # the input as a list of parts (checked by the API), or None for a string
    child_of: ChildLink | None = None  # a sub-agent's run: the parent call that starts it (agents/runs/children.py)
    multitask_strategy: str = "reject"  # with thread_id, when the thread has a run in progress (MULTITASK_STRATEGIES)
    metadata: dict | None = None  # the client's own labels (checked by the API: agents.runs.search.metadata_problem)

    def values(self) -> dict[str, Any]:
        """Its options by name, as given."""
        return {name: getattr(self, name) for name in NAMES}


def _given(option: Option) -> tuple[str, Any, Any]:
    """A request's field for an option: None (the agent's, else the server's default) unless the option has a
    fixed default of its own (sensitive tools: none added; reflections: none)."""
    fixed = option.default if option.setting is None and option.default not in (None, "") else None
    return option.name, Any, field(default=fixed)


if TYPE_CHECKING:

    class RunOptions(RunRequest):
        """What the type checker sees of the class made below: a RunRequest plus an attribute per option."""

        def __init__(self, *, input: str, **fields: Any) -> None: ...

        def __getattr__(self, name: str) -> Any: ...

else:
    # A request for a run: the request's own fields, then every option of agents/runconfig/options.py as given.
    RunOptions = make_dataclass("RunOptions", [_given(o) for o in OPTIONS], bases=(RunRequest,), frozen=True)
    RunOptions.__doc__ = "A request for a run: what it is (RunRequest) and its options as given (the option list's)."
    RunOptions.__module__ = __name__


def world() -> validate.World:
    """What validating options asks of this server now: its tools, its agents, whether guardrails build."""
    return validate.World(
        tools=lambda: runtime.tool_registry().names(), agents=_agent_graph, guardrails_problem=guardrails_problem
    )


def _agent_graph(name: str) -> dict[str, list[str]]:
    """Every agent but `name`, with the agents it calls."""
    rows = Agent.objects.exclude(name=name).values_list("name", "agents")
    return {other: calls if isinstance(calls, list) else [] for other, calls in rows}


def tool_names(names: list[str] | None, field: str) -> list[str]:
    """The run's tools: every enabled one for None; an unknown name is a 400 naming `field`."""
    known = runtime.tool_registry().names()
    if names is None:
        return known
    found = validate.tool_problems(names, field, known)
    if found:
        raise InvalidRequest(found)
    return sorted(set(names))


def checked_safety(options: RunOptions) -> RunOptions:
    """The options with the server's default limits under them, checked (400 naming the field): limits within the
    ceilings, per-tool limits of known tools, guardrails and fallback models usable."""
    values = options.values()
    found = validate.safety_problems(values, world())
    if found:
        raise InvalidRequest(found)
    return replace(options, **resolve.limit_defaults(values))


def check_media(options: RunOptions, provider: str, model: str) -> None:
    """An input with images or documents needs a model that takes them (agents.providers.accepts_images,
    accepts_documents): else 400, before anything is stored."""
    for what, found, takes in (("images", parts.images, accepts_images), ("documents", parts.files, accepts_documents)):
        if found(options.input_parts) and not takes(provider, model):
            message = (
                f"Model '{model}' of provider '{provider}' does not take {what}; choose a model that does, or send "
                "the input as text."
            )
            raise InvalidRequest({"input": [message]})


def document_budget(options: RunOptions, provider: str, model: str) -> int:
    """How many of a thread's earlier documents the new run's model may be shown (the new input's count first)."""
    if not accepts_documents(provider, model):
        return 0
    return settings.AGENT_MAX_DOCUMENTS - len(parts.files(options.input_parts))


def image_budget(options: RunOptions, provider: str, model: str) -> int:
    """How many of a thread's earlier images the new run's model may be shown (the new input's count first)."""
    if not accepts_images(provider, model):
        return 0
    return settings.AGENT_MAX_IMAGES - len(parts.images(options.input_parts))


def checked_config(options: RunOptions) -> RunConfig:
    """The config a request runs with, checked (a 400 names the field at fault): its provider and model, its input
    against the model, its tools, and its safety settings; what it left out is the server's default. The agent's
    configuration is under it already (`agent_config.with_agent`)."""
    provider, model = validate.checked_model(options.provider, options.model)
    check_media(options, provider, model)
    names = tool_names(options.tools, "tools")
    sensitive = runtime.sensitive_names(names, also=tool_names(list(options.sensitive_tools), "sensitive_tools"))
    checked = checked_safety(options).values()
    return resolve.resolve(
        {**checked, "provider": provider, "model": model, "tools": names, "sensitive_tools": sensitive}
    )
