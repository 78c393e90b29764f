"""What a client submits: a run (checked, stored and, for a sync run, driven to its end), a thread, a direct
tool call. Services own their transactions.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.contrib.admin.models import DELETION, LogEntry
from django.db import IntegrityError, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from agents.engine import parts, schemas
from agents.engine.dispatch import ToolResult, Toolset, run_tool, schema_error
from agents.errors import InvalidRequest, NotAllowed, ThreadBusy, UnknownTool
from agents.guardrails import guardrails_problem, redact_input, redacted_parts
from agents.limits import quotas
from agents.limits.owners import OwnerFacts
from agents.models import Agent, Run, RunMode, RunStatus, Thread
from agents.permissions import can_delete, can_invoke_sensitive
from agents.providers import ProviderConfigError, accepts_images, validate_choice
from agents.providers.fallback import fallback_problem
from agents.runs import drive, idempotency, leases, multitask, persist, rows, runtime, store, telemetry, tree
from agents.tools import ToolContext

log = logging.getLogger(__name__)


# What a run created on a thread that has a run in progress does (API: `multitask_strategy`; agents/runs/multitask.py).
MULTITASK_STRATEGIES = ("reject", "enqueue", "interrupt", "rollback")


@dataclass(frozen=True)
class RunOptions:
    input: str  # with parts, their text (agents.engine.parts.text_of)
    mode: str = RunMode.SYNC
    protocol: str | None = None
    provider: str | None = None
    model: str | None = None
    max_turns: int | None = None  # None: the agent's, else AGENT_DEFAULT_MAX_TURNS
    timeout_s: float | None = None  # None: the agent's, else AGENT_DEFAULT_TIMEOUT_S
    tools: list[str] | None = None
    sensitive_tools: tuple[str, ...] = ()
    max_reflections: int = 0
    thread_id: uuid.UUID | str | None = None
    approval_ttl_s: int | None = None
    agent: str | None = None  # an Agent's name: the run starts from its configuration; fields given here override it
    instructions: str | None = None
    temperature: float | None = None
    max_output_tokens: int | None = None
    output_schema: dict | None = None
    input_parts: list[dict] | None = None  # the input as a list of parts (checked by the API), or None for a string
    agents: list[str] | None = None  # agents this run may call as tools (from its agent)
    child_of: ChildLink | None = None  # a sub-agent's run: the parent call that starts it (agents/runs/children.py)
    multitask_strategy: str = "reject"  # with thread_id, when the thread has a run in progress (MULTITASK_STRATEGIES)
    metadata: dict | None = None  # the client's own labels (checked by the API: agents.runs.search.metadata_problem)
    # Safety and cost (None: the agent's, else the server's defaults): per-run limits, guardrails, fallback models.
    max_total_tokens: int | None = None
    max_tool_calls: int | None = None
    tool_limits: dict[str, int] | None = None
    guardrails: list[dict] | None = None
    fallback_models: list[str] | None = None


@dataclass(frozen=True)
class ChildLink:
    """Where a child run comes from: its parent run, the model step and call that asked for it, its depth."""

    parent_id: uuid.UUID
    step: int | None
    call_id: str
    depth: int


def submit_run(*, owner, options: RunOptions, key_id: int | None = None, facts: OwnerFacts | None = None) -> Run:
    """Create a run and start it as its mode says: sync runs on, step does one unit, background is queued.

    `key_id`: the request's idempotency key, bound to the run as it is inserted (agents/runs/idempotency.py). Over the
    owner's daily token quota: QuotaExceeded (429), and nothing is stored. A sync run whose process is stopping (a
    deploy) is handed back to the queue and returned as it is, continuing in the background. `facts`: what the
    request read about the owner with its credentials (spares the quota's query).

    On a thread with a run in progress, `options.multitask_strategy` decides (agents/runs/multitask.py): with
    `enqueue` the run is returned waiting its turn (status queued, `thread_queued`), neither driven nor queued now.
    """
    if options.mode == RunMode.BACKGROUND:
        with transaction.atomic():  # the run and its task commit together: no run is left without a task
            run = start_run(owner=owner, options=options, key_id=key_id, facts=facts)
            if not run.thread_queued:  # a waiting run's task is queued when its turn comes
                drive.enqueue(run)
        return run
    token = uuid.uuid4().hex
    # Inserted already held by this worker, which calls the model next: like a unit's commit that a model call
    # follows, the insert may skip waiting for its flush (AGENT_RELAXED_COMMITS). The request's last commit waits
    # for it, and so makes the run durable before any response tells the client about it.
    relaxed = settings.AGENT_RELAXED_COMMITS
    run = start_run(owner=owner, options=options, lease_owner=token, relaxed=relaxed, key_id=key_id, facts=facts)
    if run.thread_queued:  # waits for its thread's earlier runs: it starts when they are done
        return run
    held = store.Held(run, token, rows.state_from_rows(run, []), facts=facts.about(owner.pk) if facts else None)
    return drive.drive_held(held, drive.UNTIL_STOPPED if options.mode == RunMode.SYNC else drive.ONE_STEP)


def start_run(
    *,
    owner,
    options: RunOptions,
    lease_owner: str = "",
    new_thread: bool = False,
    relaxed: bool = False,
    key_id: int | None = None,
    facts: OwnerFacts | None = None,
) -> Run:
    """Validate the choices and store a new run (nothing is called yet); `lease_owner` inserts it held. `relaxed`:
    the insert does not wait for the database's flush (persist.insert_run); only for a run this request drives on.

    `new_thread` starts a thread for it (titled from its input) in the same transaction: a run that cannot start
    leaves no empty thread. `key_id`: an idempotency key bound to the run in the insert's transaction. Over the
    owner's daily token quota: QuotaExceeded, and nothing is stored. On a thread with a run in progress,
    `options.multitask_strategy` decides (`_insert`); a run stored waiting its turn comes back not held, with
    `thread_queued` set.
    """
    quotas.check_can_start(owner.pk, facts)
    if new_thread:
        with transaction.atomic():
            thread = create_thread(owner=owner)
            return start_run(
                owner=owner,
                options=replace(options, thread_id=thread.pk),
                lease_owner=lease_owner,
                relaxed=relaxed,
                key_id=key_id,
            )
    options = with_agent(options)
    provider, model = _checked_model(options)
    _check_images(options, provider, model)
    names = _tool_names(options.tools, "tools")
    sensitive = runtime.sensitive_names(names, also=_tool_names(list(options.sensitive_tools), "sensitive_tools"))
    options = checked_safety(options)
    if options.guardrails:  # personal data a pii guardrail redacts on the input: never stored, never sent
        options = replace(
            options,
            input=redact_input(options.guardrails, options.input),
            input_parts=redacted_parts(options.guardrails, options.input_parts),
        )
    thread = _thread_of(owner, options.thread_id)
    run = _new_run(owner, options, thread, [], provider, model, names, sensitive, lease_owner)
    budget = partial(_image_budget, options, provider, model)
    _insert(run, thread, key_id, relaxed, strategy=options.multitask_strategy, image_budget=budget)
    telemetry.run_created(run)
    return run


def _new_run(owner, options: RunOptions, thread, history, provider, model, names, sensitive, lease_owner) -> Run:
    """The run row a checked request makes, with the defaults of what it left out (not stored yet)."""
    now = timezone.now()
    timeout_s = options.timeout_s if options.timeout_s is not None else settings.AGENT_DEFAULT_TIMEOUT_S
    link = options.child_of
    run = Run(
        owner=owner,
        thread=thread,
        parent_id=link.parent_id if link else None,
        parent_step=link.step if link else None,
        parent_call_id=link.call_id if link else "",
        depth=link.depth if link else 0,
        subagents=list(options.agents or []),
        metadata=dict(options.metadata or {}),
        trace_context=telemetry.carrier(),
        history=history,
        agent=options.agent,
        instructions=options.instructions or "",
        temperature=options.temperature,
        max_output_tokens=options.max_output_tokens,
        output_schema=options.output_schema,
        input=options.input,
        input_parts=options.input_parts,
        mode=options.mode,
        protocol=options.protocol or settings.AGENT_DEFAULT_PROTOCOL,
        provider=provider,
        model=model,
        max_turns=options.max_turns if options.max_turns is not None else settings.AGENT_DEFAULT_MAX_TURNS,
        timeout_s=timeout_s,
        tools=names,
        sensitive_tools=sensitive,
        max_reflections=options.max_reflections,
        approval_ttl_s=options.approval_ttl_s or settings.AGENT_APPROVAL_TTL_S,
        status=RunStatus.QUEUED if options.mode == RunMode.BACKGROUND else RunStatus.RUNNING,
        deadline=now + timedelta(seconds=timeout_s),
        lease_owner=lease_owner,
        lease_expires=leases.until() if lease_owner else None,
        created_at=now,
        updated_at=now,
        max_total_tokens=options.max_total_tokens,
        max_tool_calls=options.max_tool_calls,
        tool_limits=dict(options.tool_limits or {}),
        guardrails=list(options.guardrails or []),
        fallback_models=list(options.fallback_models or []),
    )
    return run


# The most any per-run limit may be: its columns' bound (a positive 32-bit integer on PostgreSQL), so more is a 400.
LIMIT_MAX = 2_147_483_647


def outside_limits(value: Any) -> bool:
    """Whether a per-run limit (or a per-tool one) is not a whole number from 1 to LIMIT_MAX."""
    return isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= LIMIT_MAX


# Per-run limits: (the option, the setting of its default, the setting of its ceiling); 0 in a setting: none.
LIMIT_SETTINGS = {
    "max_total_tokens": ("AGENT_DEFAULT_MAX_TOTAL_TOKENS", "AGENT_MAX_TOTAL_TOKENS_CEILING"),
    "max_tool_calls": ("AGENT_DEFAULT_MAX_TOOL_CALLS", "AGENT_MAX_TOOL_CALLS_CEILING"),
}


def checked_safety(options: RunOptions) -> RunOptions:
    """The options with the server's default limits under them, checked (400 naming the field): limits within the
    ceilings, per-tool limits of known tools, guardrails and fallback models usable."""
    found = safety_problems(options)
    if found:
        raise InvalidRequest(found)
    limits: dict[str, Any] = {}
    for name, (default, ceiling) in LIMIT_SETTINGS.items():
        if getattr(options, name) is None:
            limits[name] = int(getattr(settings, default)) or int(getattr(settings, ceiling)) or None
    defaults = dict(settings.AGENT_DEFAULT_TOOL_LIMITS or {})
    limits["tool_limits"] = {**defaults, **(options.tool_limits or {})}
    return replace(options, **limits)


def safety_problems(options: Any, where: str = "") -> dict[str, list[str]]:
    """What is wrong with the safety settings of run options or an agent (the same attributes), by field."""
    problems: dict[str, list[str]] = {}
    for name, (_, ceiling_setting) in LIMIT_SETTINGS.items():
        value, ceiling = getattr(options, name), int(getattr(settings, ceiling_setting))
        if value is None:
            continue
        if outside_limits(value):
            problems[name] = [f"{where}Must be a whole number from 1 to {LIMIT_MAX}."]
        elif ceiling and value > ceiling:
            problems[name] = [f"{where}Must be at most {ceiling} (the server's ceiling, {ceiling_setting})."]
    problem = tool_limits_problem(options.tool_limits, getattr(options, "agents", None))
    if problem:
        problems["tool_limits"] = [where + problem]
    problem = guardrails_problem(options.guardrails) if options.guardrails is not None else None
    if problem:
        problems["guardrails"] = [where + problem]
    problem = fallback_problem(options.fallback_models) if options.fallback_models is not None else None
    if problem:
        problems["fallback_models"] = [where + problem]
    return problems


def tool_limits_problem(value: Any, agents: list[str] | None = None) -> str | None:
    """Why `value` is not an object of known tool names to whole numbers >= 1 (at most the tool-call ceiling)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return 'An object of tool names to the most calls each, e.g. {"search": 3}.'
    known = set(runtime.tool_registry().names()) | {tree.tool_name(a) for a in agents or [] if isinstance(a, str)}
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


def _checked_model(options: RunOptions) -> tuple[str, str]:
    """The run's provider and model, checked (400 naming the field at fault)."""
    provider = options.provider or settings.AGENT_DEFAULT_PROVIDER
    try:
        return provider, validate_choice(provider, options.model)
    except ProviderConfigError as exc:
        field = "model" if "Model" in str(exc) else "provider"
        raise InvalidRequest({field: [str(exc)]}) from None


def _check_images(options: RunOptions, provider: str, model: str) -> None:
    """An input with images needs a model that takes them (agents.providers.accepts_images): else 400, before
    anything is stored."""
    if not parts.images(options.input_parts) or accepts_images(provider, model):
        return
    raise InvalidRequest(
        {
            "input": [
                f"Model '{model}' of provider '{provider}' does not take images; choose a model that does, or send "
                "the input as text."
            ]
        }
    )


def _image_budget(options: RunOptions, provider: str, model: str) -> int:
    """How many of a thread's earlier images the new run's model may be shown (the new input's count first)."""
    if not accepts_images(provider, model):
        return 0
    return settings.AGENT_MAX_IMAGES - len(parts.images(options.input_parts))


def _insert(
    run: Run,
    thread: Thread | None,
    key_id: int | None,
    relaxed: bool,
    *,
    strategy: str = "reject",
    image_budget: Callable[[], int] = lambda: 0,
) -> None:
    """Store the new run; with a key, bind it in the same transaction. In a thread, one short transaction with the
    thread locked: room is made as `strategy` says when a run is in progress (agents/runs/multitask.py: ThreadBusy,
    or the run waits its turn, or the runs in progress are cancelled or rolled back), the run's history is read (the
    thread's finished runs, an interrupted one's calls included), the run is stored and an untitled thread titled.
    The thread's partial unique index stays the last word: a second active run is refused (ThreadBusy)."""
    if thread is None and key_id is None:
        persist.insert_run(run, relaxed=relaxed)
        return
    if thread is None:
        with transaction.atomic():  # the key names the run from the moment it exists
            persist.insert_run(run, relaxed=relaxed)
            idempotency.bind(key_id, run.pk)
        return
    try:
        with transaction.atomic():
            multitask.make_room(thread, run, strategy)
            run.history = multitask.history(thread.pk, image_budget=image_budget)
            persist.insert_run(run, relaxed=relaxed and not run.thread_queued)  # a waiting run: no model call next
            if key_id is not None:
                idempotency.bind(key_id, run.pk)
            title = Case(When(title="", then=Value(run.input[:80])), default=F("title"))
            Thread.objects.filter(pk=thread.pk).update(updated_at=run.created_at, title=title)
    except IntegrityError:
        raise ThreadBusy("This thread already has a run in progress; wait for it to finish or cancel it.") from None


# The bounds of a run's settings, in one place: for a request (agents.api.serializers, the served schema and its
# 400s) and an agent (agent_problems, the console's form) alike; the defaults of what a request leaves out are
# settings (AGENT_DEFAULT_MAX_TURNS, AGENT_DEFAULT_TIMEOUT_S, AGENT_APPROVAL_TTL_S).
RUN_LIMITS = {"max_turns": (1, 50), "timeout_s": (1, 600), "temperature": (0, 2), "max_output_tokens": (1, 32000)}
REQUEST_LIMITS = {**RUN_LIMITS, "max_reflections": (0, 5), "approval_ttl_s": (60, 604800)}  # not agent settings


AGENT_FIELDS = (
    "instructions", "provider", "model", "protocol", "tools", "max_turns", "timeout_s", "temperature",
    "max_output_tokens", "output_schema", "agents", "max_total_tokens", "max_tool_calls", "tool_limits", "guardrails",
    "fallback_models",
)  # fmt: skip


def with_agent(options: RunOptions) -> RunOptions:
    """The options with the named agent's configuration under them: a field the request gave wins; sensitive tools
    are the union (a request can widen the approval gate, never narrow it). Unknown agent: InvalidRequest."""
    if options.agent is None:
        return options
    agent = Agent.objects.filter(name=options.agent).first()
    if agent is None:
        known = ", ".join(Agent.objects.order_by("name").values_list("name", flat=True)[:20]) or "none yet"
        raise InvalidRequest({"agent": [f"No agent named {options.agent!r}. Known: {known}."]})
    merged: dict[str, Any] = {}
    for name in AGENT_FIELDS:
        value = getattr(agent, name)
        if getattr(options, name) is None and value not in (None, ""):
            merged[name] = value
    merged["sensitive_tools"] = tuple(sorted({*options.sensitive_tools, *(agent.sensitive_tools or [])}))
    merged |= _agent_brakes(agent, options)
    if "output_schema" in merged:  # stored before references were checked: refused as a request's would be
        problem = output_schema_problem(merged["output_schema"])
        if problem:
            raise InvalidRequest({"output_schema": [f"Agent {agent.name!r}: {problem}"]})
    return replace(options, **merged)


def _agent_brakes(agent, options: RunOptions) -> dict[str, Any]:
    """An agent's brakes hold for every run of it: a request may lower its limits, never raise them, and its
    guardrails come first, before any the request adds (like sensitive tools: a run can tighten, never loosen)."""
    brakes: dict[str, Any] = {}
    for name in ("max_total_tokens", "max_tool_calls"):
        mine, theirs = getattr(agent, name), getattr(options, name)
        if mine is not None and theirs is not None:
            brakes[name] = min(mine, theirs) if isinstance(theirs, int) else theirs
    if isinstance(agent.tool_limits, dict) and options.tool_limits is not None:
        limits = dict(options.tool_limits) if isinstance(options.tool_limits, dict) else options.tool_limits
        if isinstance(limits, dict):
            for tool, most in agent.tool_limits.items():
                given = limits.get(tool)
                limits[tool] = min(most, given) if isinstance(given, int) and isinstance(most, int) else most
        brakes["tool_limits"] = limits
    if isinstance(agent.guardrails, list) and agent.guardrails and options.guardrails is not None:
        given = options.guardrails if isinstance(options.guardrails, list) else []
        brakes["guardrails"] = [*agent.guardrails, *given]
    return brakes


def agent_problems(agent) -> dict[str, list[str]]:
    """What a run would refuse in this agent's configuration, by field (the admin shows them before saving)."""
    problems: dict[str, list[str]] = {}
    if agent.provider or agent.model:
        try:
            validate_choice(agent.provider or settings.AGENT_DEFAULT_PROVIDER, agent.model or None)
        except ProviderConfigError as exc:
            problems["model" if "Model" in str(exc) and agent.model else "provider"] = [str(exc)]
    for field in ("tools", "sensitive_tools"):
        names = getattr(agent, field)
        if names is None:
            continue
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            problems[field] = ["A list of tool names."]
            continue
        try:
            _tool_names(names, field)
        except InvalidRequest as exc:
            problems.update(exc.detail)
    problem = agents_problem(agent)
    if problem:
        problems["agents"] = [problem]
    for field, (low, high) in RUN_LIMITS.items():
        value = getattr(agent, field)
        if value is not None and not low <= value <= high:
            problems[field] = [f"Must be between {low} and {high}."]
    if agent.output_schema is not None:
        problem = output_schema_problem(agent.output_schema)
        if problem:
            problems["output_schema"] = [problem]
    problems.update(safety_problems(agent))
    return problems


def agents_problem(agent) -> str | None:
    """Why the agents this agent lists (to call as tools) cannot be saved: not a list of names, an unknown agent, or
    a cycle (A calls B calls A: a run could never end but by its budgets)."""
    names = agent.agents
    if names is None or names == []:
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return "A list of agent names."
    graph = {a.name: a.agents if isinstance(a.agents, list) else [] for a in Agent.objects.exclude(name=agent.name)}
    unknown = sorted({n for n in names if n not in graph and n != agent.name})
    if unknown:
        return f"Unknown agent(s): {', '.join(unknown)}. Known: {', '.join(sorted(graph)) or 'none yet'}."
    graph[agent.name] = names
    path = _cycle(graph, agent.name)
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


def _thread_of(owner, thread_id) -> Thread | None:
    """The owner's thread the run continues (None without one); a malformed, unknown or foreign id is a 400. Its
    history is read later, with the thread locked (`_insert`)."""
    if thread_id is None:
        return None
    try:
        thread_id = uuid.UUID(str(thread_id))
    except ValueError:
        raise InvalidRequest({"thread_id": ["Must be a valid UUID."]}) from None
    thread = Thread.objects.filter(pk=thread_id, owner=owner).first()
    if thread is None:
        raise InvalidRequest({"thread_id": ["No thread with this id."]})
    return thread


def create_thread(*, owner, title: str = "", metadata: dict | None = None) -> Thread:
    return Thread.objects.create(owner=owner, title=title, metadata=metadata or {})


def delete_run(*, actor, run: Run) -> None:
    """Delete a run with its steps and child runs (one cascade, in one transaction). Another user's run needs the
    delete permission (else it reads as missing: a reviewer keeps the read) and leaves an audit entry."""
    _check_delete(actor, run)
    with transaction.atomic():
        _audit_deletion(actor, run, lambda: f"{run.steps.count()} steps and {run.children.count()} child runs")
        run.delete()


def delete_thread(*, thread: Thread, actor=None) -> None:
    """Delete a thread with its runs and their steps (one cascade, in one transaction). With an actor (the API):
    another user's thread needs the delete permission and leaves an audit entry; the admin records its own."""
    if actor is not None:
        _check_delete(actor, thread)
    with transaction.atomic():
        if actor is not None:
            _audit_deletion(actor, thread, lambda: f"{thread.runs.count()} runs")
        thread.delete()


def _check_delete(actor, obj: Run | Thread) -> None:
    if not can_delete(actor, obj):
        raise type(obj).DoesNotExist()  # a 404, as for any object the caller may not touch


def _audit_deletion(actor, obj: Run | Thread, contents: Callable[[], str]) -> None:
    """A deletion by someone other than the owner, in the admin's log (who, when, what): shown in the console."""
    if obj.owner_id == actor.pk:
        return
    owner = type(actor).objects.filter(pk=obj.owner_id).values_list(type(actor).USERNAME_FIELD, flat=True).first()
    message = f"Deleted over the API: {obj} of {owner}, with {contents()}."
    LogEntry.objects.log_actions(actor.pk, [obj], DELETION, change_message=message, single_object=True)


def _tool_names(names: list[str] | None, field: str) -> list[str]:
    registry = runtime.tool_registry()
    if names is None:
        return registry.names()
    unknown = sorted({n for n in names if registry.get(n) is None})
    if unknown:
        raise InvalidRequest({field: [f"Unknown tool(s): {', '.join(unknown)}. Known: {', '.join(registry.names())}."]})
    return sorted(set(names))


def invoke_tool(*, actor, name: str, arguments: Any) -> ToolResult:
    """Run one tool directly for the actor (no run): sensitive tools need the approval right."""
    tool = runtime.tool_registry().get(name)
    if tool is None:
        raise UnknownTool(f"Unknown tool '{name}'.")
    if runtime.is_sensitive(tool) and not can_invoke_sensitive(actor):
        raise NotAllowed("This tool is sensitive: invoking it needs the agents.review_run permission.")
    problem = schema_error(tool.parameters, arguments)
    if problem is not None:
        raise InvalidRequest({"arguments": [problem]})
    toolset = Toolset({name: tool}, ToolContext(user_id=actor.pk), settings.AGENT_MAX_TOOL_OUTPUT_CHARS)
    return run_tool(toolset, name, arguments, tool.timeout_s)
