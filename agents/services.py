"""Writes: start, advance, decide, cancel. Services own transactions and the run lease.

No database lock or transaction is held across a model call: a worker claims the run with a conditional
UPDATE (the lease), does a unit of work with no transaction open, then commits the unit's steps and the run
row in one short transaction, only while the lease is still its own.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, replace
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from agents import doorbell, engine, idempotency, leases, notify, persist, quotas, rows, runtime
from agents.engine import RunState, schemas
from agents.engine import history as thread_history
from agents.engine.dispatch import ToolResult, Toolset, run_tool, schema_error
from agents.models import Agent, Run, RunMode, RunStatus, StopReason, Thread
from agents.permissions import can_decide, can_invoke_sensitive
from agents.providers import ProviderConfigError, validate_choice
from agents.tools import ToolContext
from reactsite import green

log = logging.getLogger(__name__)


class ServiceError(Exception):
    """Base of the errors a client can cause; `detail` is safe to show."""

    def __init__(self, detail: Any) -> None:
        super().__init__(detail)
        self.detail = detail


class InvalidRequest(ServiceError):
    """400: the request names something that cannot be used."""


class NotAllowed(ServiceError):
    """403."""


class RunBusy(ServiceError):
    """409: another worker is advancing this run right now (or it is not in a status the caller can work on)."""

    def __init__(self, detail: Any, status: str | None = None) -> None:
        super().__init__(detail)
        self.status = status


class RunFinished(ServiceError):
    """409: the run is done."""


class UnknownTool(ServiceError):
    """404: no tool of that name."""


class ThreadBusy(ServiceError):
    """409: the thread's latest run is not done (a thread runs one run at a time)."""


@dataclass(frozen=True)
class RunOptions:
    input: str
    mode: str = RunMode.SYNC
    protocol: str | None = None
    provider: str | None = None
    model: str | None = None
    max_turns: int | None = None  # None: the agent's, else AGENT_DEFAULT_MAX_TURNS (8)
    timeout_s: float | None = None  # None: the agent's, else AGENT_DEFAULT_TIMEOUT_S (60)
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


def submit_run(*, owner, options: RunOptions, key_id: int | None = None) -> Run:
    """Create a run and start it as its mode says: sync runs on, step does one unit, background is queued.

    `key_id`: the request's idempotency key, bound to the run as it is inserted (agents/idempotency.py). Over the
    owner's daily token quota: QuotaExceeded (429), and nothing is stored. A sync run whose process is stopping (a
    deploy) is handed back to the queue and returned as it is, continuing in the background.
    """
    if options.mode == RunMode.BACKGROUND:
        with transaction.atomic():  # the run and its task commit together: no run is left without a task
            run = start_run(owner=owner, options=options, key_id=key_id)
            enqueue(run)
        return run
    token = uuid.uuid4().hex
    # Inserted already held by this worker, which calls the model next: like a unit's commit that a model call
    # follows, the insert may skip waiting for its flush (AGENT_RELAXED_COMMITS). The request's last commit waits
    # for it, and so makes the run durable before any response tells the client about it.
    relaxed = settings.AGENT_RELAXED_COMMITS
    run = start_run(owner=owner, options=options, lease_owner=token, relaxed=relaxed, key_id=key_id)
    held = Held(run, token, rows.state_from_rows(run, []), owner=owner)
    return _drive(held, None if options.mode == RunMode.SYNC else 1)


