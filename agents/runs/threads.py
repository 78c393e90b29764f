"""Threads as a client makes and ends them, and deleting what a client may delete (a run, a thread) with its audit
entry. Services own their transactions."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from django.contrib.admin.models import DELETION, LogEntry
from django.db import transaction

from agents.errors import InvalidRequest
from agents.models import Run, Thread
from agents.permissions import can_delete


def thread_of(owner, thread_id) -> Thread | None:
    """The owner's thread the run continues (None without one); a malformed, unknown or foreign id is a 400. Its
    history is read later, with the thread locked (agents/runs/submit.py)."""
    if thread_id is None:
        return None
    try:
        thread_id = uuid.UUID(str(thread_id))
    except ValueError:
        raise InvalidRequest({"thread_id": ["Must be a valid UUID."]}) from None
    thread = Thread.objects.filter(pk=thread_id, owner=owner).first()
    if thread is None:
        raise InvalidRequest({"thread_id": ["No thread with this id."]})
    return thread


def create_thread(*, owner, title: str = "", metadata: dict | None = None) -> Thread:
    return Thread.objects.create(owner=owner, title=title, metadata=metadata or {})


def delete_run(*, actor, run: Run) -> None:
    """Delete a run with its steps and child runs (one cascade, in one transaction). Another user's run needs the
    delete permission (else it reads as missing: a reviewer keeps the read) and leaves an audit entry."""
    _check_delete(actor, run)
    with transaction.atomic():
        _audit_deletion(actor, run, lambda: f"{run.steps.count()} steps and {run.children.count()} child runs")
        run.delete()


def delete_thread(*, thread: Thread, actor=None) -> None:
    """Delete a thread with its runs and their steps (one cascade, in one transaction). With an actor (the API):
    another user's thread needs the delete permission and leaves an audit entry; the admin records its own."""
    if actor is not None:
        _check_delete(actor, thread)
    with transaction.atomic():
        if actor is not None:
            _audit_deletion(actor, thread, lambda: f"{thread.runs.count()} runs")
        thread.delete()


def _check_delete(actor, obj: Run | Thread) -> None:
    if not can_delete(actor, obj):
        raise type(obj).DoesNotExist()  # a 404, as for any object the caller may not touch


def _audit_deletion(actor, obj: Run | Thread, contents: Callable[[], str]) -> None:
    """A deletion by someone other than the owner, in the admin's log (who, when, what): shown in the console."""
    if obj.owner_id == actor.pk:
        return
    owner = type(actor).objects.filter(pk=obj.owner_id).values_list(type(actor).USERNAME_FIELD, flat=True).first()
    message = f"Deleted over the API: {obj} of {owner}, with {contents()}."
    LogEntry.objects.log_actions(actor.pk, [obj], DELETION, change_message=message, single_object=True)
