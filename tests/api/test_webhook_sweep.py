"""A webhook delivery whose task was lost (its worker killed mid-attempt) is queued again by the worker's sweep."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from agents.models import Webhook, WebhookDelivery
from agents.notifications import webhooks

pytestmark = pytest.mark.django_db


def delivery(owner, *, status: str = "pending", late_s: float) -> WebhookDelivery:
    hook = Webhook.objects.create(owner=owner, url="https://example.org/hook", events=["run.done"], secret="s")
    when = timezone.now() - timedelta(seconds=late_s)
    return WebhookDelivery.objects.create(
        webhook=hook, event="run.done", payload="{}", status=status, next_attempt_at=when
    )


def queued_for(delivery_id) -> int:
    return sum(
        1
        for t in DBTaskResult.objects.all()
        if (t.args_kwargs.get("kwargs") or {}).get("delivery_id") == str(delivery_id)
    )


def test_a_stuck_delivery_is_queued_again_once(alice):
    stuck = delivery(alice, late_s=webhooks.STUCK_S + 60)
    on_time = delivery(alice, late_s=10)
    settled = delivery(alice, status="delivered", late_s=webhooks.STUCK_S + 60)

    assert webhooks.sweep_stuck() == 1
    assert (queued_for(stuck.pk), queued_for(on_time.pk), queued_for(settled.pk)) == (1, 0, 0)
    stuck.refresh_from_db()
    assert stuck.next_attempt_at > timezone.now() - timedelta(seconds=5)  # moved forward: not swept again at once
    assert webhooks.sweep_stuck() == 0
    assert queued_for(stuck.pk) == 1