def start_run(
    *,
    owner,
    options: RunOptions,
    lease_owner: str = "",
    new_thread: bool = False,
    relaxed: bool = False,
    key_id: int | None = None,
) -> Run:
    """Validate the choices and store a new run (nothing is called yet); `lease_owner` inserts it held. `relaxed`:
    the insert does not wait for the database's flush (persist.insert_run); only for a run this request drives on.

    `new_thread` starts a thread for it (titled from its input) in the same transaction: a run that cannot start
    leaves no empty thread. `key_id`: an idempotency key bound to the run in the insert's transaction. Over the
    owner's daily token quota: QuotaExceeded, and nothing is stored.
    """
    quotas.check_can_start(owner)
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
    provider = options.provider or settings.AGENT_DEFAULT_PROVIDER
    try:
        model = validate_choice(provider, options.model)
    except ProviderConfigError as exc:
        field = "model" if "Model" in str(exc) else "provider"
        raise InvalidRequest({field: [str(exc)]}) from None
    names = _tool_names(options.tools, "tools")
    flagged = {t.name for t in runtime.tool_registry().select(names).values() if t.sensitive}
    client = set(_tool_names(list(options.sensitive_tools), "sensitive_tools"))
    sensitive = sorted(set(runtime.sensitive_floor()) | flagged | client)
    thread, history = _thread_and_history(owner, options.thread_id)
    now = timezone.now()
    timeout_s = options.timeout_s if options.timeout_s is not None else settings.AGENT_DEFAULT_TIMEOUT_S
    deadline = now + timedelta(seconds=timeout_s)
    run = Run(
        owner=owner,
        thread=thread,
        history=history,
        agent=options.agent,
        instructions=options.instructions or "",
        temperature=options.temperature,
        max_output_tokens=options.max_output_tokens,
        output_schema=options.output_schema,
        input=options.input,
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
        deadline=deadline,
        lease_owner=lease_owner,
        lease_expires=leases.until() if lease_owner else None,
        created_at=now,
        updated_at=now,
    )
    if thread is None and key_id is None:
        persist.insert_run(run, relaxed=relaxed)
        return run
    if thread is None:
        with transaction.atomic():  # the key names the run from the moment it exists
            persist.insert_run(run, relaxed=relaxed)
            idempotency.bind(key_id, run.pk)
        return run
    try:
        with transaction.atomic():  # the thread's partial unique index refuses a second run that is not done
            persist.insert_run(run, relaxed=relaxed)
            if key_id is not None:
                idempotency.bind(key_id, run.pk)
            title = Case(When(title="", then=Value(options.input[:80])), default=F("title"))
            Thread.objects.filter(pk=thread.pk).update(updated_at=now, title=title)
    except IntegrityError:
        raise ThreadBusy("This thread already has a run in progress; wait for it to finish or cancel it.") from None
    return run


# The bounds of a run's settings, for a request (agents.api.serializers) and an agent (agent_problems) alike.
RUN_LIMITS = {"max_turns": (1, 50), "timeout_s": (1, 600), "temperature": (0, 2), "max_output_tokens": (1, 32000)}

