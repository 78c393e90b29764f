"""What happens after a run ends: its settle step.

A run ends when a conditional UPDATE makes it done: the commit of its last unit (agents/runs/store.py), a cancel
(agents/runs/drive.py `cancel_run`), or a newer run on its thread interrupting or rolling it back
(agents/runs/multitask.py). Whoever made that change calls `settle(run)` once, after the commit, and only when its
UPDATE matched: so a run settles once. Settling tells the observers first (the `run_done` signal: webhooks,
metrics), then runs the continuations, in the order of CONTINUATIONS:

1. `resume_parent`: a child run's parent is taken up again (queued for a worker; agents/runs/children.py);
2. `start_next_on_thread`: the thread's oldest run waiting its turn starts (agents/runs/thread_runs.py);
3. `queue_scoring`: a run of an agent with online evaluators is queued to be scored (agents/runs/scoring.py).

Both only mark rows and queue tasks, so this module sits below the commit and every caller can see it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from uuid import UUID

from django.db import connection, transaction
from django.utils import timezone

from agents.models import Run, RunStatus
from agents.runs import handoff, scoring, signals, thread_runs, tree
from agents.usage.owners import OwnerFacts

Continuation = Callable[[Run], None]


def settle(run: Run, facts: OwnerFacts | None = None) -> None:
    """A run has just ended (its done status committed; called once per run): tell the observers, then run the
    continuations in their declared order. `facts`: its owner's facts, when the caller has them."""
    signals.run_done.send(sender=Run, run=run, facts=facts)
    for continuation in CONTINUATIONS:
        continuation(run)


def let_go_waiting(run: Run, child_id: str) -> None:
    """A parent was let go waiting on its child: if the child finished or paused meanwhile (its commit found the
    parent still held, and so left it alone), act on it now: resume the parent, or show the child's pause on it."""
    status = Run.objects.filter(pk=child_id).values_list("status", flat=True).first()
    if status == RunStatus.DONE:
        resume(run.pk)
    elif status == RunStatus.AWAITING_APPROVAL:
        tree.mirror_awaiting(Run(pk=child_id, parent_id=run.pk))


def resume_parent(run: Run) -> None:
    """A child run ended: the ancestors that showed its pause stop showing it, and its parent is taken up again."""
    if run.parent_id is None:
        return
    tree.unmirror(run)
    resume(run.parent_id)


def resume(parent_id: UUID | str) -> None:
    """Take a parent up again after its child: a background parent is queued; a sync one too (its caller has its
    answer: it continues as a background run); a step run waits for its client. Not while a process holds it (that
    process reads the child's state itself), nor once it is done, nor when the request that decided for the child
    takes it up itself (agents/runs/review.py)."""
    if tree.taken_up_here(parent_id):  # the request deciding for the child drives it on itself
        return
    parent = Run.objects.filter(pk=parent_id, status=RunStatus.RUNNING).first()
    if parent is None:
        return
    if parent.lease_owner and parent.lease_expires is not None and parent.lease_expires > timezone.now():
        return
    handoff.continue_elsewhere(parent)


def start_next_on_thread(run: Run) -> None:
    """A run on a thread ended: the thread's oldest waiting run may start. Inside a transaction, once it commits (it
    acts on what the transaction stores)."""
    if run.thread_id is None:
        return
    if connection.in_atomic_block:
        transaction.on_commit(partial(thread_runs.start_next_if_waiting, run.thread_id))
    else:
        thread_runs.start_next_if_waiting(run.thread_id)


# What follows a run's end, in this order (after the observers are told).
CONTINUATIONS: tuple[Continuation, ...] = (resume_parent, start_next_on_thread, scoring.queue_scoring)
