"""Who may see and decide what. Used by the API, the admin and the CLI alike."""

from __future__ import annotations

from django.conf import settings
from django.db.models import QuerySet

from agents.models import Run, Thread

REVIEW_PERMISSION = "agents.review_run"


def can_review(user) -> bool:
    """Staff reviewers (is_staff with agents.review_run) and superusers see every run."""
    return bool(user and user.is_active and (user.is_superuser or (user.is_staff and user.has_perm(REVIEW_PERMISSION))))


def visible_runs(user) -> QuerySet[Run]:
    runs = Run.objects.all()
    return runs if can_review(user) else runs.filter(owner_id=getattr(user, "pk", None))


def visible_threads(user) -> QuerySet[Thread]:
    """Threads follow the runs' rule: the owner's own; reviewers see every one."""
    threads = Thread.objects.all()
    return threads if can_review(user) else threads.filter(owner_id=getattr(user, "pk", None))


def can_delete(user, obj: Run | Thread) -> bool:
    """Owners delete their own runs and threads; another user's needs Django's delete permission on its model
    (agents.delete_run, agents.delete_thread; staff, or a superuser): the review right reads and decides, it never
    deletes."""
    if user is None or not user.is_active:
        return False
    if obj.owner_id == user.pk:
        return True
    return bool(user.is_superuser or (user.is_staff and user.has_perm(f"agents.delete_{obj._meta.model_name}")))


def can_approve(user, owner_id) -> bool:
    """One right for every sensitive call: agents.review_run, or being its owner when AGENT_SELF_APPROVAL is on."""
    if user is None or not user.is_active:
        return False
    if user.is_superuser or user.has_perm(REVIEW_PERMISSION):
        return True
    return bool(settings.AGENT_SELF_APPROVAL and owner_id == user.pk)


def can_decide(user, run: Run) -> bool:
    """Deciding a run's pending call."""
    return can_approve(user, run.owner_id)


def can_invoke_sensitive(user) -> bool:
    """Invoking a sensitive tool directly: the caller owns the call, so the same right as deciding one."""
    return can_approve(user, getattr(user, "pk", None))
