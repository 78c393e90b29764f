"""A settled run of an agent with online evaluators: which of them score it (each by its `sample` fraction), queued
for a worker as the task `agents.tasks.score_run` once the run's end commits (the scoring: agents/evals/online.py).

One query for a run started from an agent (its evaluators), none for any other run.
"""

from __future__ import annotations

import random
from functools import partial

from django.db import transaction

from agents.models import Agent, Run, RunStatus
from agents.tasks import score_run

_draw = random.SystemRandom().random


def _drawn(evaluator: dict) -> bool:
    sample = evaluator.get("sample", 1)
    return isinstance(sample, int | float) and not isinstance(sample, bool) and _draw() < sample


def queue_scoring(run: Run) -> None:
    """Draw the evaluators of the run's agent that score it, and queue their task on commit."""
    if not run.agent or run.status != RunStatus.DONE:
        return
    evaluators = Agent.objects.filter(name=run.agent).values_list("evaluators", flat=True).first() or []
    chosen = [e["name"] for e in evaluators if isinstance(e, dict) and isinstance(e.get("name"), str) and _drawn(e)]
    if chosen:  # by name: a task's args[0] is read as the id of a run it drives (agents.runs.leases)
        transaction.on_commit(partial(score_run.enqueue, run_id=str(run.pk), evaluators=chosen))