AGENT_FIELDS = (
    "instructions", "provider", "model", "protocol", "tools", "max_turns", "timeout_s", "temperature",
    "max_output_tokens", "output_schema",
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
    if "output_schema" in merged:  # stored before references were checked: refused as a request's would be
        problem = output_schema_problem(merged["output_schema"])
        if problem:
            raise InvalidRequest({"output_schema": [f"Agent {agent.name!r}: {problem}"]})
    return replace(options, **merged)


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
    for field, (low, high) in RUN_LIMITS.items():
        value = getattr(agent, field)
        if value is not None and not low <= value <= high:
            problems[field] = [f"Must be between {low} and {high}."]
    if agent.output_schema is not None:
        problem = output_schema_problem(agent.output_schema)
        if problem:
            problems["output_schema"] = [problem]
    return problems


def output_schema_problem(schema: Any) -> str | None:
    """Why `schema` is not a usable output schema (a valid JSON Schema object whose references all resolve inside
    it: nothing is ever fetched), or None."""
    return schemas.schema_problem(schema)


def _thread_and_history(owner, thread_id) -> tuple[Thread | None, list[dict]]:
    """The owner's thread and its earlier runs as the new run's history (bounded): two queries, however long."""
    if thread_id is None:
        return None, []
    try:
        thread_id = uuid.UUID(str(thread_id))
    except ValueError:
        raise InvalidRequest({"thread_id": ["Must be a valid UUID."]}) from None
    thread = Thread.objects.filter(pk=thread_id, owner=owner).first()
    if thread is None:
        raise InvalidRequest({"thread_id": ["No thread with this id."]})
    latest = Run.objects.filter(thread=thread).order_by("-created_at")
    limit = max(settings.AGENT_THREAD_HISTORY_RUNS, 1)  # the latest run is read even with no history shown
    turns = list(latest.values("input", "output", "stop_reason", "status")[:limit])
    if turns and turns[0]["status"] != RunStatus.DONE:
        raise ThreadBusy(f"This thread's latest run is {turns[0]['status']}; wait for it to finish or cancel it.")
    turns = [{k: t[k] for k in ("input", "output", "stop_reason")} for t in reversed(turns)]
    return thread, thread_history.bounded(
        turns, settings.AGENT_THREAD_HISTORY_RUNS, settings.AGENT_THREAD_HISTORY_CHARS
    )


def create_thread(*, owner, title: str = "") -> Thread:
    return Thread.objects.create(owner=owner, title=title)


def delete_thread(*, thread: Thread) -> None:
    """Delete a thread with its runs and their steps (one cascade, in one transaction)."""
    with transaction.atomic():
        thread.delete()


def _tool_names(names: list[str] | None, field: str) -> list[str]:
    registry = runtime.tool_registry()
    if names is None:
        return registry.names()
    unknown = sorted({n for n in names if registry.get(n) is None})
    if unknown:
        raise InvalidRequest({field: [f"Unknown tool(s): {', '.join(unknown)}. Known: {', '.join(registry.names())}."]})
    return sorted(set(names))


def execute(*, run_id: uuid.UUID | str, units: int | None = None, start_budget: bool = False, owner=None) -> Run:
    """Advance a running (or queued) run: `units` units, or until it stops or pauses (None). `owner`: the run's
    owner, when the caller has the user object (spares reading their quota)."""
    held = _hold(run_id, [RunStatus.QUEUED, RunStatus.RUNNING], start_budget=start_budget, owner=owner)
    return _drive(held, units)


def enqueue(run: Run, *, delay_s: float = 0.0) -> None:
    """Put a background run on the task queue (a row in the same database, so it commits with the caller)."""
    from agents.tasks import advance_in_background

    task = advance_in_background
    if delay_s > 0:
        task = task.using(run_after=timezone.now() + timedelta(seconds=delay_s))
    task.enqueue(str(run.pk))


BUSY_RETRY_S = 2.0


def run_background(*, run_id) -> str:
    """A task's share of a background run: drive it until it stops or pauses. The status it was left in.

    A run that another worker holds right now is not dropped: the task comes back once that lease may be over. A
    queued run's time budget starts now, when a worker first takes it.
    """
    try:
        return execute(run_id=run_id, start_budget=True).status
    except RunFinished:
        return "skipped"
    except RunBusy as exc:
        if exc.status not in (RunStatus.QUEUED, RunStatus.RUNNING):
            return "skipped"  # awaiting a decision: the decision re-queues it
        enqueue(Run(pk=run_id), delay_s=BUSY_RETRY_S)
        return "requeued"


def advance_run(
    *,
    run_id,
    actor,
    approval: bool | None = None,
    arguments=None,
    reason: str | None = None,
    decisions: list[dict] | None = None,
    owner_id: int | None = None,
) -> Run:
    """The API's advance: one unit for a running run; a decision (then continue per mode) when paused.

    Over the run owner's daily token quota: QuotaExceeded (429) before anything is recorded or called. `owner_id`
    (the caller read the run) spares a read.
    """
    if owner_id is None:
        owner_id = Run.objects.filter(pk=run_id).values_list("owner_id", flat=True).first()
    if owner_id is not None:
        quotas.check_can_start(actor if owner_id == actor.pk else _user(owner_id))
    if approval is not None or decisions is not None:  # a decision: for a paused run only, never a plain step
        return decide_approval(
            run_id=run_id, actor=actor, approved=approval, arguments=arguments, reason=reason, decisions=decisions
        )
    try:
        return execute(run_id=run_id, units=1, owner=actor)
    except RunBusy as exc:
        if exc.status != RunStatus.AWAITING_APPROVAL:
            raise
    raise InvalidRequest({"approval": ["This run is awaiting approval: send approval true or false, or decisions."]})


def decide_approval(
    *,
    run_id,
    actor,
    approved: bool | None = None,
    arguments=None,
    reason: str | None = None,
    decisions: list[dict] | None = None,
    continue_run: bool = False,
) -> Run:
    """Record a reviewer's decisions on pending calls; the run then continues as its mode says.

    `decisions` (`[{"call_id", "approved", "arguments"?, "reason"?}]`) decides several calls of the paused reply at
    once, all or nothing; without it, `approved`/`arguments`/`reason` decide the first pending call.
    `continue_run` (the admin console) drives any run on until it pauses again or stops.
    """
    run = Run.objects.get(pk=run_id)
    if not can_decide(actor, run):
        raise NotAllowed("You may not decide approvals for this run.")
    if run.status != RunStatus.AWAITING_APPROVAL:
        raise (
            RunFinished("The run is not awaiting approval.")
            if run.status == RunStatus.DONE
            else RunBusy("The run is not awaiting approval.", status=run.status)
        )
    if decisions is None:
        if approved is None:
            raise InvalidRequest({"approval": ["Send approval true or false, or decisions."]})
        batch, field = [{"call_id": None, "approved": approved, "arguments": arguments, "reason": reason}], "arguments"
    else:
        batch, field = [dict(d) for d in decisions], "decisions"
    decision = {"decisions": batch, "reviewer": actor.get_username(), "field": field}
    background = run.mode == RunMode.BACKGROUND
    units = None if (run.mode == RunMode.SYNC or (continue_run and not background)) else 0
    return _work(run_id, statuses=[RunStatus.AWAITING_APPROVAL], units=units, decision=decision, owner=actor)


def _user(user_id: int):
    from django.contrib.auth import get_user_model

    return get_user_model()(pk=user_id)


def _checked_decisions(held: Held, decisions: list[dict], field: str) -> list[dict]:
    """The decisions, validated all or nothing against the held state (call ids, each edit against its tool's JSON
    Schema); a single decision without a call id is for the first pending call. Raises InvalidRequest naming `field`.
    """
    waiting = engine.pending_actions(held.state)
    if not waiting:
        raise RunBusy("The run is not awaiting approval.", status=held.state.status)
    if len(decisions) == 1 and decisions[0]["call_id"] is None:
        decisions = [{**decisions[0], "call_id": waiting[0]["call_id"]}]
    problem = engine.decision_problem(held.state, decisions)
    if problem is not None:
        known = ", ".join(a["call_id"] for a in waiting)
        raise InvalidRequest({field: [f"{problem[0].upper()}{problem[1:]} (waiting: {known})."]})
    tools = {a["call_id"]: a["tool"] for a in waiting}
    for decision in decisions:
        if decision.get("approved") and decision.get("arguments") is not None:
            problem = arguments_problem(tools[decision["call_id"]], decision["arguments"])
            if problem is not None:
                where = f" (call {decision['call_id']})" if field == "decisions" else ""
                raise InvalidRequest({field: [f"The edited arguments{where} do not fit the tool's schema: {problem}"]})
    return decisions


def arguments_problem(tool_name: str, arguments: Any) -> str | None:
    """Why edited arguments do not fit the tool's JSON Schema, or None (the API and the admin share this rule)."""
    tool = runtime.tool_registry().get(tool_name)
    problem = schema_error(tool.parameters, arguments) if tool else None
    if problem is None and not isinstance(arguments, dict):
        problem = "arguments must be a JSON object"
    return problem


def invoke_tool(*, actor, name: str, arguments: Any) -> ToolResult:
    """Run one tool directly for the actor (no run): sensitive tools need the approval right."""
    tool = runtime.tool_registry().get(name)
    if tool is None:
        raise UnknownTool(f"Unknown tool '{name}'.")
    if (tool.sensitive or name in runtime.sensitive_floor()) and not can_invoke_sensitive(actor):
        raise NotAllowed("This tool is sensitive: invoking it needs the agents.review_run permission.")
    problem = schema_error(tool.parameters, arguments)
    if problem is not None:
        raise InvalidRequest({"arguments": [problem]})
    toolset = Toolset({name: tool}, ToolContext(user_id=actor.pk), settings.AGENT_MAX_TOOL_OUTPUT_CHARS)
    return run_tool(toolset, name, arguments, tool.timeout_s)


def cancel_run(*, run_id, actor=None) -> Run:
    """Stop a run now; a worker holding it stops before its next model or tool call."""
    updated = (
        Run.objects.filter(pk=run_id)
        .exclude(status=RunStatus.DONE)
        .update(status=RunStatus.DONE, stop_reason=StopReason.CANCELLED, output=None, updated_at=timezone.now())
    )
    if not updated:
        raise RunFinished("The run is already done.")
    doorbell.ring(run_id)
    run = Run.objects.get(pk=run_id)
    notify.run_done(run)  # the conditional UPDATE made it done: once per run
    return run


def _claim(run_id, statuses: list[str], start_budget: bool = False, owner_facts: bool = False) -> tuple[Run, str]:
    """Take the run's lease with one conditional UPDATE that returns the run as taken (a queued run becomes running in
    the same statement); the run and the lease token.

    `start_budget`: a queued run's deadline is reset to now + its timeout_s (its budget starts when a worker first
    takes it, not when it was queued); costs one read, so only the background worker asks for it. `owner_facts`: the
    run carries its owner's quota override and webhook flag (persist.claim).
    """
    token, now = uuid.uuid4().hex, timezone.now()
    run = None
    if start_budget:
        run = persist.claim_queued(run_id, token, now, leases.until(), owner_facts=owner_facts)
    if run is None:
        run = persist.claim(run_id, token, statuses, now, leases.until(), owner_facts=owner_facts)
    if run is not None:
        return run, token
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None:
        raise Run.DoesNotExist
    if status == RunStatus.DONE:
        raise RunFinished("The run is done.")
    raise RunBusy("Another request is advancing this run right now.", status=status)


class Held:
    """A run this worker holds the lease of: the row as last committed and the engine state, kept in memory."""

    def __init__(self, run: Run, token: str, state: RunState, owner=None) -> None:
        self.run, self.token, self.state = run, token, state
        self.owner = owner  # the owner's user object when the caller has it (its quota facts spare a query)
        self.admission: quotas.Admission | None = None  # the owner's quota gate, while units run
        leases.hold(token, run.pk)  # renewed every few seconds while this process works on it
        self.fresh = True  # stored (inserted or committed) since the last cancellation check
        self.released = False

    def interrupt(self) -> bool:
        """Checked by the engine before each model and tool call: has someone cancelled the run?

        Right after our own commit there is no need to ask: its conditional UPDATE found the run not done.
        """
        if self.fresh:
            self.fresh = False
            return False
        return Run.objects.filter(pk=self.run.pk, status=RunStatus.DONE).exists()

    def result(self) -> Run:
        """The run as this worker left it (no read back); the paused call comes from the state."""
        self.run.engine_state = self.state
        return self.run


def _hold(run_id, statuses: list[str], start_budget: bool = False, owner=None) -> Held:
    run, token = _claim(run_id, statuses, start_budget, owner_facts=owner is None)
    try:
        # A run no unit has committed yet (version 0: a queued run's first take) has no steps to read.
        state = rows.state_from_rows(run, run.steps.order_by("index") if run.version else [])
    except BaseException:
        _release(run_id, token)
        raise
    if owner is None:  # a worker: what the quota gate and the notifications ask of the owner came with the run
        owner = SimpleNamespace(pk=run.owner_id, quota_facts=(run.owner_quota,), has_webhooks=run.owner_has_webhooks)
    return Held(run, token, state, owner=owner if owner.pk == run.owner_id else None)


def _release(run_id, token: str) -> None:
    Run.objects.filter(pk=run_id, lease_owner=token).update(lease_owner="", lease_expires=None)


def _work(run_id, *, statuses: list[str], units: int | None, decision: dict | None = None, owner=None) -> Run:
    held = _hold(run_id, statuses, owner=owner)
    return _drive(held, units, decision)


def _drive(held: Held, units: int | None, decision: dict | None = None) -> Run:
    """Record a decision (if any), then `units` units (None: until the run stops or pauses); release the lease."""
    handed_back = False
    try:
        if decision is not None:
            _apply_decision(held, decision, last=units == 0)
        _units(held, units)
    except BaseException as exc:
        if isinstance(exc, Exception):
            raise
        _hand_back(held)  # the process is being stopped (SIGTERM, GreenletExit): hand the run on
        if not isinstance(exc, leases.Stopping):
            raise
        handed_back = True  # a graceful stop: the caller still answers, with the run as it is now
    finally:
        leases.drop(held.token)
        if held.admission is not None:
            held.admission.leave()
        if not held.released:
            _release(held.run.pk, held.token)
    if handed_back:
        return held.result()
    if held.run.mode == RunMode.BACKGROUND and held.state.status == RunStatus.RUNNING:
        enqueue(held.run)  # driven part of the way (a decision, a step): a worker carries it on
    return held.result()


def _hand_back(held: Held) -> None:
    """Release the run now and queue it, so another worker continues it at once (a sync run as a background run)."""
    run = held.run
    Run.objects.filter(pk=run.pk, lease_owner=held.token).update(lease_owner="", lease_expires=None)
    held.released = True
    if held.state.status == RunStatus.RUNNING and continue_elsewhere(run):
        run.mode = RunMode.BACKGROUND


def continue_elsewhere(run: Run) -> bool:
    """Queue a run no worker holds any more, so another worker carries it on: a sync run (whose caller is gone)
    continues as a background run; a step run waits for its client, so it stays. True when queued."""
    if run.mode == RunMode.STEP:
        return False
    if run.mode == RunMode.SYNC:
        Run.objects.filter(pk=run.pk, mode=RunMode.SYNC).update(mode=RunMode.BACKGROUND)
    enqueue(run)
    return True


def _apply_decision(held: Held, decision: dict, last: bool) -> None:
    run = held.run
    now = timezone.now()
    expires = run.approval_expires_at
    if decision["reviewer"] is not None and expires is not None and expires <= now:
        raise RunBusy(f"The approval expired at {expires.isoformat()}; the system denies it.", status=run.status)
    decisions = _checked_decisions(held, decision["decisions"], decision.get("field", "decisions"))
    # Waiting for a human does not eat the run's budget: the deadline moves by the time spent paused.
    paused_for = max((now - run.updated_at).total_seconds(), 0.0)
    run.deadline = run.deadline + timedelta(seconds=paused_for)
    held.state.deadline = rows.to_epoch(run.deadline)
    toolset = runtime.build_toolset(run)
    # The decisions are stored before the tools they allow run: a worker dying in a tool call loses no decision.
    state, events = engine.decide(
        held.state,
        toolset,
        runtime.clock,
        decisions=decisions,
        reviewer=decision["reviewer"],
        interrupt=held.interrupt,
        record_only=True,
    )
    record_only = decision.get("record_only", False)
    _commit(held, state, events, release=record_only)
    if record_only:
        return
    state, events = engine.resume_calls(held.state, toolset, runtime.clock, held.interrupt)
    _commit(held, state, events, release=last or state.status != RunStatus.RUNNING)


EXPIRED = "expired"


def expire_approvals(*, run_id) -> bool:
    """Deny, as the system (`reviewer: null`, `reason: "expired"`), every call of a paused run whose time is up; the
    run then goes on as after a denial: queued for a worker (a sync run, whose caller is gone, as a background run),
    a step run left for its client. False when there was nothing to expire (decided meanwhile, or not yet due).

    Takes the run's lease as a decision does, so of a decision racing the expiry and the expiry exactly one is
    recorded (the other finds the run no longer awaiting, or busy, and records nothing).
    """
    try:
        held = _hold(run_id, [RunStatus.AWAITING_APPROVAL])
    except (RunBusy, RunFinished, Run.DoesNotExist):
        return False
    try:
        expires = held.run.approval_expires_at
        if expires is None or expires > timezone.now():
            return False
        waiting = engine.pending_actions(held.state)
        decisions = [{"call_id": a["call_id"], "approved": False, "reason": EXPIRED} for a in waiting]
        _apply_decision(held, {"decisions": decisions, "reviewer": None, "record_only": True}, last=True)
    finally:
        leases.drop(held.token)
        if not held.released:
            _release(held.run.pk, held.token)
    if held.state.status == RunStatus.RUNNING:
        continue_elsewhere(held.run)
    return True


def sweep_expired_approvals(limit: int = 100) -> int:
    """The worker's schedule: expire every paused run whose calls' time is up (oldest first). How many expired."""
    due = Run.objects.filter(status=RunStatus.AWAITING_APPROVAL, approval_expires_at__lte=timezone.now())
    ids = list(due.order_by("approval_expires_at").values_list("pk", flat=True)[:limit])
    return sum(expire_approvals(run_id=run_id) for run_id in ids)


def _units(held: Held, units: int | None) -> None:
    if held.state.status != RunStatus.RUNNING or units == 0:
        return
    try:
        model = runtime.build_model(held.run)
    except ProviderConfigError as exc:
        state = held.state.copy()
        state.finish(engine.StopReason.MODEL_ERROR, error=str(exc))
        return _commit(held, state, [], release=True)
    held.admission = quotas.Admission.for_run(held.run.owner_id, held.state.deadline, held.owner, held.run.pk)
    model, toolset, done = Unheld(model, held.admission), runtime.build_toolset(held.run), 0
    while held.state.status == RunStatus.RUNNING and (units is None or done < units):
        _unit(held, model, toolset, last_unit=units is not None and done + 1 >= units)
        done += 1


def _unit(held: Held, model, toolset, last_unit: bool) -> None:
    """One unit in two commits: the model's reply is stored before any tool it asked for runs (in one when it asked
    only for instant tools, which run with it: agents/engine/loop.py `instant_calls`)."""
    state, events = engine.advance(held.state, model, toolset, runtime.clock, held.interrupt, reply_only=True)
    calls_wait = state.status == RunStatus.RUNNING and bool(engine.pending_calls(state))
    _commit(held, state, events, release=state.status != RunStatus.RUNNING or (last_unit and not calls_wait))
    if calls_wait and held.state.status == RunStatus.RUNNING:
        state, events = engine.advance(held.state, model, toolset, runtime.clock, held.interrupt)
        _commit(held, state, events, release=state.status != RunStatus.RUNNING or last_unit)


class Unheld:
    """A model whose calls hold no database connection: ours goes back (to the pool, or closed) before each call.

    A run waits on its model for seconds; a connection held meanwhile is one of PostgreSQL's ~100 doing nothing.
    Inside an atomic block (a caller's transaction, as in tests) the connection stays: closing it would break that.
    """

    def __init__(self, model, admission: quotas.Admission | None = None) -> None:
        self.model, self.admission = model, admission

    def complete(self, request):
        if leases.stopping():  # this process is going away: hand the run on rather than start a call
            raise leases.Stopping
        if self.admission is not None:  # the owner's daily quota: wait for room (holding nothing), or stop (HostStop)
            self.admission.leave()  # a reservation of an earlier call whose unit did not commit (a reflection)
            self.admission.enter(request.timeout_s, idle=release_connection, request=request)
        release_connection()
        try:
            return self.model.complete(request)
        finally:
            reacquire_connection()


def release_connection() -> None:
    """Hand this thread's database connection back before it would only wait.

    Used before every model call and between an event stream's polls. Under gevent on SQLite it goes to the
    process's idle set (reactsite/green.py), where other greenlets use it meanwhile; on PostgreSQL it goes back to
    the pool (closed, without one). Without gevent on SQLite it is kept (AGENT_RELEASE_DB_DURING_MODEL_CALLS off by
    default there): a thread's connection is a file handle, not one of a server's slots, and reopening costs ~0.4 ms.
    """
    if connection.in_atomic_block:
        return
    if green.patched() and connection.vendor == "sqlite":
        green.take_back()
    elif settings.AGENT_RELEASE_DB_DURING_MODEL_CALLS:
        connection.close()


def reacquire_connection() -> None:
    """After the wait: an idle open connection, if the process has one, instead of opening a new one."""
    if green.patched():
        green.lend()


def _storable(value: Any) -> Any:
    """PostgreSQL text and jsonb cannot hold NUL: model or tool text with one would fail the unit's commit.

    Almost nothing holds one, so the walk runs only when the value's repr (C code, one pass) shows a NUL as `\\x00`;
    a text that merely spells out those four characters costs a walk that changes nothing. The walk was ~170
    `isinstance` calls per commit of a three-turn run."""
    return _without_nul(value) if "\\x00" in repr(value) else value


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_nul(v) for v in value]
    return value


