"""Retention: `manage.py prune`, the service under it and the worker's schedule (API.md v1.1, "Retention")."""

from __future__ import annotations

import io
import signal
import subprocess
import time
from datetime import timedelta

import pytest
from django.core.cache import caches
from django.core.cache.backends.db import DatabaseCache
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from agents.background import retention
from agents.models import EvalResult, EvalRun, IdempotencyKey, Run, Step, Thread, Webhook, WebhookDelivery
from agents.runs import drive
from tests.conftest import make_user, stored_run_fields
from tests.integration._support import MANAGE, PYTHON, ROOT, app_env

pytestmark = pytest.mark.django_db

OLD = timedelta(days=40)


def runs(owner, n: int, age: timedelta = OLD, steps: int = 2, **fields) -> list[Run]:
    """`n` stored runs created `age` ago, each with `steps` steps."""
    made = Run.objects.bulk_create([Run(owner=owner, **stored_run_fields(**fields)) for _ in range(n)])
    Run.objects.filter(pk__in=[r.pk for r in made]).update(created_at=timezone.now() - age)
    Step.objects.bulk_create(
        [Step(run=r, index=i, kind="error", data={"message": "x"}) for r in made for i in range(steps)]
    )
    return made


def finished_task(age: timedelta, status: str = "SUCCESSFUL") -> DBTaskResult:
    drive.enqueue(Run(pk="00000000-0000-0000-0000-000000000001"))
    task = DBTaskResult.objects.order_by("-enqueued_at").first()
    finished = timezone.now() - age if status in ("SUCCESSFUL", "FAILED") else None
    DBTaskResult.objects.filter(pk=task.pk).update(status=status, finished_at=finished)
    return task


@pytest.fixture
def alice_rows(alice):
    """Something of every kind, old and young."""
    rows = {
        "old_done": runs(alice, 3),
        "young_done": runs(alice, 2, age=timedelta(days=5)),
        "old_running": runs(alice, 1, status="running", stop_reason=None, output=None),
        "old_awaiting": runs(alice, 1, status="awaiting_approval", stop_reason=None, output=None),
        "old_queued": runs(alice, 1, status="queued", stop_reason=None, output=None),
        "old_in_eval": runs(alice, 1),
    }
    eval_run = EvalRun.objects.create(provider="demo", model="demo-1", protocol="tools", cases_file="x")
    EvalResult.objects.create(eval_run=eval_run, case_id="c", protocol="tools", run=rows["old_in_eval"][0])
    old_key = IdempotencyKey.objects.create(user=alice, key="old", fingerprint="f")
    IdempotencyKey.objects.filter(pk=old_key.pk).update(created_at=timezone.now() - timedelta(hours=25))
    rows["young_key"] = IdempotencyKey.objects.create(user=alice, key="young", fingerprint="f")
    rows["old_task"] = finished_task(timedelta(days=8))
    rows["failed_task"] = finished_task(timedelta(days=9), "FAILED")
    rows["young_task"] = finished_task(timedelta(days=2))
    rows["ready_task"] = finished_task(timedelta(0), "READY")
    empty = Thread.objects.create(owner=alice, title="empty and old")
    Thread.objects.filter(pk=empty.pk).update(updated_at=timezone.now() - OLD)
    rows["kept_thread"] = Thread.objects.create(owner=alice, title="young")
    hook = Webhook.objects.create(owner=alice, url="https://example.org/hook", events=["run.done"], secret="s")
    old = timezone.now() - timedelta(days=8)
    for status, when in (("delivered", old), ("failed", old), ("pending", old), ("delivered", timezone.now())):
        WebhookDelivery.objects.create(webhook=hook, event="run.done", payload="{}", status=status, created_at=when)
    return rows


def test_dry_run_counts_and_deletes_nothing(alice_rows):
    before = (Run.objects.count(), Step.objects.count(), IdempotencyKey.objects.count(), DBTaskResult.objects.count())
    deliveries = WebhookDelivery.objects.count()
    out = io.StringIO()
    call_command("prune", "--days", "30", "--dry-run", stdout=out)
    after = (Run.objects.count(), Step.objects.count(), IdempotencyKey.objects.count(), DBTaskResult.objects.count())
    assert after == before and WebhookDelivery.objects.count() == deliveries
    text = out.getvalue()
    assert "would delete" in text
    lines = dict(line.rsplit(None, 1) for line in text.splitlines()[2:9])
    assert lines == {
        "runs": "3",
        "steps": "6",
        "idempotency keys": "1",
        "task rows": "2",
        "webhook deliveries": "2",
        "threads": "1",
        "cache rows": lines["cache rows"],
    }


