"""The one way an agent changes: create, update, delete and restore, each in one transaction that also records the
new immutable version (the API and the admin both come here). Values are checked with the run configuration's own
validator first (agents.runs.agent_config.problems) and the online evaluators' check, so an agent saved here runs.

Versions are numbered per name from 1 and kept when the agent is deleted (the runs that used one still name it);
an agent made again under a deleted one's name goes on from the last number, so `name@n` never means two things."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.db.models import Max

from agents.errors import InvalidRequest
from agents.evals import online
from agents.models import Agent, AgentVersion
from agents.runconfig.options import AGENT_OPTIONS
from agents.runs import agent_config

log = logging.getLogger(__name__)

# What a version holds: the agent's description, every option it may set (as stored: empty means the default) and
# its online evaluators. Its name is the version's own column.
FIELDS = ("description", *AGENT_OPTIONS, "evaluators")


def snapshot(agent: Agent) -> dict[str, Any]:
    """The agent's configuration as a version stores it."""
    return {name: getattr(agent, name) for name in FIELDS}


def problems(values: Mapping[str, Any], name: str) -> dict[str, list[str]]:
    """What is wrong with an agent's values as a whole (those a run would refuse, and its evaluators), by field."""
    found = agent_config.problems({option: values.get(option) for option in AGENT_OPTIONS}, name)
    evaluators = online.evaluator_problems(values.get("evaluators"))
    if evaluators:
        found["evaluators"] = evaluators
    return found


def _checked(values: Mapping[str, Any], name: str) -> None:
    found = problems(values, name)
    if found:
        raise InvalidRequest(found)


def record(agent: Agent, by: Any, *, restored_from: int | None = None) -> AgentVersion:
    """Record the agent as it is now as its next version (inside the caller's transaction, the agent's row saved)."""
    last = AgentVersion.objects.filter(name=agent.name).aggregate(last=Max("version"))["last"] or 0
    version = AgentVersion.objects.create(
        agent=agent,
        name=agent.name,
        version=last + 1,
        config=snapshot(agent),
        created_by=by if getattr(by, "pk", None) else None,
        restored_from=restored_from,
    )
    Agent.objects.filter(pk=agent.pk).update(version=version.version)
    agent.version = version.version
    log.info("agent %s is now version %d", agent.name, version.version)
    return version


def create(values: Mapping[str, Any], by: Any) -> Agent:
    """A new agent from checked field values (`name` among them), as its version 1 (or next after a deleted one's)."""
    name = values["name"]
    fields = {field: values[field] for field in FIELDS if values.get(field) is not None}
    _checked(fields, name)
    with transaction.atomic():
        if Agent.objects.select_for_update().filter(name=name).exists():
            raise InvalidRequest({"name": [f"An agent named {name!r} exists already."]})
        agent = Agent(name=name, **fields, updated_by=by if getattr(by, "pk", None) else None)
        agent.evaluators = fields.get("evaluators") or []
        agent.save()
        record(agent, by)
    return agent


def update(name: str, changes: Mapping[str, Any], by: Any, *, restored_from: int | None = None) -> Agent:
    """Change the named agent's fields (None: back to the default) and record the result as a new version; a change
    that changes nothing makes no version."""
    with transaction.atomic():
        agent = Agent.objects.select_for_update().filter(name=name).first()
        if agent is None:
            raise Agent.DoesNotExist(f"No agent named {name!r}.")
        merged = {**snapshot(agent), **changes}
        for field, value in merged.items():
            column = Agent._meta.get_field(field)
            if value is None and not column.null:
                merged[field] = column.get_default()  # unset: "" for a text, [] for a list that cannot be null
        _checked({k: v for k, v in merged.items() if v not in (None, "")}, name)
        if merged == snapshot(agent) and restored_from is None:
            return agent
        for field, value in merged.items():
            setattr(agent, field, value)
        agent.updated_by = by if getattr(by, "pk", None) else None
        agent.save()
        record(agent, by, restored_from=restored_from)
    return agent


def restore(name: str, number: int, by: Any) -> AgentVersion:
    """Make the named agent what its version `number` was, as a new version (which says it restores `number`)."""
    stored = AgentVersion.objects.filter(name=name, version=number).first()
    if stored is None or not Agent.objects.filter(name=name).exists():
        raise Agent.DoesNotExist(f"Agent {name!r} has no version {number}.")
    config = {field: stored.config.get(field) for field in FIELDS}
    agent = update(name, config, by, restored_from=number)
    return AgentVersion.objects.get(name=name, version=agent.version)


def delete(name: str, by: Any) -> None:
    """Delete the named agent; its versions stay (runs that used one still name it)."""
    with transaction.atomic():
        deleted, _ = Agent.objects.filter(name=name).delete()
    if not deleted:
        raise Agent.DoesNotExist(f"No agent named {name!r}.")
    log.info("agent %s deleted by %s; its versions are kept", name, getattr(by, "pk", None))


def versions(name: str):
    """The named agent's versions, newest first (NotFound when no agent has that name now)."""
    if not Agent.objects.filter(name=name).exists():
        raise Agent.DoesNotExist(f"No agent named {name!r}.")
    return AgentVersion.objects.filter(name=name).select_related("created_by").order_by("-version")
