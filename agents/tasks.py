"""Background runs: a task advances a run until it stops or pauses; a decision puts it back on the queue."""

from __future__ import annotations

from django.tasks import task

from agents import services
from agents.models import Run


@task
def advance_in_background(run_id: str) -> str:
    """A worker's share of a background run: advance it until it stops or waits for a human."""
    try:
        return services.run_background(run_id=run_id)
    except Run.DoesNotExist:
        return "skipped"  # deleted meanwhile
