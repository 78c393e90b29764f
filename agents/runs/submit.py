"""What a client submits: a run, checked (agents/runs/options.py, agent_config.py), stored and, for a sync run,
driven to its end. Threads and deletion are agents/runs/threads.py's, a direct tool call agents/runs/invoke.py's;
their names stay importable from here. Services own their transactions.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from agents.errors import ThreadBusy
from agents.guardrails import redact_input, redacted_parts
from agents.models import Run, RunMode, RunStatus, Thread
from agents.runconfig.config import RunConfig
from agents.runs import documents, drive, idempotency, leases, multitask, persist, rows, store, telemetry, thread_runs
from agents.runs.agent_config import agent_problems, with_agent
from agents.runs.invoke import invoke_tool
from agents.runs.options import (
    LIMIT_MAX,
    MULTITASK_STRATEGIES,
    REQUEST_LIMITS,
    RUN_LIMITS,
    ChildLink,
    RunOptions,
    checked_config,
    document_budget,
    image_budget,
)
from agents.runs.threads import create_thread, delete_run, delete_thread, thread_of
from agents.usage import quotas
from agents.usage.owners import OwnerFacts

__all__ = [
    "LIMIT_MAX", "MULTITASK_STRATEGIES", "REQUEST_LIMITS", "RUN_LIMITS", "ChildLink", "RunOptions", "agent_problems",
    "create_thread", "delete_run", "delete_thread", "invoke_tool", "start_run", "submit_run", "with_agent",
]  # fmt: skip

log = logging.getLogger(__name__)


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
    leaves no empty thread. Its input's documents are stored once checked (once per owner and content; the run keeps
    their references: agents/runs/documents.py); a run refused after that (a busy thread) leaves them for its retry.
    `key_id`: an idempotency key bound to the run in the insert's transaction. Over the owner's daily token quota:
    QuotaExceeded, and nothing is stored. On a thread with a run in progress,
    `options.multitask_strategy` decides (`_insert`); a run stored waiting its turn comes back not held, with
    `thread_queued` set.
    """
    quotas.check_can_start(owner.pk, facts)
    if new_thread:
        with transaction.atomic():
            new = create_thread(owner=owner)
            return start_run(
                owner=owner,
                options=replace(options, thread_id=new.pk),
                lease_owner=lease_owner,
                relaxed=relaxed,
                key_id=key_id,
            )
    options = with_agent(options)
    config = checked_config(options)
    if config.guardrails:  # personal data a pii guardrail redacts on the input: never stored, never sent
        options = replace(
            options,
            input=redact_input(config.guardrails, options.input),
            input_parts=redacted_parts(config.guardrails, options.input_parts),
        )
    thread = thread_of(owner, options.thread_id)
    redact = partial(redact_input, config.guardrails) if config.guardrails else None
    options = replace(options, input_parts=documents.stored(owner.pk, options.input_parts, redact=redact))
    run = _new_run(owner, options, config, thread, lease_owner)
    budgets = {
        "image_budget": partial(image_budget, options, config.provider, config.model),
        "document_budget": partial(document_budget, options, config.provider, config.model),
    }
    _insert(run, thread, key_id, relaxed, strategy=options.multitask_strategy, **budgets)
    telemetry.run_created(run)
    return run


def _new_run(owner, options: RunOptions, config: RunConfig, thread: Thread | None, lease_owner: str) -> Run:
    """The run row a checked request makes (not stored yet): its config's columns, where it comes from, its clock."""
    now = timezone.now()
    link = options.child_of
    return Run(
        **config.columns(),
        owner=owner,
        thread=thread,
        parent_id=link.parent_id if link else None,
        parent_step=link.step if link else None,
        parent_call_id=link.call_id if link else "",
        depth=link.depth if link else 0,
        metadata=dict(options.metadata or {}),
        trace_context=telemetry.carrier(),
        history=[],
        agent=options.agent,
        agent_version=options.agent_version,
        input=options.input,
        input_parts=options.input_parts,
        mode=options.mode,
        status=RunStatus.QUEUED if options.mode == RunMode.BACKGROUND else RunStatus.RUNNING,
        deadline=now + timedelta(seconds=config.timeout_s),
        lease_owner=lease_owner,
        lease_expires=leases.until() if lease_owner else None,
        created_at=now,
        updated_at=now,
    )


def _insert(
    run: Run,
    thread: Thread | None,
    key_id: int | None,
    relaxed: bool,
    *,
    strategy: str = "reject",
    image_budget: Callable[[], int] = lambda: 0,
    document_budget: Callable[[], int] = lambda: 0,
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
        assert key_id is not None  # neither a thread nor a key was handled above
        with transaction.atomic():  # the key names the run from the moment it exists
            persist.insert_run(run, relaxed=relaxed)
            idempotency.bind(key_id, run.pk)
        return
    try:
        with transaction.atomic():
            multitask.make_room(thread, run, strategy)
            run.history = thread_runs.history(thread.pk, image_budget=image_budget, document_budget=document_budget)
            persist.insert_run(run, relaxed=relaxed and not run.thread_queued)  # a waiting run: no model call next
            if key_id is not None:
                idempotency.bind(key_id, run.pk)
            title = Case(When(title="", then=Value(run.input[:80])), default=F("title"))
            Thread.objects.filter(pk=thread.pk).update(updated_at=run.created_at, title=title)
    except IntegrityError:
        raise ThreadBusy("This thread already has a run in progress; wait for it to finish or cancel it.") from None
