"""Writes: start, advance, decide, cancel. Services own transactions and the run lease.

No database lock or transaction is held across a model call: a worker claims the run with a conditional
UPDATE (the lease), does a unit of work with no transaction open, then commits the unit's steps and the run
row in one short transaction, only while the lease is still its own.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from agents import engine, runtime
from agents.engine import RunState
from agents.engine.dispatch import ToolResult, Toolset, run_tool, schema_error
from agents.models import Run, RunMode, RunStatus, Step, StopReason
from agents.permissions import can_decide, can_invoke_sensitive
from agents.providers import ProviderConfigError, validate_choice
from agents.tools import ToolContext

log = logging.getLogger(__name__)
LEASE_GRACE_S = 30.0


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
    """409: another worker is advancing this run right now."""


class RunFinished(ServiceError):
    """409: the run is done."""


class UnknownTool(ServiceError):
    """404: no tool of that name."""


@dataclass(frozen=True)
class RunOptions:
    input: str
    mode: str = RunMode.SYNC
    protocol: str | None = None
    provider: str | None = None
    model: str | None = None
    max_turns: int = 8
    timeout_s: float = 60.0
    tools: list[str] | None = None
    sensitive_tools: tuple[str, ...] = ()
    max_reflections: int = 0


def start_run(*, owner, options: RunOptions) -> Run:
    """Validate the choices and store a new run (nothing is called yet)."""
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
    return Run.objects.create(
        owner=owner,
        input=options.input,
        mode=options.mode,
        protocol=options.protocol or settings.AGENT_DEFAULT_PROTOCOL,
        provider=provider,
        model=model,
        max_turns=options.max_turns,
        timeout_s=options.timeout_s,
        tools=names,
        sensitive_tools=sensitive,
        max_reflections=options.max_reflections,
        status=RunStatus.QUEUED if options.mode == RunMode.BACKGROUND else RunStatus.RUNNING,
        deadline=timezone.now() + timedelta(seconds=options.timeout_s),
    )


def _tool_names(names: list[str] | None, field: str) -> list[str]:
    registry = runtime.tool_registry()
    if names is None:
        return registry.names()
    unknown = sorted({n for n in names if registry.get(n) is None})
    if unknown:
        raise InvalidRequest({field: [f"Unknown tool(s): {', '.join(unknown)}. Known: {', '.join(registry.names())}."]})
    return sorted(set(names))


def execute(*, run_id: uuid.UUID | str, units: int | None = None) -> Run:
    """Advance a running (or queued) run: `units` units, or until it stops or pauses (None)."""
    return _work(run_id, statuses=[RunStatus.QUEUED, RunStatus.RUNNING], units=units)


def enqueue(run: Run) -> None:
    """Put a background run on the task queue (a row in the same database, so it commits with the caller)."""
    from agents.tasks import advance_in_background

    advance_in_background.enqueue(str(run.pk))


def advance_run(*, run_id, actor, approval: bool | None = None, arguments=None, reason: str | None = None) -> Run:
    """The API's advance: one unit for a running run; a decision (then continue per mode) when paused."""
    run = Run.objects.get(pk=run_id)
    if run.status == RunStatus.DONE:
        raise RunFinished("The run is done.")
    if run.status == RunStatus.AWAITING_APPROVAL:
        if approval is None:
            raise InvalidRequest({"approval": ["This run is awaiting approval: send approval true or false."]})
        return decide_approval(run_id=run_id, actor=actor, approved=approval, arguments=arguments, reason=reason)
    return execute(run_id=run_id, units=1)


def decide_approval(
    *, run_id, actor, approved: bool, arguments=None, reason: str | None = None, continue_run: bool = False
) -> Run:
    """Record a reviewer's decision on the pending call; the run then continues as its mode says.

    `continue_run` (the admin console) drives any run on until it pauses again or stops.
    """
    run = Run.objects.get(pk=run_id)
    if not can_decide(actor, run):
        raise NotAllowed("You may not decide approvals for this run.")
    if run.status != RunStatus.AWAITING_APPROVAL:
        raise (
            RunFinished("The run is not awaiting approval.")
            if run.status == RunStatus.DONE
            else RunBusy("The run is not awaiting approval.")
        )
    if arguments is not None:  # checked before anything is recorded: a bad edit is a 400, never a failed tool step
        _check_edited_arguments(run, arguments)
    decision = {"approved": approved, "arguments": arguments, "reason": reason, "reviewer": actor.get_username()}
    background = run.mode == RunMode.BACKGROUND
    units = None if (run.mode == RunMode.SYNC or (continue_run and not background)) else 0
    run = _work(run_id, statuses=[RunStatus.AWAITING_APPROVAL], units=units, decision=decision)
    if background and run.status == RunStatus.RUNNING:
        enqueue(run)  # back on the queue: a worker continues it
    return run


def _check_edited_arguments(run: Run, arguments: Any) -> None:
    """Edited arguments must fit the waiting tool's JSON Schema (the API and the admin share this rule)."""
    pending = runtime.pending_action(run) or {}
    tool = runtime.tool_registry().get(pending.get("tool", ""))
    problem = schema_error(tool.parameters, arguments) if tool else None
    if problem is None and not isinstance(arguments, dict):
        problem = "arguments must be a JSON object"
    if problem is not None:
        raise InvalidRequest({"arguments": [f"The edited arguments do not fit the tool's schema: {problem}"]})


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
    return Run.objects.get(pk=run_id)