def test_prune_deletes_each_kind_and_keeps_the_rest(alice_rows):
    out = io.StringIO()
    call_command("prune", "--days", "30", stdout=out)

    assert "Deleted" in out.getvalue()
    left = set(Run.objects.values_list("pk", flat=True))
    assert not left & {r.pk for r in alice_rows["old_done"]}
    kept = [*alice_rows["young_done"], *alice_rows["old_running"], *alice_rows["old_awaiting"]]
    kept += [*alice_rows["old_queued"], *alice_rows["old_in_eval"]]
    assert left == {r.pk for r in kept}  # never a run that is not done, never one an eval result points at
    assert Step.objects.count() == 2 * len(kept)
    assert list(IdempotencyKey.objects.values_list("key", flat=True)) == ["young"]
    tasks = set(DBTaskResult.objects.values_list("pk", flat=True))
    assert tasks == {alice_rows["young_task"].pk, alice_rows["ready_task"].pk}
    assert list(Thread.objects.values_list("title", flat=True)) == ["young"]
    left = sorted(WebhookDelivery.objects.values_list("status", flat=True))
    assert left == ["delivered", "pending"]  # settled ones older than 7 days went; a pending one never goes


def test_a_thread_with_runs_left_is_kept(alice):
    thread = Thread.objects.create(owner=alice)
    runs(alice, 1, thread=thread)
    runs(alice, 1, age=timedelta(days=1), thread=thread)
    Thread.objects.filter(pk=thread.pk).update(updated_at=timezone.now() - OLD)
    retention.prune(30)
    assert Thread.objects.filter(pk=thread.pk).exists()
    assert Run.objects.filter(thread=thread).count() == 1


def test_batches_delete_everything_in_small_transactions(alice, django_assert_max_num_queries):
    runs(alice, 23)
    seen = []
    result = retention.prune(30, batch=5, progress=lambda kind, n: seen.append((kind, n)))
    assert [n for kind, n in seen if kind == "runs"] == [5, 5, 5, 5, 3]
    assert result.counts["runs"] == 23 and result.counts["steps"] == 46
    assert Run.objects.count() == 0 and Step.objects.count() == 0


def test_without_days_every_run_is_kept(alice, settings):
    settings.AGENT_RETENTION_DAYS = 0
    runs(alice, 2, age=timedelta(days=400))
    out = io.StringIO()
    call_command("prune", stdout=out)
    assert Run.objects.count() == 2
    assert "every run is kept" in out.getvalue()
    assert retention.scheduled() is None  # and the worker's schedule does nothing with runs


def test_the_setting_is_the_default_days(alice, settings):
    settings.AGENT_RETENTION_DAYS = 30
    runs(alice, 2)
    runs(alice, 1, age=timedelta(days=10))
    call_command("prune", stdout=io.StringIO())
    assert Run.objects.count() == 1
    runs(alice, 2)
    assert retention.scheduled().counts["runs"] == 2


@pytest.mark.parametrize("args", [["--days", "-1"], ["--batch", "0"], ["--days", "x"]])
def test_bad_arguments_are_refused(args):
    with pytest.raises((CommandError, SystemExit)):
        call_command("prune", *args, stdout=io.StringIO(), stderr=io.StringIO())


def test_expired_database_cache_rows_are_deleted(db):
    cache = caches["default"]
    if not isinstance(cache, DatabaseCache):
        pytest.skip("the shared cache is Redis here: it expires its own keys")
    cache.set("stale", 1, 60)
    cache.set("fresh", 2, 600)
    table = connection.ops.quote_name(cache._table)
    past = connection.ops.adapt_datetimefield_value(timezone.now().replace(microsecond=0) - timedelta(minutes=5))
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {table} SET expires = %s WHERE cache_key LIKE %s", [past, "%stale"])  # noqa: S608
    assert retention.prune(None).counts["cache rows"] == 1
    assert cache.get("fresh") == 2
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {table} WHERE cache_key LIKE %s", ["%stale"])  # noqa: S608
        assert cursor.fetchone()[0] == 0


@pytest.mark.django_db(transaction=True)
def test_the_worker_prunes_on_its_schedule_when_retention_is_set():
    owner = make_user("pruned")
    old = runs(owner, 2)
    young = runs(owner, 1, age=timedelta(days=1))
    env = app_env(AGENT_RETENTION_DAYS="30", LOG_LEVEL="WARNING")
    proc = subprocess.Popen(
        [PYTHON, MANAGE, "run_worker", "--interval", "0.05"], cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and Run.objects.filter(pk__in=[r.pk for r in old]).exists():
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert not Run.objects.filter(pk__in=[r.pk for r in old]).exists(), err[-3000:]
    assert Run.objects.filter(pk=young[0].pk).exists()
