"""Runs in a tree: a sub-agent's call starts a child run, and its parent waits on it holding nothing.

While a child waits for a human decision its waiting ancestors show it: their status is `awaiting_approval` too, with
no expiry of their own (`approval_expires_at` null: the child's expiry is the one that counts, and the expiry sweep
passes them by). The child's pending calls are theirs to show (agents/runs/selectors.py) and to decide
(agents/runs/review.py forwards a decision to the child). Once the child's decision is recorded, they go back to
`running`, their deadline moved by the time they were paused (as a decision moves a run's own).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import timedelta

from django.db.models import F
from django.utils import timezone

from agents.models import Run, RunStatus
from agents.runs import doorbell

TOOL_PREFIX = "agent_"

# Runs this context takes up itself once the child it is deciding for is done (agents/runs/review.py): a child's
# end leaves them alone rather than queueing them.
_taken_up_here: ContextVar[frozenset[str]] = ContextVar("reactsite_tree_taken_up_here", default=frozenset())


@contextmanager
def taking_up(run_ids: Iterable) -> Iterator[None]:
    token = _taken_up_here.set(_taken_up_here.get() | {str(r) for r in run_ids})
    try:
        yield
    finally:
        _taken_up_here.reset(token)


def taken_up_here(run_id) -> bool:
    return str(run_id) in _taken_up_here.get()


def tool_name(agent: str) -> str:
    """The tool through which a run calls the agent named `agent`."""
    return f"{TOOL_PREFIX}{agent}"


def agent_of(tool: str) -> str | None:
    """The agent a tool name calls, or None for an ordinary tool."""
    return tool[len(TOOL_PREFIX) :] if tool.startswith(TOOL_PREFIX) else None


def ancestors(run: Run) -> list:
    """The ids of the run's parent, its parent's parent, ... (nearest first; one query a level, depth is bounded)."""
    ids: list = []
    parent_id = run.parent_id
    while parent_id is not None and len(ids) < 32:
        ids.append(parent_id)
        parent_id = Run.objects.filter(pk=parent_id).values_list("parent_id", flat=True).first()
    return ids


def mirror_awaiting(child: Run) -> None:
    """The child just started waiting for a decision: each ancestor that waits on it (running, held by no one) shows
    it. An ancestor held right now is skipped: its holder looks at the child once it lets go
    (`settle.let_go_waiting`)."""
    now, parent_id = timezone.now(), child.parent_id
    while parent_id is not None:
        waiting = Run.objects.filter(pk=parent_id, status=RunStatus.RUNNING, lease_owner="")
        if not waiting.update(status=RunStatus.AWAITING_APPROVAL, approval_expires_at=None, updated_at=now):
            return
        doorbell.ring(parent_id)
        parent_id = Run.objects.filter(pk=parent_id).values_list("parent_id", flat=True).first()


def unmirror(child: Run) -> None:
    """The child's decision is recorded (or it ended): the ancestors that showed its pause wait on it again."""
    now, parent_id = timezone.now(), child.parent_id
    while parent_id is not None:
        mirrored = Run.objects.filter(
            pk=parent_id, status=RunStatus.AWAITING_APPROVAL, approval_expires_at__isnull=True
        )
        row = mirrored.values("updated_at", "parent_id").first()
        if row is None:
            return
        paused_for = max(now - row["updated_at"], timedelta(0))
        mirrored.update(status=RunStatus.RUNNING, deadline=F("deadline") + paused_for, updated_at=now)
        doorbell.ring(parent_id)
        parent_id = row["parent_id"]


def is_mirrored(run: Run) -> bool:
    """Whether the run shows a descendant's pause rather than one of its own (a pause of its own always expires)."""
    return bool(run.subagents) and run.status == RunStatus.AWAITING_APPROVAL and run.approval_expires_at is None


def paused_leaf(run: Run) -> Run | None:
    """The descendant whose own calls wait for a decision, for a run that shows one's pause (else None)."""
    current = run
    for _ in range(32):
        child = Run.objects.filter(parent=current, status=RunStatus.AWAITING_APPROVAL).order_by("-created_at").first()
        if child is None:
            return current if current is not run else None
        if not is_mirrored(child):
            return child
        current = child
    return None
