"""Double-texting: what a new run on a thread that has a run in progress does (`multitask_strategy`,
docs/double-texting.md), and starting a thread's waiting runs in turn.

- `reject` (the default): ThreadBusy (409); nothing is stored.
- `enqueue`: the new run is stored waiting its turn (status queued, `thread_queued`: the thread's partial unique index
  lets it stand beside the active run). When the runs before it are done, `start_next` starts it: its history is
  read again (it sees the answers it waited for), its budget starts, and it runs as its mode says (a sync run, whose
  caller had its 202, as a background run; a step run waits for its client's advance). No task is queued for it, and
  no claim takes it (agents/runs/persist.py), before its turn.
- `interrupt`: every unfinished run of the thread (the active one, and any waiting their turn) is cancelled where it
  stands, its steps kept; the new run's history shows what the interrupted run had done (agents/engine/history.py).
- `rollback`: the same runs are cancelled, then deleted with their steps; the new run does not see them.

The decision is taken inside the inserting transaction (agents/runs/submit.py `_insert`) with the thread's row locked
(PostgreSQL: SELECT … FOR NO KEY UPDATE; SQLite: the database's write lock, which settings' transaction_mode
IMMEDIATE takes as the transaction begins), so of concurrent requests on one thread each sees what the one before it
did; no model call happens inside it. What a cancel tells (the doorbell, `run_done`, the cancel of the run's children)
goes after the commit, as `drive.cancel_run` would tell it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from datetime import timedelta
from functools import partial

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from agents.engine import history as thread_history
from agents.engine import parts
from agents.errors import InvalidRequest, RunBusy, RunFinished, ThreadBusy
from agents.models import Run, RunMode, RunStatus, Step, StopReason, Thread
from agents.providers import accepts_images
from agents.runs import doorbell, drive, signals

log = logging.getLogger(__name__)

REJECT, ENQUEUE, INTERRUPT, ROLLBACK = "reject", "enqueue", "interrupt", "rollback"
# What an interrupted (or rolled-back) run's `error` says: the run object, its webhook and a later run's history
# (which shows what an interrupted run had done: `_turn`) tell it from a cancel by hand.
INTERRUPTED = "Interrupted: a newer run on its thread took over (multitask_strategy interrupt)."
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
    _lock(thread.pk)
    now = timezone.now()
    run.created_at = run.updated_at = now
    run.deadline = now + timedelta(seconds=run.timeout_s)
    busy = _unfinished(thread.pk)
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
        transaction.on_commit(partial(_start_next_quietly, thread.pk))
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


def _lock(thread_id) -> bool:
    """Lock the thread's row until the transaction ends (PostgreSQL); False when it is gone. On SQLite the transaction
    holds the database's write lock from its BEGIN (transaction_mode IMMEDIATE); in another mode a first write takes
    it, before anything is read."""
    threads = Thread.objects.filter(pk=thread_id)
    if connection.features.has_select_for_update:
        return bool(list(threads.select_for_update(no_key=True).values_list("pk", flat=True)))
    mode = (connection.settings_dict.get("OPTIONS") or {}).get("transaction_mode")
    if mode not in ("IMMEDIATE", "EXCLUSIVE"):
        return bool(threads.update(title=F("title")))
    return True


def _unfinished(thread_id) -> list[tuple]:
    """The thread's runs that are not done, oldest first: (id, status, waiting its turn)."""
    runs = Run.objects.filter(thread_id=thread_id).exclude(status=RunStatus.DONE).order_by("created_at", "id")
    return list(runs.values_list("pk", "status", "thread_queued"))


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
    """After the commit: what drive.cancel_run tells of a cancel (streams woken, `run_done` once per run, the run's
    children cancelled with it). Never an error of the request, whose new run is stored already."""
    for run in runs:
        try:
            doorbell.ring(run.pk)
            signals.run_done.send(sender=Run, run=run, facts=None)
            if not children:
                continue  # deleted with it
            for child_id in Run.objects.filter(parent_id=run.pk).exclude(status=RunStatus.DONE).values_list("pk"):
                try:
                    drive.cancel_run(run_id=child_id[0])
                except RunFinished:
                    pass  # done meanwhile
        except Exception:  # noqa: BLE001 - logged; the cancel itself is committed
            log.exception("telling of a cancelled thread run failed", extra={"run_id": str(run.pk)})


# --- the history a thread's new run sees ----------------------------------------------------------------------------


def history(thread_id, *, before=None, image_budget: Callable[[], int]) -> list[dict]:
    """The thread's finished runs (created before `before`, when given) as a new run's history, bounded: one query,
    however long the thread, and one more for the steps of interrupted runs among them (what they had done so far).

    Earlier runs with images bring their parts, within the new run's image budget (asked only then): the newest
    images are kept, older ones become a note."""
    limit = settings.AGENT_THREAD_HISTORY_RUNS
    if limit <= 0:
        return []
    runs = Run.objects.filter(thread_id=thread_id, status=RunStatus.DONE)
    if before is not None:
        runs = runs.filter(created_at__lt=before)
    columns = ("id", "input", "output", "stop_reason", "input_parts", "turns", "error")
    rows = list(runs.order_by("-created_at").values(*columns)[:limit])
    steps = _steps_of([r["id"] for r in rows if _interrupted(r) and r["turns"]])
    turns = [_turn(row, steps.get(row["id"], [])) for row in reversed(rows)]
    kept = thread_history.bounded(turns, limit, settings.AGENT_THREAD_HISTORY_CHARS)
    if any("input_parts" in t for t in kept):
        kept = thread_history.images_bounded(kept, image_budget())
    return kept


