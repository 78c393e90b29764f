"""Background work: a task advances a run until it stops or pauses (a decision puts it back on the queue); others
deliver webhooks, tell reviewers of paused runs and run eval runs started over HTTP."""

from __future__ import annotations

from django.tasks import task

from agents import notify, services, webhooks
from agents.evals import runner
from agents.models import Run


@task
def advance_in_background(run_id: str) -> str:
    """A worker's share of a background run: advance it until it stops or waits for a human."""
    try:
        return services.run_background(run_id=run_id)
    except Run.DoesNotExist:
        return "skipped"  # deleted meanwhile


@task
def deliver_webhook(delivery_id: str) -> str:
    """One attempt of a webhook delivery; a failed one queues the next after its backoff (agents.webhooks)."""
    return webhooks.deliver(delivery_id)


@task
def email_reviewers(run_id: str) -> int:
    """Tell the reviewers, by e-mail, that a run waits for a decision (agents.notify)."""
    return notify.email_reviewers(run_id=run_id)


@task
def run_eval(eval_run_id: int, concurrency: int = 1) -> str:
    """Run the cases of an eval run stored by `POST /api/v1/evals/runs` into it (agents.evals.runner.run_queued)."""
    return runner.run_queued(eval_run_id=eval_run_id, concurrency=concurrency)
