"""Recovery: runs whose worker is gone go back to the queue, and another worker continues them from their last
commit. The sweep finds runs whose worker died (anywhere); the hand-back is a process's own, on its way out."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db.models import Q
from django.tasks import task_backends
from django.utils import timezone
from django_tasks_db import DatabaseBackend
from django_tasks_db.models import DBTaskResult

from agents import periodic
from agents.models import Run, RunMode, RunStatus
from agents.runs import drive, leases, multitask

log = logging.getLogger(__name__)


@periodic.every("orphans", lambda: leases.lease_s() / 3)
def sweep_orphans() -> list[str]:
    """Hand runs whose worker died to the queue: the ids re-queued.

    An orphan is a queued or running run (sync or background; step runs wait for their client) whose lease ran out,
    or that has no lease and was last touched two leases ago, and that no live task will pick up: a ready task is
    live; a running one only if it started less than two leases ago (a task worker that is alive renews its run's
    lease, so a stale run under an older running task means that worker died: the task is marked failed). A sync run
    whose HTTP worker died continues as a background run. A parent waiting on an unfinished child run holds no lease
    by design: it is not an orphan (the child's end takes it up again). Nor is a run waiting its turn on its thread
    (`thread_queued`): it starts when the thread's earlier runs are done; a thread whose runs wait while none is
    active (their starter died) has its next run started here (multitask.start_stalled), and those ids come first.

    On a backend without task rows (Celery), no task can be looked at: every orphan is queued again, and marked
    (lease cleared, touched now) so that the next sweeps leave it alone for two leases while its message waits. A
    message delivered twice is harmless: the run's lease lets one drive it (agents/runs/drive.py `run_background`).
    """
    stalled = multitask.start_stalled()
    now = timezone.now()
    lost_before = now - timedelta(seconds=2 * leases.lease_s())
    candidates = _stale_runs(now, lost_before)
    if not candidates:
        return stalled
    rows = isinstance(task_backends["default"], DatabaseBackend)
    live = _live_tasks(lost_before, {str(run.pk) for run in candidates}) if rows else set()
    handed: list[str] = stalled
    for run in candidates:
        if str(run.pk) not in live and drive.continue_elsewhere(run):
            handed.append(str(run.pk))
    if not rows:  # no task rows to look at (Celery): a handed run no worker took yet is left alone for two leases
        untaken = Q(lease_owner="") | Q(lease_expires__lt=now)
        Run.objects.filter(untaken, pk__in=handed).update(**leases.RELEASED, updated_at=now)
    if handed:
        log.warning("handed %d orphaned run(s) to the queue", len(handed))
    return handed


def _stale_runs(now: datetime, lost_before: datetime) -> list[Run]:
    """Queued or running runs (not step runs) whose lease ran out, or that have none and were last touched before
    `lost_before`; at most 500 a sweep."""
    stale = Q(lease_owner="", updated_at__lt=lost_before) | Q(lease_expires__lt=now)
    unfinished = [RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.AWAITING_APPROVAL]
    return list(
        Run.objects.filter(stale, status__in=[RunStatus.QUEUED, RunStatus.RUNNING])
        .exclude(mode=RunMode.STEP)
        .exclude(thread_queued=True)  # waits its turn on its thread: never started early
        .exclude(children__status__in=unfinished)[:500]  # a parent waiting on its child holds no lease: not lost
    )


def _live_tasks(lost_before: datetime, stale_ids: set[str]) -> set[str]:
    """The ids of the runs a live task will pick up: a ready task, or a running one started since `lost_before`.
    An older running task of a stale run lost its worker: it is marked failed."""
    tasks = DBTaskResult.objects.filter(status__in=["READY", "RUNNING"])
    live: set[str] = set()
    dead: list[int] = []
    for pk, run_id, status, started in tasks.values_list("pk", "args_kwargs__args__0", "status", "started_at"):
        if status == "RUNNING" and started is not None and started < lost_before:
            dead.append(pk)
        else:
            live.add(str(run_id))
    for task in DBTaskResult.objects.filter(pk__in=dead, status="RUNNING"):
        if str((task.args_kwargs.get("args") or [""])[0]) in stale_ids:  # else its run is held: not ours to judge
            task.set_failed(leases.WorkerLost("The worker running this task stopped renewing its run's lease."))
            log.warning("task %s lost its worker; its run goes back on the queue", task.pk)
    return live


def hand_back_all() -> list[str]:
    """This process is going away (a deploy's SIGTERM): release every lease it holds and queue those runs at once,
    so another worker continues them now instead of after their leases run out. The ids handed back."""
    held_runs = leases.holdings(clear=True)
    if not held_runs:
        return []
    ours = leases.held_by_us(held_runs)
    runs = list(ours.filter(status__in=[RunStatus.QUEUED, RunStatus.RUNNING]))
    ours.update(**leases.RELEASED)
    for run in runs:
        drive.continue_elsewhere(run)
    log.warning("handed %d run(s) back to the queue on shutdown", len(runs))
    return [str(r.pk) for r in runs]
