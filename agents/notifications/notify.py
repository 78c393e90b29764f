"""Telling people about a run: reviewers by e-mail when it starts waiting, the owner's webhooks (docs/api.md#webhooks).

Called by the services after the commit that changed the run's status, never inside a transaction. In the request
they stay cheap: one indexed read (the owner's webhooks), then rows and tasks only for what must be sent; the
sending itself is the task worker's (agents/tasks.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import mail
from django.urls import reverse
from django.utils.text import Truncator

from agents import tasks
from agents.models import Run, RunStatus, WebhookEvent
from agents.notifications import webhooks
from agents.permissions import REVIEW_PERMISSION
from agents.runs import selectors
from agents.usage.owners import OwnerFacts

log = logging.getLogger(__name__)

INPUT_CHARS = 300
MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"  # where permissions and groups are stored


def run_awaiting_approval(run, facts: OwnerFacts | None = None) -> None:
    """The run has just started waiting for a decision (its pending calls are committed). `facts`: what the caller
    read about the owner with something else (whether they have webhooks at all spares a look-up)."""
    with _never_failing(run, WebhookEvent.RUN_AWAITING_APPROVAL):
        if _may_have_webhooks(run, facts):
            webhooks.announce(run, WebhookEvent.RUN_AWAITING_APPROVAL)
    with _never_failing(run, "reviewer e-mail"):
        tasks.email_reviewers.enqueue(
            run_id=str(run.pk)
        )  # by name: a task's args[0] is taken for a run it drives (leases)


def run_done(run, facts: OwnerFacts | None = None) -> None:
    """The run has just finished (called once per run, by the commit that made it done)."""
    with _never_failing(run, WebhookEvent.RUN_DONE):
        if _may_have_webhooks(run, facts):
            webhooks.announce(run, WebhookEvent.RUN_DONE)


def on_run_done(sender, *, run, facts: OwnerFacts | None = None, **kwargs) -> None:
    """Receiver of agents.runs.signals.run_done."""
    run_done(run, facts)


def on_run_awaiting_approval(sender, *, run, facts: OwnerFacts | None = None, **kwargs) -> None:
    """Receiver of agents.runs.signals.run_awaiting_approval."""
    run_awaiting_approval(run, facts)


def _may_have_webhooks(run, facts: OwnerFacts | None) -> bool:
    """False only when the owner is known to have none (read with the run or the request's token)."""
    return facts is None or facts.user_id != run.owner_id or facts.has_webhooks


@contextmanager
def _never_failing(run, what: str) -> Iterator[None]:
    """The run's change is committed already: a notification that cannot be queued is logged, never turned into an
    error of the request or the worker that made the change."""
    try:
        yield
    except Exception:  # noqa: BLE001
        log.exception("notification not queued", extra={"run_id": str(run.pk), "notification": str(what)})


# --- the reviewers' e-mail (in the task worker) --------------------------------------------------------------------


def reviewer_addresses() -> list[str]:
    """Every active user who may decide approvals (directly, through a group, or as a superuser) and has an
    e-mail address; each address once."""
    users = get_user_model()._default_manager.with_perm(
        REVIEW_PERMISSION, is_active=True, include_superusers=True, backend=MODEL_BACKEND
    )
    addresses = users.exclude(email="").order_by("pk").values_list("email", flat=True)
    return list(dict.fromkeys(a.strip() for a in addresses if a.strip()))


def admin_url(run: Run) -> str:
    """The run's page in the operator console, as an absolute URL (AGENT_PUBLIC_URL)."""
    return settings.AGENT_PUBLIC_URL.rstrip("/") + reverse("admin:agents_run_change", args=[run.pk])


def email_reviewers(*, run_id) -> int:
    """One e-mail to each reviewer about a run that waits for a decision; how many were sent. A run that no longer
    waits (decided, cancelled or deleted before the worker got here) tells no one."""
    run = Run.objects.select_related("owner").filter(pk=run_id).first()
    if run is None or run.status != RunStatus.AWAITING_APPROVAL:
        return 0
    recipients = reviewer_addresses()
    if not recipients:
        return 0
    subject, body = _message(run)
    messages = [mail.EmailMessage(subject, body, to=[address]) for address in recipients]  # no one sees the others
    with mail.mailers.default as connection:  # one SMTP session for all of them (settings.MAILERS)
        return connection.send_messages(messages) or 0


def _message(run: Run) -> tuple[str, str]:
    actions = selectors.pending_actions(run)
    calls = "\n".join(f"  - {a['tool']} (call {a['call_id']})" for a in actions) or "  (none left)"
    expires = actions[0]["expires_at"] if actions else None
    lines = [
        f"Run {run.pk} of {run.owner.get_username()} is waiting for a decision on:",
        calls,
        "",
        f"Input: {Truncator(' '.join(run.input.split())).chars(INPUT_CHARS)}",
        *([f"Expires at: {expires.isoformat()} (then it is denied as expired)"] if expires else []),
        "",
        f"Decide here: {admin_url(run)}",
    ]
    return f"[reactsite] Run {str(run.pk)[:8]} is waiting for approval", "\n".join(lines) + "\n"