def _commit(held: Held, state: RunState, events: list[dict], *, release: bool) -> None:
    """Append the unit's steps and update the run in one short transaction, only while the lease is ours.

    The conditional UPDATE is also the cancellation check: when it matches nothing, the run was cancelled (or the
    lease lost) and nothing is appended.
    """
    run, now = held.run, timezone.now()
    fields = _storable(rows.run_fields(state))
    fields |= {"deadline": run.deadline, "updated_at": now, "version": run.version + 1}
    fields["approval_expires_at"] = _expiry(run, held.state.status, state.status, now)
    lease = {"lease_owner": "", "lease_expires": None}
    if not release:
        lease = {"lease_owner": held.token, "lease_expires": leases.until()}
    fields |= lease
    new_steps = rows.step_values(run.pk, [_storable(e) for e in events], now)
    rings = doorbell.kind() == "postgres" and connection.vendor == "postgresql"  # the commit NOTIFYs, no round trip
    relaxed = not release and _only_a_model_call_follows(state)
    try:
        if not persist.commit_unit(
            run.pk, held.token, fields, new_steps, notify=doorbell.CHANNEL if rings else None, relaxed=relaxed
        ):
            return _cancelled(held, state, fields)
    except IntegrityError:
        raise RunBusy("Another worker recorded these steps first.") from None
    for name, value in fields.items():
        setattr(run, name, value)
    before = held.state.status
    held.state, held.fresh, held.released = state, True, release
    if held.admission is not None:
        held.admission.leave()  # the call's tokens are counted now (the commit's trigger): its reservation goes
    if not rings:
        doorbell.ring(run.pk)  # committed: streams waiting on this run wake now
    _log_commit(run, state, events)
    _announce(run, before, state.status, held.owner)


