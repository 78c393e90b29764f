"""A thread's runs: the history a new run on a thread sees (its finished runs, bounded), and its waiting runs
(multitask_strategy enqueue, agents/runs/multitask.py) started in turn, each once the runs before it are done.

Starting the next waiting run marks rows and queues a task, nothing more: it sits below the commit
(agents/runs/store.py) so that a run's end can start the next one in sight (agents/runs/settle.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F
from django.utils import timezone

from agents.engine import history as thread_history
from agents.engine import parts
from agents.models import Run, RunMode, RunStatus, Step, StopReason, Thread
from agents.providers import accepts_documents, accepts_images
from agents.runs import documents, handoff

log = logging.getLogger(__name__)

Id = UUID | str  # a row's primary key, as a UUID or its text

# What an interrupted run's `error` says: the run object, its webhook and a later run's history (which shows what an
# interrupted run had done: `_turn`) tell it from a cancel by hand.
INTERRUPTED = "Interrupted: a newer run on its thread took over (multitask_strategy interrupt)."


# --- the thread, locked; its runs not done ----------------------------------------------------------------------


def lock(thread_id: Id) -> bool:
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


def unfinished(thread_id: Id) -> list[tuple[UUID, str, bool]]:
    """The thread's runs that are not done, oldest first: (id, status, waiting its turn)."""
    runs = Run.objects.filter(thread_id=thread_id).exclude(status=RunStatus.DONE).order_by("created_at", "id")
    return list(runs.values_list("pk", "status", "thread_queued"))


# --- the history a thread's new run sees ----------------------------------------------------------------------------


def history(
    thread_id: Id,
    *,
    before: datetime | None = None,
    image_budget: Callable[[], int],
    document_budget: Callable[[], int] = lambda: settings.AGENT_MAX_DOCUMENTS,
) -> list[dict[str, Any]]:
    """The thread's finished runs (created before `before`, when given) as a new run's history, bounded: one query,
    however long the thread, and one more for the steps of interrupted runs among them (what they had done so far).

    Earlier runs with images or documents bring their parts, within the new run's budgets (asked only then): the
    newest are kept, older ones become a note. Documents are references already; a base64 image kept is stored
    once as a document and referenced too (agents/runs/documents.py): the history holds no copy of any bytes."""
    limit = settings.AGENT_THREAD_HISTORY_RUNS
    if limit <= 0:
        return []
    runs = Run.objects.filter(thread_id=thread_id, status=RunStatus.DONE)
    if before is not None:
        runs = runs.filter(created_at__lt=before)
    columns = ("id", "owner_id", "input", "output", "stop_reason", "input_parts", "turns", "error")
    rows = list(runs.order_by("-created_at").values(*columns)[:limit])
    steps = _steps_of([r["id"] for r in rows if _interrupted(r) and r["turns"]])
    turns = [_turn(row, steps.get(row["id"], [])) for row in reversed(rows)]
    kept = thread_history.bounded(turns, limit, settings.AGENT_THREAD_HISTORY_CHARS)
    if any(parts.images(t.get("input_parts")) for t in kept):
        kept = thread_history.images_bounded(kept, image_budget())
        kept = documents.images_referenced(rows[0]["owner_id"], kept)  # a thread's runs are its owner's
    if any(parts.files(t.get("input_parts")) for t in kept):
        kept = thread_history.documents_bounded(kept, document_budget())
    return kept


def _steps_of(run_ids: list[UUID]) -> dict[UUID, list[dict[str, Any]]]:
    """The runs' steps as events (kind and data), in order, by run."""
    if not run_ids:
        return {}
    found: dict[UUID, list[dict[str, Any]]] = {}
    rows = Step.objects.filter(run_id__in=run_ids).order_by("run_id", "index").values_list("run_id", "kind", "data")
    for run_id, kind, data in rows:
        found.setdefault(run_id, []).append({**data, "kind": kind})
    return found


def _interrupted(row: dict[str, Any]) -> bool:
    return row["stop_reason"] == StopReason.CANCELLED and row["error"] == INTERRUPTED


def _turn(row: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, Any]:
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


