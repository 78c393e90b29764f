"""Driving a run: claim its lease, do units of work with no transaction open, commit each unit, hand the run
back when the process stops. No lock, transaction or connection is held across a model call.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta
from typing import Any

from django.utils import timezone

from agents import engine
from agents.engine.dispatch import schema_error
from agents.errors import InvalidRequest, RunBusy, RunFinished
from agents.models import Run, RunMode, RunStatus, StopReason
from agents.providers import ProviderConfigError
from agents.runs import (
    calls,
    doorbell,
    leases,
    live,
    persist,
    rows,
    runtime,
    settle,
    step_cache,
    store,
    telemetry,
    thread_summary,
    tree,
)
from agents.runs.handoff import continue_elsewhere, enqueue
from agents.usage import quotas
from agents.usage.owners import OwnerFacts

log = logging.getLogger(__name__)

# How far a run is driven (the `units` of execute, work and drive_held), by name rather than by magic value.
UNTIL_STOPPED: int | None = None  # until it finishes or pauses for a decision (sync runs, workers)
RECORD_ONLY = 0  # record the decision and run nothing now (a background run's worker carries it on)
ONE_STEP = 1  # one unit: a model reply and the tools it asked for (step runs)


def execute(
    *,
    run_id: uuid.UUID | str,
    units: int | None = UNTIL_STOPPED,
    start_budget: bool = False,
    facts: OwnerFacts | None = None,
) -> Run:
    """Advance a running (or queued) run: `units` units, or until it stops or pauses (UNTIL_STOPPED). `facts`: what
    the caller read about a user with something else (the run's owner's spare reading their quota)."""
    held = hold(run_id, [RunStatus.QUEUED, RunStatus.RUNNING], start_budget=start_budget, facts=facts)
    return drive_held(held, units)


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


def _checked_decisions(held: store.Held, decisions: list[dict], field: str) -> list[dict]:
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
    settle.settle(run)  # the conditional UPDATE made it done: once per run
    for child_id in Run.objects.filter(parent_id=run_id).exclude(status=RunStatus.DONE).values_list("pk", flat=True):
        try:
            cancel_run(run_id=child_id, actor=actor)  # the children go with it (theirs too)
        except RunFinished:
            pass  # done meanwhile
    return run


def _claim(
    run_id, statuses: list[str], start_budget: bool = False, owner_facts: bool = False
) -> tuple[Run, str, OwnerFacts | None]:
    """Take the run's lease with one conditional UPDATE that returns the run as taken (a queued run becomes running in
    the same statement); the run, the lease token and (with `owner_facts`) its owner's facts.

    `start_budget`: a queued run's deadline is reset to now + its timeout_s (its budget starts when a worker first
    takes it, not when it was queued); costs one read, so only the background worker asks for it. `owner_facts`: the
    owner's quota override and webhook flag come with the run (persist.claim).
    """
    token, now = uuid.uuid4().hex, timezone.now()
    claimed = None
    if start_budget:
        claimed = persist.claim_queued(run_id, token, now, leases.until(), owner_facts=owner_facts)
    if claimed is None:
        claimed = persist.claim(run_id, token, statuses, now, leases.until(), owner_facts=owner_facts)
    if claimed is not None:
        return claimed[0], token, claimed[1]
    status = Run.objects.filter(pk=run_id).values_list("status", flat=True).first()
    if status is None:
        raise Run.DoesNotExist
    if status == RunStatus.DONE:
        raise RunFinished("The run is done.")
    raise RunBusy("Another request is advancing this run right now.", status=status)


def hold(run_id, statuses: list[str], start_budget: bool = False, facts: OwnerFacts | None = None) -> store.Held:
    """Take the run's lease and its state. `facts` (a caller's, perhaps about another user): without them the
    owner's come with the claim (a worker's)."""
    run, token, claimed = _claim(run_id, statuses, start_budget, owner_facts=facts is None)
    try:
        # The steps at the run's version: none before its first commit, this process's own when it made that
        # version, else read from the database (agents/runs/step_cache.py).
        state = rows.state_from_rows(run, step_cache.steps_of(run))
    except BaseException:
        leases.release(run_id, token)
        raise
    return store.Held(run, token, state, facts=claimed if facts is None else facts.about(run.owner_id))


def work(
    run_id, *, statuses: list[str], units: int | None, decision: dict | None = None, facts: OwnerFacts | None = None
) -> Run:
    held = hold(run_id, statuses, facts=facts)
    return drive_held(held, units, decision)


def drive_held(held: store.Held, units: int | None, decision: dict | None = None) -> Run:
    """Record a decision (if any), then `units` units (UNTIL_STOPPED, RECORD_ONLY, ONE_STEP or more); release the
    lease."""
    handed_back = False
    age = (timezone.now() - held.run.created_at).total_seconds() if held.run.mode == RunMode.BACKGROUND else None
    held.live = live.for_run(held.run.pk, also=live.local_sink(), age_s=age)
    try:
        with telemetry.driving(held.run):
            if decision is not None:
                with telemetry.unit(held.run):
                    apply_decision(held, decision, last=units == RECORD_ONLY)
            _units(held, units)
    except BaseException as exc:
        if isinstance(exc, Exception):
            raise
        _hand_back(held)  # the process is being stopped (SIGTERM, GreenletExit): hand the run on
        if not isinstance(exc, leases.Stopping):
            raise
        handed_back = True  # a graceful stop: the caller still answers, with the run as it is now
    finally:
        if held.live is not None:
            held.live.flush(done=True)
        leases.drop(held.token)
        if held.admission is not None:
            held.admission.leave()
        if not held.released:
            leases.release(held.run.pk, held.token)
    if handed_back:
        return held.result()
    if held.state.waiting is not None:  # let go waiting on a child run: it is taken up when the child is done
        settle.let_go_waiting(held.run, held.state.waiting)
        held.run.status = Run.objects.filter(pk=held.run.pk).values_list("status", flat=True).first() or "done"
        return held.result()
    if held.run.mode == RunMode.BACKGROUND and held.state.status == RunStatus.RUNNING:
        enqueue(held.run)  # driven part of the way (a decision, a step): a worker carries it on
    return held.result()


def _hand_back(held: store.Held) -> None:
    """Release the run now and queue it, so another worker continues it at once (a sync run as a background run)."""
    run = held.run
    leases.release(run.pk, held.token)
    held.released = True
    if held.state.status == RunStatus.RUNNING and continue_elsewhere(run):
        run.mode = RunMode.BACKGROUND


def apply_decision(held: store.Held, decision: dict, last: bool) -> None:
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
    toolset, guard = runtime.build_toolset(run), calls.unheld_guard(run)
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
    store.commit_unit(held, state, events, release=record_only)
    if run.parent_id is not None:
        tree.unmirror(run)  # the ancestors that showed this pause wait on this run again
    if record_only:
        return
    state, events = engine.resume_calls(held.state, toolset, runtime.clock, held.interrupt, live=held.live, guard=guard)
    store.commit_unit(held, state, events, release=last or state.status != RunStatus.RUNNING or _waits(state))


def _units(held: store.Held, units: int | None) -> None:
    if held.state.status != RunStatus.RUNNING or units == RECORD_ONLY:
        return
    try:
        model = runtime.build_model(held.run)
    except ProviderConfigError as exc:
        state = held.state.copy()
        state.finish(engine.StopReason.MODEL_ERROR, error=str(exc))
        return store.commit_unit(held, state, [], release=True)
    held.admission = quotas.Admission.for_run(held.run.owner_id, held.state.deadline, held.facts, held.run.pk)
    guard = calls.unheld_guard(held.run)
    quiet = guard is not None and guard.watches("output")  # the words go out only once redacted and accepted
    model, toolset, done = calls.for_run(held, model, quiet=quiet), runtime.build_toolset(held.run), 0
    if thread_summary.wanted(held):
        thread_summary.condense(held, model)  # a long thread's left-out turns, condensed before the first unit
    while held.state.status == RunStatus.RUNNING and not _waits(held.state) and (units is None or done < units):
        with telemetry.unit(held.run):
            _unit(held, model, toolset, last_unit=units is not None and done + 1 >= units, guard=guard)
        done += 1


def _unit(held: store.Held, model, toolset, last_unit: bool, guard=None) -> None:
    """One unit in two commits: the model's reply is stored before any tool it asked for runs (in one when it asked
    only for instant tools, which run with it: agents/engine/plan.py `instant_calls`)."""
    clock, stop, sink = runtime.clock, held.interrupt, held.live
    state, events = engine.advance(held.state, model, toolset, clock, stop, reply_only=True, live=sink, guard=guard)
    calls_wait = state.status == RunStatus.RUNNING and bool(engine.pending_calls(state))
    store.commit_unit(held, state, events, release=state.status != RunStatus.RUNNING or (last_unit and not calls_wait))
    if calls_wait and held.state.status == RunStatus.RUNNING:  # (a reply alone never waits: its calls have not run)
        state, events = engine.advance(held.state, model, toolset, clock, stop, live=sink, guard=guard)
        store.commit_unit(held, state, events, release=state.status != RunStatus.RUNNING or last_unit or _waits(state))


def _waits(state) -> bool:
    """Whether the unit ended waiting on something that comes later (a child run): the run is let go meanwhile."""
    return state.waiting is not None
