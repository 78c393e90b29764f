"""Taking a run's lease (agents/runs/persist.py `claim`, `claim_queued`): one conditional UPDATE that returns the run as
taken, so the worker does not read it again; the run it returns is the one the ORM would read."""

from __future__ import annotations

import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agents.models import Run, TokenQuota, Webhook
from agents.runs import persist
from tests.conftest import make_user, stored_run_fields

pytestmark = pytest.mark.django_db

SOON = timedelta(seconds=30)


def queued_run(owner, **fields) -> Run:
    values = stored_run_fields(status="queued", stop_reason=None, output=None, mode="background", timeout_s=45.5)
    values |= {"history": [{"role": "user", "content": "earlier é"}], "output_schema": {"type": "object"}}
    return Run.objects.create(owner=owner, **(values | fields))


def field_values(run: Run) -> dict:
    return {f.attname: getattr(run, f.attname) for f in Run._meta.concrete_fields}


def test_the_claimed_run_is_the_run_the_orm_reads():
    run = queued_run(make_user("owner"), lease_owner="", turns=2, version=3)
    now = timezone.now()
    claimed, facts = persist.claim(run.pk, "t1", ["queued", "running"], now, now + SOON)

    assert facts is None and claimed._state.adding is False
    assert field_values(claimed) == field_values(Run.objects.get(pk=run.pk))
    assert (claimed.status, claimed.lease_owner) == ("running", "t1")  # a queued run becomes running
    assert claimed.history == [{"role": "user", "content": "earlier é"}] and claimed.output_schema == {"type": "object"}
    assert isinstance(claimed.pk, uuid.UUID) and timezone.is_aware(claimed.deadline)


def test_a_claim_keeps_a_running_runs_status_and_refuses_others():
    owner, now = make_user("owner"), timezone.now()
    running = queued_run(owner, status="awaiting_approval")
    assert persist.claim(running.pk, "t1", ["queued", "running"], now, now + SOON) is None
    claimed, _ = persist.claim(running.pk, "t1", ["awaiting_approval"], now, now + SOON)
    assert claimed is not None and claimed.status == "awaiting_approval"


def test_a_held_lease_is_taken_only_once_it_has_expired():
    run = queued_run(make_user("owner"), status="running", lease_owner="other", lease_expires=timezone.now() + SOON)
    now = timezone.now()
    assert persist.claim(run.pk, "t1", ["running"], now, now + SOON) is None
    assert Run.objects.get(pk=run.pk).lease_owner == "other"

    later = now + SOON + timedelta(seconds=1)
    claimed, _ = persist.claim(run.pk, "t1", ["running"], later, later + SOON)
    assert claimed is not None and Run.objects.get(pk=run.pk).lease_owner == "t1"


def test_a_queued_runs_budget_starts_when_it_is_claimed():
    run = queued_run(make_user("owner"), deadline=timezone.now() - timedelta(hours=1))
    now = timezone.now()
    claimed, _ = persist.claim_queued(run.pk, "t1", now, now + SOON)

    assert claimed.status == "running"
    assert claimed.deadline == now + timedelta(seconds=45.5)
    assert field_values(claimed) == field_values(Run.objects.get(pk=run.pk))
    assert persist.claim_queued(run.pk, "t2", now, now + SOON) is None  # no longer queued


@pytest.mark.parametrize("with_facts", [False, True])
def test_the_owners_quota_facts_come_with_the_claim(with_facts):
    owner, now = make_user("owner"), timezone.now()
    if with_facts:
        TokenQuota.objects.create(user=owner, daily_tokens=1234, daily_cost=Decimal("2.5"))
        Webhook.objects.create(owner=owner, url="https://hooks.example/x", events=["run.done"], secret="s")
    Webhook.objects.create(owner=make_user("someone else"), url="https://hooks.example/y", events=[], secret="s")
    run = queued_run(owner)

    claimed, facts = persist.claim_queued(run.pk, "t1", now, now + SOON, owner_facts=True)

    assert facts is not None and facts.cost_read
    assert (facts.user_id, facts.quota_override, facts.has_webhooks) == (owner.pk, 1234 if with_facts else None,
                                                                          with_facts)  # fmt: skip
    assert (Decimal(str(facts.cost_override)) if with_facts else facts.cost_override) == (
        Decimal("2.5") if with_facts else None
    )
    assert claimed.pk == run.pk
    assert persist.claim(queued_run(owner).pk, "t2", ["queued"], now, now + SOON)[1] is None  # not asked for
