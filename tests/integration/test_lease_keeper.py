"""The lease keeper finds the runs it renews, and a shutdown finds the runs it hands back, by primary key: the lease
token has no index, so an UPDATE by tokens alone read the whole runs table every few seconds in every process."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from agents.models import Run
from agents.runs import leases, recovery
from tests.conftest import make_user, stored_run_fields

pytestmark = pytest.mark.django_db


def held_run(owner, token: str) -> Run:
    soon = timezone.now() + timedelta(seconds=1)
    return Run.objects.create(
        owner=owner,
        **stored_run_fields(status="running", stop_reason=None, output=None, mode="sync"),
        lease_owner=token,
        lease_expires=soon,
    )


def first_update(queries) -> str:
    return next(q["sql"] for q in queries if q["sql"].startswith("UPDATE"))


@pytest.mark.django_db(transaction=True)  # the keeper closes its connection after each renewal
def test_renewal_pushes_forward_only_the_leases_its_tokens_still_hold():
    owner = make_user("holder")
    ours, taken = held_run(owner, "t1"), held_run(owner, "other")  # `taken`: another worker holds it now
    before = Run.objects.get(pk=taken.pk).lease_expires

    assert leases.renew({"t1": ours.pk, "t2": taken.pk}) == 1

    assert Run.objects.get(pk=ours.pk).lease_expires > timezone.now() + timedelta(seconds=leases.lease_s() - 2)
    assert Run.objects.get(pk=taken.pk).lease_expires == before


@pytest.mark.django_db(transaction=True)
def test_renewal_finds_its_runs_by_primary_key():
    run = held_run(make_user("holder"), "t1")
    with CaptureQueriesContext(connection) as queries:
        assert leases.renew({"t1": run.pk}) == 1
    sql = first_update(queries.captured_queries)
    where = sql[sql.index(" WHERE ") :]
    assert f"{connection.ops.quote_name('id')} IN" in where and "lease_owner" in where


def test_a_shutdown_hands_back_by_primary_key_only_what_this_process_holds():
    owner = make_user("holder")
    ours, taken = held_run(owner, "t1"), held_run(owner, "other")
    leases.hold("t1", ours.pk)
    leases.hold("t2", taken.pk)  # its lease was taken over by another worker meanwhile

    with CaptureQueriesContext(connection) as queries:
        handed = recovery.hand_back_all()

    assert handed == [str(ours.pk)] and leases.held() == []
    assert (Run.objects.get(pk=ours.pk).lease_owner, Run.objects.get(pk=taken.pk).lease_owner) == ("", "other")
    assert Run.objects.get(pk=ours.pk).mode == "background"  # a sync run whose worker goes on as a background run
    assert DBTaskResult.objects.filter(status="READY").count() == 1
    sql = first_update(queries.captured_queries)
    assert f"{connection.ops.quote_name('id')} IN" in sql[sql.index(" WHERE ") :]
