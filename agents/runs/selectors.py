"""Reads shared by the API, the admin and the CLI (selectors: no writes, no transactions)."""

from __future__ import annotations

from django.tasks import task_backends
from django_tasks_db.models import DBTaskResult

from agents.engine import RunState
from agents.engine import pending_actions as engine_pending_actions
from agents.models import Run, RunStatus
from agents.runs import tree


def pending_actions(run: Run) -> list[dict]:
    """Every call of the paused reply still waiting for a decision (`{"call_id", "tool", "arguments", "expires_at"}`,
    in order), by the engine's own rule; `expires_at` is a datetime (when the system denies it), or None.

    Uses steps a caller prefetched (`paused_steps`, or a `steps` prefetch) when present; else reads only the steps
    since the last model reply.
    """
    if run.status != "awaiting_approval":
        return []
    if tree.is_mirrored(run):  # the pause it shows is a child's: the child's calls, each naming its run
        leaf = tree.paused_leaf(run)
        return [{**action, "run": str(leaf.pk)} for action in pending_actions(leaf)] if leaf is not None else []
    state = getattr(run, "engine_state", None)  # a run a service just drove: its state is still in memory
    if state is None:
        steps = getattr(run, "paused_steps", None)
        if steps is None:
            steps = getattr(run, "_prefetched_objects_cache", {}).get("steps")
        if steps is None:
            last_model = run.steps.filter(kind="model").order_by("-index").values_list("index", flat=True).first()
            steps = run.steps.filter(index__gte=last_model or 0).order_by("index")
        events = [s.as_event() for s in steps]
        state = RunState(input="", status=run.status, sensitive_tools=list(run.sensitive_tools), steps=events)
    expires_at = run.approval_expires_at
    return [{**action, "expires_at": expires_at} for action in engine_pending_actions(state)]


def pending_action(run: Run) -> dict | None:
    """The first call waiting for a decision, or None."""
    actions = pending_actions(run)
    return actions[0] if actions else None


def waiting_counts() -> tuple[int, int]:
    """(runs awaiting a decision on their own calls, tasks ready in the background queue): what /metrics reads at each
    scrape. A parent showing its child's pause is not counted again (its own pauses always expire: agents/runs/tree.py);
    a ready task is one a worker may claim now (django-tasks-db's `ready()`), or on Celery a message waiting in the
    broker's queue (its backend's `queue_depth()`)."""
    paused = Run.objects.filter(status=RunStatus.AWAITING_APPROVAL, approval_expires_at__isnull=False).count()
    depth = getattr(task_backends["default"], "queue_depth", None)
    return paused, depth() if depth is not None else DBTaskResult.objects.ready().count()