def _only_a_model_call_follows(state: RunState) -> bool:
    """Whether, after this commit, the run's next act is a model call: it goes on, and no tool call waits (a tool may
    have side effects, and what it acts on must be stored for good first). Such a commit may skip waiting for the
    database's flush (settings.AGENT_RELAXED_COMMITS): losing it to a database crash costs a repeated model call."""
    return settings.AGENT_RELAXED_COMMITS and state.status == RunStatus.RUNNING and not engine.pending_calls(state)


def _announce(run: Run, before: str, after: str, owner=None) -> None:
    """Tell reviewers and the owner's webhooks about a status change this commit made (after it, outside any
    transaction: a caller's atomic block defers it to its own commit)."""
    if after == before or after not in (RunStatus.DONE, RunStatus.AWAITING_APPROVAL):
        return
    announce = notify.run_done if after == RunStatus.DONE else notify.run_awaiting_approval
    if connection.in_atomic_block:
        transaction.on_commit(lambda: announce(run, owner))
    else:
        announce(run, owner)


def _expiry(run: Run, before: str, after: str, now):
    """When the calls of a paused run expire: set as it starts waiting (again), cleared once it is not waiting."""
    if after != RunStatus.AWAITING_APPROVAL:
        return None
    if before == RunStatus.AWAITING_APPROVAL and run.approval_expires_at is not None:
        return run.approval_expires_at
    return now + timedelta(seconds=run.approval_ttl_s)


