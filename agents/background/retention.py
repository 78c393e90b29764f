"""Retention (docs/operations.md#retention): finished runs older than N days go with their steps; idempotency keys
after 24 hours, finished task rows and settled webhook deliveries after 7 days, expired database-cache rows and
emptied old threads go too.

Services layer: every delete is a small batch in its own short transaction (no long table lock; a worker's commit
waits at most one batch). Runs an eval result points at are kept, and so is every run that is not `done`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.core.cache import caches
from django.core.cache.backends.db import DatabaseCache
from django.db import connections, router, transaction
from django.db.models import Exists, OuterRef, QuerySet
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from agents import periodic
from agents.models import DeliveryStatus, EvalResult, IdempotencyKey, Run, RunStatus, Step, Thread, WebhookDelivery

log = logging.getLogger(__name__)

BATCH = 1000
KEY_AGE = timedelta(hours=24)
TASK_AGE = timedelta(days=7)
DELIVERY_AGE = timedelta(days=7)  # settled webhook deliveries (delivered or failed), with their attempts
Progress = Callable[[str, int], None]  # (kind, rows just deleted or counted)


@dataclass
class Pruned:
    """Rows deleted (or, in a dry run, that would be) per kind."""

    counts: dict[str, int] = field(default_factory=dict)

    def add(self, kind: str, n: int) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + n

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def prunable_runs(days: int, now=None, owner=None) -> QuerySet[Run]:
    """Finished runs created more than `days` days ago that no eval result points at (of `owner` only, if given)."""
    cutoff = (now or timezone.now()) - timedelta(days=days)
    kept = EvalResult.objects.filter(run_id=OuterRef("pk"))
    runs = Run.objects.filter(status=RunStatus.DONE, created_at__lt=cutoff).exclude(Exists(kept))
    return runs if owner is None else runs.filter(owner=owner)


def prune_runs(days: int, *, owner=None, batch: int = BATCH) -> Pruned:
    """Only the runs (and their steps): what the bench times, on its own user's runs."""
    result = Pruned()
    for n in _runs(days, timezone.now(), batch, result, dry_run=False, owner=owner):
        result.add("runs", n)
    return result


def prune(days: int | None, *, dry_run: bool = False, progress: Progress | None = None, batch: int = BATCH) -> Pruned:
    """Delete what retention allows (or count it, with `dry_run`); `progress(kind, n)` after each batch.

    `days` None (or 0) keeps every run and thread: only keys, task rows and cache rows are pruned.
    """
    now, result = timezone.now(), Pruned()
    report = progress or (lambda kind, n: None)
    keys = IdempotencyKey.objects.filter(created_at__lt=now - KEY_AGE)
    tasks = DBTaskResult.objects.finished().filter(finished_at__lt=now - TASK_AGE)
    work: list[tuple[str, Iterator[int]]] = []
    if days:
        work += [("runs", _runs(days, now, batch, result, dry_run))]
    settled = [DeliveryStatus.DELIVERED, DeliveryStatus.FAILED]
    deliveries = WebhookDelivery.objects.filter(status__in=settled, created_at__lt=now - DELIVERY_AGE)
    work += [("idempotency keys", _in_batches(keys, batch, dry_run)), ("task rows", _in_batches(tasks, batch, dry_run))]
    work += [("webhook deliveries", _in_batches(deliveries, batch, dry_run))]
    if days:
        work += [("threads", _in_batches(_empty_threads(days, now), batch, dry_run))]
    work += [("cache rows", _expired_cache_rows(now, dry_run))]
    for kind, batches in work:
        result.add(kind, 0)  # every kind is reported, also when none was due
        if kind == "runs":
            result.add("steps", 0)
        for n in batches:
            result.add(kind, n)
            report(kind, n)
    return result


def _runs(days: int, now, batch: int, result: Pruned, dry_run: bool, owner=None) -> Iterator[int]:
    """Runs in batches, oldest first; their steps go in the same transaction (counted as `steps`)."""
    runs = prunable_runs(days, now, owner).order_by("created_at")
    if dry_run:
        ids = runs.values("pk")
        result.add("steps", Step.objects.filter(run_id__in=ids).count())
        yield runs.count()
        return
    while True:
        with transaction.atomic():
            ids = list(runs.values_list("pk", flat=True)[:batch])
            if not ids:
                return
            result.add("steps", Step.objects.filter(run_id__in=ids).delete()[0])
            Run.objects.filter(pk__in=ids, status=RunStatus.DONE).delete()
        yield len(ids)


def _empty_threads(days: int, now) -> QuerySet[Thread]:
    """Threads unused for `days` days whose runs are all gone."""
    runs = Run.objects.filter(thread_id=OuterRef("pk"))
    return Thread.objects.filter(updated_at__lt=now - timedelta(days=days)).exclude(Exists(runs))


def _in_batches(rows: QuerySet, batch: int, dry_run: bool) -> Iterator[int]:
    if dry_run:
        yield rows.count()
        return
    while True:
        with transaction.atomic():
            ids = list(rows.values_list("pk", flat=True)[:batch])
            if not ids:
                return
            rows.model.objects.filter(pk__in=ids).delete()
        yield len(ids)


def _expired_cache_rows(now, dry_run: bool) -> Iterator[int]:
    """Rows of the database cache past their expiry (Django culls only when the table is full)."""
    cache = caches["default"]
    if not isinstance(cache, DatabaseCache):
        return
    db = router.db_for_write(cache.cache_model_class)
    connection = connections[db]
    table = connection.ops.quote_name(cache._table)
    expired = connection.ops.adapt_datetimefield_value(now.replace(microsecond=0))
    verb = "SELECT COUNT(*) FROM" if dry_run else "DELETE FROM"
    with connection.cursor() as cursor:
        cursor.execute(f"{verb} {table} WHERE expires < %s", [expired])  # noqa: S608 - our own table
        yield cursor.fetchone()[0] if dry_run else cursor.rowcount


SCHEDULE_S = 3600.0  # how often a worker prunes when AGENT_RETENTION_DAYS is set


@periodic.every("retention", lambda: SCHEDULE_S)
def scheduled() -> Pruned | None:
    """A sweep (agents/periodic.py): prune by AGENT_RETENTION_DAYS when it is set (None when it is not)."""
    days = int(settings.AGENT_RETENTION_DAYS)
    if days <= 0:
        return None
    pruned = prune(days)
    if pruned.total:
        log.info("pruned", extra={"rows": pruned.counts})
    return pruned
