"""Double-texting: what a new run on a thread that has a run in progress does (`multitask_strategy`,
docs/double-texting.md). A thread's waiting runs are started in turn by agents/runs/thread_runs.py.

- `reject` (the default): ThreadBusy (409); nothing is stored.
- `enqueue`: the new run is stored waiting its turn (status queued, `thread_queued`: the thread's partial unique index
  lets it stand beside the active run). When the runs before it are done, the last one's end starts it
  (agents/runs/settle.py, then `thread_runs.start_next`): its history is read again (it sees the answers it waited
  for), its budget starts, and it runs as its mode says (a sync run, whose caller had its 202, as a background run; a
  step run waits for its client's advance). No task is queued for it, and no claim takes it (agents/runs/persist.py),
  before its turn.
- `interrupt`: every unfinished run of the thread (the active one, and any waiting their turn) is cancelled where it
  stands, its steps kept; the new run's history shows what the interrupted run had done (agents/engine/history.py).
- `rollback`: the same runs are cancelled, then deleted with their steps; the new run does not see them.

The decision is taken inside the inserting transaction (agents/runs/submit.py `_insert`) with the thread's row locked
(PostgreSQL: SELECT … FOR NO KEY UPDATE; SQLite: the database's write lock, which settings' transaction_mode
IMMEDIATE takes as the transaction begins), so of concurrent requests on one thread each sees what the one before it
did; no model call happens inside it. What a cancel sets off (the doorbell, the run's settling, the cancel of its
children) goes after the commit, as `drive.cancel_run` would.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta
from functools import partial

from django.db import transaction
from django.utils import timezone

from agents.errors import InvalidRequest, RunBusy, RunFinished, ThreadBusy
from agents.models import Run, RunStatus, StopReason, Thread
from agents.runs import doorbell, drive, settle, thread_runs
from agents.runs.thread_runs import INTERRUPTED

log = logging.getLogger(__name__)

REJECT, ENQUEUE, INTERRUPT, ROLLBACK = "reject", "enqueue", "interrupt", "rollback"
# What a rolled-back run's `error` says (an interrupted one's: thread_runs.INTERRUPTED): the run object and its
# webhook tell it from a cancel by hand.
ROLLED_BACK = (
    "Rolled back: a newer run on its thread took over, and this run was deleted (multitask_strategy rollback)."
)
WAITING = (
    "This run waits for its thread's earlier runs (multitask_strategy enqueue): it starts when they are done, and "
    "cannot be advanced before."
)


# --- the decision, inside the inserting transaction ---------------------------------------------------------------


def make_room(thread: Thread, run: Run, strategy: str) -> None:
    """Make room on `thread` for `run` (not stored yet) as `strategy` says, inside the caller's transaction, the thread
    locked until it commits. Stamps the run's creation now, under the lock: a thread's runs are created, and so
    waiting runs start, in the order the lock was taken. `enqueue` turns the run into a waiting one (the caller must
    not drive it or queue a task for it); `reject` raises ThreadBusy."""
    if strategy not in (REJECT, ENQUEUE, INTERRUPT, ROLLBACK):
        raise InvalidRequest({"multitask_strategy": [f'"{strategy}" is not a valid choice.']})
    thread_runs.lock(thread.pk)
    now = timezone.now()
    run.created_at = run.updated_at = now
    run.deadline = now + timedelta(seconds=run.timeout_s)
    busy = thread_runs.unfinished(thread.pk)
    if not busy:
        return
    if strategy == REJECT:
        status = next((s for _, s, waiting in busy if not waiting), busy[-1][1])
        raise ThreadBusy(
            f"This thread's latest run is {status}; wait for it to finish or cancel it (or send multitask_strategy "
            "enqueue, interrupt or rollback)."
        )
    if strategy == ENQUEUE:
        run.thread_queued, run.status = True, RunStatus.QUEUED
        run.lease_owner, run.lease_expires = "", None  # not held: nothing drives it before its turn
        # The run before it may end between this decision and its commit: its end found no waiting run yet.
        transaction.on_commit(partial(thread_runs.start_next_quietly, thread.pk))
        return
    stopped = _cancel([pk for pk, _, _ in busy], now, INTERRUPTED if strategy == INTERRUPT else ROLLED_BACK)
    runs = list(Run.objects.filter(pk__in=stopped).order_by("created_at"))  # as cancelled: what the cancel tells
    if strategy == ROLLBACK:
        Run.objects.filter(pk__in=stopped).delete()  # their steps and child runs with them
    transaction.on_commit(partial(_tell_cancelled, runs, children=strategy == INTERRUPT))
    log.info(
        "thread runs %s by a new run",
        "interrupted" if strategy == INTERRUPT else "rolled back",
        extra={"thread_id": str(thread.pk), "runs": [str(r.pk) for r in runs]},
    )


def _cancel(run_ids: Iterable, now, why: str) -> list:
    """Cancel each run that is not done yet (drive.cancel_run's conditional UPDATE: its steps stay), its `error`
    saying why; the ids cancelled. A worker holding one stops before its next model or tool call: its next commit
    finds it done."""
    stopped = []
    done = {"status": RunStatus.DONE, "stop_reason": StopReason.CANCELLED, "output": None, "error": why}
    for pk in run_ids:
        updated = Run.objects.filter(pk=pk).exclude(status=RunStatus.DONE).update(updated_at=now, **done)
        if updated:
            stopped.append(pk)
    return stopped


def _tell_cancelled(runs: list[Run], children: bool) -> None:
    """After the commit: what drive.cancel_run sets off for a cancel (streams woken, the run settled once, its
    children cancelled with it). Never an error of the request, whose new run is stored already."""
    for run in runs:
        try:
            doorbell.ring(run.pk)
            settle.settle(run)  # the conditional UPDATE of `_cancel` made it done: once per run
            if not children:
                continue  # deleted with it
            for child_id in Run.objects.filter(parent_id=run.pk).exclude(status=RunStatus.DONE).values_list("pk"):
                try:
                    drive.cancel_run(run_id=child_id[0])
                except RunFinished:
                    pass  # done meanwhile
        except Exception:  # noqa: BLE001 - logged; the cancel itself is committed
            log.exception("telling of a cancelled thread run failed", extra={"run_id": str(run.pk)})


# --- a stalled thread, a run not yet its turn -----------------------------------------------------------------------


def start_stalled(limit: int = 100) -> list[str]:
    """The recovery sweep's share: start the next run of every thread whose runs wait while none is active (their
    starter died between the commit that ended the active run and the start). The ids started."""
    waiting = Run.objects.filter(status=RunStatus.QUEUED, thread_queued=True)
    threads = set(waiting.order_by().values_list("thread_id", flat=True).distinct()[:limit])
    if not threads:
        return []
    active = Run.objects.filter(thread_id__in=threads, thread_queued=False).exclude(status=RunStatus.DONE)
    started = [thread_runs.start_next(t) for t in threads - set(active.values_list("thread_id", flat=True))]
    return [str(run.pk) for run in started if run is not None]


def check_its_turn(run: Run) -> None:
    """RunBusy (409) for a run that still waits for its thread's earlier runs: nothing may advance it before its
    turn."""
    if run.thread_queued and run.status == RunStatus.QUEUED:
        raise RunBusy(WAITING, status=run.status)