def earlier_runs(thread_id: Id, before: datetime) -> int:
    """How many finished runs the thread has from before `before` (a run's creation): the runs its history is made
    of, the newest that fit, and its summary's (history `summarize`), the oldest first."""
    return Run.objects.filter(thread_id=thread_id, status=RunStatus.DONE, created_at__lt=before).count()


def turns_between(thread_id: Id, before: datetime, start: int, stop: int, max_chars: int) -> list[dict[str, Any]]:
    """The thread's finished runs from before `before`, the `start`th to the `stop`th counted oldest first, as turns
    of text (what a summary condenses: no parts), the oldest first while they fit `max_chars` (the first always)."""
    if stop <= start:
        return []
    runs = Run.objects.filter(thread_id=thread_id, status=RunStatus.DONE, created_at__lt=before)
    columns = ("id", "input", "output", "stop_reason", "input_parts", "turns", "error")
    rows = list(runs.order_by("created_at", "id").values(*columns)[start:stop])
    steps = _steps_of([r["id"] for r in rows if _interrupted(r) and r["turns"]])
    turns: list[dict[str, Any]] = []
    used = 0
    for row in rows:
        turn = _turn(row, steps.get(row["id"], []))
        turn.pop("input_parts", None)
        used += thread_history.size(turn)
        if turns and used > max_chars:
            break
        turns.append(turn)
    return turns


def image_budget(run: Run) -> int:
    """How many of a thread's earlier images the run's model may be shown (its own input's count first)."""
    if not accepts_images(run.provider, run.model):
        return 0
    return settings.AGENT_MAX_IMAGES - len(parts.images(run.input_parts))


def document_budget(run: Run) -> int:
    """How many of a thread's earlier documents the run's model may be shown (its own input's count first)."""
    if not accepts_documents(run.provider, run.model):
        return 0
    return settings.AGENT_MAX_DOCUMENTS - len(parts.files(run.input_parts))


# --- a waiting run's turn -----------------------------------------------------------------------------------------


def start_next(thread_id: Id) -> Run | None:
    """Start the thread's oldest waiting run if no run of the thread is active: it stops waiting (one transaction,
    the thread locked), its history is read again, its budget starts now, and it runs as its mode says: a background
    run (and a sync one, whose caller is gone, as a background run) is queued for a worker; a step run waits for its
    client's advance. The run started, or None (a run is active: its end starts the next; or none waits)."""
    with transaction.atomic():
        if not lock(thread_id):
            return None
        busy = unfinished(thread_id)
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


def _start(pk: UUID) -> Run | None:
    run = Run.objects.filter(pk=pk, status=RunStatus.QUEUED, thread_queued=True).first()
    if run is None:
        return None  # cancelled meanwhile
    now = timezone.now()
    run.history = history(
        run.thread_id,
        before=run.created_at,
        image_budget=lambda: image_budget(run),
        document_budget=lambda: document_budget(run),
    )
    run.thread_queued, run.deadline, run.updated_at = False, now + timedelta(seconds=run.timeout_s), now
    if run.mode == RunMode.SYNC:
        run.mode = RunMode.BACKGROUND  # its caller had a 202 and is gone: a worker drives it
    fields = {"thread_queued": False, "history": run.history, "deadline": run.deadline, "updated_at": now}
    if not Run.objects.filter(pk=pk, status=RunStatus.QUEUED, thread_queued=True).update(mode=run.mode, **fields):
        return None
    if run.mode == RunMode.BACKGROUND:
        handoff.enqueue(run)  # commits with the start
    log.info("waiting thread run started", extra={"run_id": str(run.pk), "thread_id": str(run.thread_id)})
    return run


def start_next_quietly(thread_id: Id) -> None:
    """start_next, after a commit: a failure is logged (the recovery sweep starts a stalled thread later), never an
    error of the request or worker whose own change is committed already."""
    try:
        start_next(thread_id)
    except Exception:  # noqa: BLE001
        log.exception("starting a thread's waiting run failed", extra={"thread_id": str(thread_id)})


def start_next_if_waiting(thread_id: Id) -> None:
    """A run of the thread is done (its end committed): start the thread's oldest waiting run, if one waits. A thread
    nothing waits on costs one indexed read."""
    if Run.objects.filter(thread_id=thread_id, status=RunStatus.QUEUED, thread_queued=True).exists():
        start_next_quietly(thread_id)