def _claim(run_id, statuses: list[str]) -> str:
    """Take the run's lease with one conditional UPDATE; raise RunBusy / RunFinished when it can't be had."""
    token, now = uuid.uuid4().hex, timezone.now()
    free = Q(lease_owner="") | Q(lease_expires__lt=now)
    claimed = Run.objects.filter(Q(pk=run_id) & Q(status__in=statuses) & free).update(
        lease_owner=token, lease_expires=now + timedelta(seconds=LEASE_GRACE_S)
    )
    if claimed:
        return token
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None:
        raise Run.DoesNotExist
    if status == RunStatus.DONE:
        raise RunFinished("The run is done.")
    raise RunBusy("Another request is advancing this run right now.")


def _work(run_id, *, statuses: list[str], units: int | None, decision: dict | None = None) -> Run:
    token = _claim(run_id, statuses)
    try:
        run = Run.objects.select_related("owner").get(pk=run_id)
        _renew(run, token)
        state = runtime.state_from_rows(run, run.steps.order_by("index"))
        if state.status == RunStatus.QUEUED:  # a worker picked it up
            state.status = RunStatus.RUNNING
            Run.objects.filter(pk=run.pk, lease_owner=token).update(status=RunStatus.RUNNING)
        if decision is not None:
            state = _apply_decision(run, token, state, decision)
        _units(run, token, state, units)
    finally:
        Run.objects.filter(pk=run_id, lease_owner=token).update(lease_owner="", lease_expires=None)
    return Run.objects.get(pk=run_id)


def _renew(run: Run, token: str) -> None:
    """Hold the lease for the rest of the run's budget plus a grace period."""
    remaining = max((run.deadline - timezone.now()).total_seconds(), 0.0)
    Run.objects.filter(pk=run.pk, lease_owner=token).update(
        lease_expires=timezone.now() + timedelta(seconds=remaining + LEASE_GRACE_S)
    )


def _apply_decision(run: Run, token: str, state: RunState, decision: dict) -> RunState:
    # Waiting for a human does not eat the run's budget: the deadline moves by the time spent paused.
    paused_for = max((timezone.now() - run.updated_at).total_seconds(), 0.0)
    run.deadline = run.deadline + timedelta(seconds=paused_for)
    state.deadline = runtime.to_epoch(run.deadline)
    Run.objects.filter(pk=run.pk).update(deadline=run.deadline)
    _renew(run, token)  # the lease covers the moved deadline, so no second worker claims the run meanwhile
    state, events = engine.decide(
        state, runtime.build_toolset(run), runtime.clock, interrupt=_interrupt(run), **decision
    )
    _commit(run, token, state, events)
    return state


def _units(run: Run, token: str, state: RunState, units: int | None) -> None:
    if state.status != RunStatus.RUNNING or units == 0:
        return
    try:
        model = runtime.build_model(run)
    except ProviderConfigError as exc:
        state.finish(engine.StopReason.MODEL_ERROR, error=str(exc))
        _commit(run, token, state, [])
        return
    toolset, done = runtime.build_toolset(run), 0
    while state.status == RunStatus.RUNNING and (units is None or done < units):
        state, events = engine.advance(state, model, toolset, runtime.clock, interrupt=_interrupt(run))
        _commit(run, token, state, events)
        done += 1


def _interrupt(run: Run):
    """Checked by the engine before each model and tool call: has someone cancelled the run?"""
    return lambda: Run.objects.filter(pk=run.pk, status=RunStatus.DONE).exists()


def _storable(value: Any) -> Any:
    """PostgreSQL text and jsonb cannot hold NUL: model or tool text with one would fail the unit's commit."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_storable(k): _storable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_storable(v) for v in value]
    return value


def _commit(run: Run, token: str, state: RunState, events: list[dict]) -> None:
    """Append the unit's steps and update the run, only while this worker still holds the lease."""
    fields = _storable(runtime.run_fields(state))
    rows = runtime.step_rows(run, events)
    for row in rows:
        row.data = _storable(row.data)
    now = timezone.now()
    try:
        with transaction.atomic():
            ours = Run.objects.filter(pk=run.pk, lease_owner=token)
            updated = ours.exclude(status=RunStatus.DONE).update(**fields, version=F("version") + 1, updated_at=now)
            if not updated:
                # Cancelled meanwhile. Nothing is appended to a done run (an event stream that sent `done` has
                # ended), but the model calls this unit paid for still count in the run's usage.
                counters = {k: fields[k] for k in ("turns", "reflections", "prompt_tokens", "completion_tokens")}
                if not ours.update(**counters):
                    raise RunBusy("This worker lost the run's lease.")
                state.finish(engine.StopReason.CANCELLED)
                return
            Step.objects.bulk_create(rows)
    except IntegrityError:
        raise RunBusy("Another worker recorded these steps first.") from None
    log.info(
        "run unit committed",
        extra={
            "run_id": str(run.pk),
            "user_id": run.owner_id,
            "provider": run.provider,
            "turn": state.turns,
            "status": state.status,
            "steps": len(events),
            "latency_ms": sum(e.get("latency_ms", 0) for e in events),
        },
    )