def _cancelled(held: Held, state: RunState, fields: dict) -> None:
    """Cancelled meanwhile: nothing is appended to a done run (a stream that sent `done` has ended), but the model
    calls this unit paid for still count in the run's usage."""
    counters = {k: fields[k] for k in ("turns", "reflections", "prompt_tokens", "completion_tokens")}
    ours = Run.objects.filter(pk=held.run.pk, lease_owner=held.token)
    if not ours.update(**counters, lease_owner="", lease_expires=None):
        raise RunBusy("This worker lost the run's lease.")
    committed = held.state.steps
    held.run.refresh_from_db()
    held.state = rows.state_from_rows(held.run, [])
    held.state.steps = list(committed)
    held.released = True


def _log_commit(run: Run, state: RunState, events: list[dict]) -> None:
    """One INFO line per finished run; a DEBUG line per commit."""
    extra = {
        "run_id": str(run.pk),
        "user_id": run.owner_id,
        "provider": run.provider,
        "turn": state.turns,
        "status": state.status,
        "steps": len(events),
        "latency_ms": sum(e.get("latency_ms", 0) for e in events),
    }
    if state.status == RunStatus.DONE:
        log.info("run finished", extra={**extra, "stop_reason": state.stop_reason, "total_steps": len(state.steps)})
    elif log.isEnabledFor(logging.DEBUG):
        log.debug("run unit committed", extra=extra)