def _steps_of(run_ids: list) -> dict:
    """The runs' steps as events (kind and data), in order, by run."""
    if not run_ids:
        return {}
    found: dict = {}
    rows = Step.objects.filter(run_id__in=run_ids).order_by("run_id", "index").values_list("run_id", "kind", "data")
    for run_id, kind, data in rows:
        found.setdefault(run_id, []).append({**data, "kind": kind})
    return found


def _interrupted(row: dict) -> bool:
    return row["stop_reason"] == StopReason.CANCELLED and row["error"] == INTERRUPTED


def _turn(row: dict, steps: list[dict]) -> dict:
    """An earlier run as a history turn: its input (and its parts, when it had any), its answer, how it stopped; an
    interrupted run's tool calls and their outputs (`calls`, the latest few; `earlier_calls`, how many more). A run
    cancelled by hand stays a note of how it stopped, as before."""
    turn = {k: row[k] for k in ("input", "output", "stop_reason")}
    if row["input_parts"] is not None:
        turn["input_parts"] = row["input_parts"]
    if steps:
        calls, earlier = thread_history.calls_so_far(steps)
        if calls:
            turn["calls"] = calls
        if earlier:
            turn["earlier_calls"] = earlier
    return turn


def image_budget(run: Run) -> int:
    """How many of a thread's earlier images the run's model may be shown (its own input's count first)."""
    if not accepts_images(run.provider, run.model):
        return 0
    return settings.AGENT_MAX_IMAGES - len(parts.images(run.input_parts))


# --- a waiting run's turn -----------------------------------------------------------------------------------------


def start_next(thread_id) -> Run | None:
    """Start the thread's oldest waiting run if no run of the thread is active: it stops waiting (one transaction,
    the thread locked), its history is read again, its budget starts now, and it runs as its mode says: a background
    run (and a sync one, whose caller is gone, as a background run) is queued for a worker; a step run waits for its
    client's advance. The run started, or None (a run is active: its end starts the next; or none waits)."""
    with transaction.atomic():
        if not _lock(thread_id):
            return None
        busy = _unfinished(thread_id)
        if any(not waiting for _, _, waiting in busy):
            return None
        for pk, _, _ in busy:
            try:
                with transaction.atomic():
                    run = _start(pk)
            except IntegrityError:  # the unique index: another run is active after all; its end starts the next
                return None
            if run is not None:
                return run
    return None


def _start(pk) -> Run | None:
    run = Run.objects.filter(pk=pk, status=RunStatus.QUEUED, thread_queued=True).first()
    if run is None:
        return None  # cancelled meanwhile
    now = timezone.now()
    run.history = history(run.thread_id, before=run.created_at, image_budget=lambda: image_budget(run))
    run.thread_queued, run.deadline, run.updated_at = False, now + timedelta(seconds=run.timeout_s), now
    if run.mode == RunMode.SYNC:
        run.mode = RunMode.BACKGROUND  # its caller had a 202 and is gone: a worker drives it
    fields = {"thread_queued": False, "history": run.history, "deadline": run.deadline, "updated_at": now}
    if not Run.objects.filter(pk=pk, status=RunStatus.QUEUED, thread_queued=True).update(mode=run.mode, **fields):
        return None
    if run.mode == RunMode.BACKGROUND:
        drive.enqueue(run)  # commits with the start
    log.info("waiting thread run started", extra={"run_id": str(run.pk), "thread_id": str(run.thread_id)})
    return run


def _start_next_quietly(thread_id) -> None:
    """start_next, after a commit: a failure is logged (the recovery sweep starts a stalled thread later), never an
    error of the request or worker whose own change is committed already."""
    try:
        start_next(thread_id)
    except Exception:  # noqa: BLE001
        log.exception("starting a thread's waiting run failed", extra={"thread_id": str(thread_id)})


def on_run_done(sender, run: Run, **kwargs) -> None:
    """Receiver of signals.run_done: a thread's run is done, so the thread's oldest waiting run may start. A thread
    nothing waits on costs one indexed read."""
    thread_id = run.thread_id
    if thread_id is None:
        return
    if connection.in_atomic_block:  # sent inside a transaction: act on what it commits, once it does
        transaction.on_commit(partial(_after_done, thread_id))
    else:
        _after_done(thread_id)


def _after_done(thread_id) -> None:
    if Run.objects.filter(thread_id=thread_id, status=RunStatus.QUEUED, thread_queued=True).exists():
        _start_next_quietly(thread_id)


def start_stalled(limit: int = 100) -> list[str]:
    """The recovery sweep's share: start the next run of every thread whose runs wait while none is active (their
    starter died between the commit that ended the active run and the start). The ids started."""
    waiting = Run.objects.filter(status=RunStatus.QUEUED, thread_queued=True)
    threads = set(waiting.order_by().values_list("thread_id", flat=True).distinct()[:limit])
    if not threads:
        return []
    active = Run.objects.filter(thread_id__in=threads, thread_queued=False).exclude(status=RunStatus.DONE)
    started = [start_next(t) for t in threads - set(active.values_list("thread_id", flat=True))]
    return [str(run.pk) for run in started if run is not None]


def check_its_turn(run: Run) -> None:
    """RunBusy (409) for a run that still waits for its thread's earlier runs: nothing may advance it before its
    turn."""
    if run.thread_queued and run.status == RunStatus.QUEUED:
        raise RunBusy(WAITING, status=run.status)
