"""Handing a run on to the task queue: a background run is one task row in the same database (so it commits with
the caller), and a run no worker holds any more is queued so that another worker carries it on.
"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from agents.models import Run, RunMode
from agents.tasks import advance_in_background


def enqueue(run: Run, *, delay_s: float = 0.0) -> None:
    """Put a background run on the task queue (a row in the same database, so it commits with the caller)."""
    task = advance_in_background
    if delay_s > 0:
        task = task.using(run_after=timezone.now() + timedelta(seconds=delay_s))
    task.enqueue(str(run.pk))


def continue_elsewhere(run: Run) -> bool:
    """Queue a run no worker holds any more, so another worker carries it on: a sync run (whose caller is gone)
    continues as a background run; a step run waits for its client, so it stays. True when queued."""
    if run.mode == RunMode.STEP:
        return False
    if run.mode == RunMode.SYNC:
        Run.objects.filter(pk=run.pk, mode=RunMode.SYNC).update(mode=RunMode.BACKGROUND)
    enqueue(run)
    return True
