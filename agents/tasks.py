"""Background work: a task advances a run until it stops or pauses (a decision puts it back on the queue); others
deliver webhooks, tell reviewers of paused runs and run eval runs started over HTTP.

The services enqueue these tasks, and each task's body calls a service: the body imports it (the Django convention
for tasks and services; the only late imports the import contract allows, see docs/architecture.md). Queued rows
store a task by its path (`agents.tasks.advance_in_background`, …): these names never move.
"""

from __future__ import annotations

import logging

from django.tasks import task

from agents import periodic

log = logging.getLogger(__name__)


@task
def advance_in_background(run_id: str) -> str:
    """A worker's share of a background run: advance it until it stops or waits for a human."""
    from agents.models import Run
    from agents.runs import drive

    try:
        return drive.run_background(run_id=run_id)
    except Run.DoesNotExist:
        return "skipped"  # deleted meanwhile


@task
def deliver_webhook(delivery_id: str) -> str:
    """One attempt of a webhook delivery; a failed one queues the next after its backoff
    (agents.notifications.webhooks)."""
    from agents.notifications import webhooks

    return webhooks.deliver(delivery_id)


@task
def email_reviewers(run_id: str) -> int:
    """Tell the reviewers, by e-mail, that a run waits for a decision (agents.notifications.notify)."""
    from agents.notifications import notify

    return notify.email_reviewers(run_id=run_id)


@task
def run_eval(eval_run_id: int, concurrency: int = 1) -> str:
    """Run the cases of an eval run stored by `POST /api/v1/evals/runs` into it (agents.evals.runner.run_queued)."""
    from agents.evals import runner

    return runner.run_queued(eval_run_id=eval_run_id, concurrency=concurrency)


@task
def run_periodic(name: str) -> str:
    """One run of a registered sweep (agents/periodic.py): what `celery -A reactsite beat` sends on each interval.
    A name no module registers (a beat older or newer than this worker) is skipped, with a warning."""
    sweep = periodic.get(name)
    if sweep is None:
        log.warning("no sweep named %r here; skipped", name)
        return "skipped"
    periodic.run(sweep)
    return "done"


@task
def score_run(run_id: str, evaluators: list[str]) -> str:
    """An agent's online evaluators score one of its finished runs (agents/runs/scoring.py queues it)."""
    from agents.evals.online import score_run as score

    return score(run_id=run_id, evaluators=evaluators)
