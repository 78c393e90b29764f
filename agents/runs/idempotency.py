"""Idempotency-Key for run creation: same user + key + body within 24 h gets the first response again.

A key is bound to its run in the transaction that inserts the run, so a retry after any failure of the first
request (a crash, `kill -9`, a deploy that stopped it) finds that run instead of creating another: its final
response once the run is done, else the run as it is now (`202`: it continues in the background). A retry answers
`409` only while the first request may still be at work: while it holds the run's lease (renewed while it lives, so
this ends at most one lease after it died), or for a moment before its run exists.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.models import IdempotencyKey, Run, RunMode, RunStatus
from agents.runs import leases

TTL = timedelta(hours=24)
MAX_KEY_LENGTH = 255


class KeyMismatch(Exception):
    """422: the key was used with a different body."""


class KeyInProgress(Exception):
    """409: the first request with this key is still being processed; `retry_after` seconds is when to ask again."""

    def __init__(self, retry_after: int = 1) -> None:
        super().__init__("in progress")
        self.retry_after = max(1, retry_after)


@dataclass
class Begun:
    """What a keyed request does: create its run (`record` to bind it to), replay `status`/`response`, or report on
    the run an earlier request with this key created (`run`, not done yet or done without a stored response)."""

    record: IdempotencyKey
    status: int | None = None
    response: Any = None
    run: Run | None = None


def fingerprint(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def unbound_grace() -> timedelta:
    """How long a key may wait for its run to be inserted (validation and a few reads: milliseconds) before a retry
    takes it over as the key of a request that died first."""
    return timedelta(seconds=2 * leases.lease_s())


def begin(user, key: str, body: Any) -> Begun:
    """The key's state for this request. A new record marks the key as in progress until `finish` or `abandon`."""
    digest = fingerprint(body)
    now = timezone.now()
    IdempotencyKey.objects.filter(created_at__lt=now - TTL).delete()  # every user's expired keys (indexed range)
    dead = IdempotencyKey.objects.filter(user=user, key=key, status_code__isnull=True, run__isnull=True)
    dead.filter(created_at__lt=now - unbound_grace()).delete()
    try:
        with transaction.atomic():
            return Begun(IdempotencyKey.objects.create(user=user, key=key, fingerprint=digest))
    except IntegrityError:
        existing = IdempotencyKey.objects.filter(user=user, key=key).select_related("run").first()
    if existing is None:  # expired and removed between our two queries: treat as in progress, the client retries
        raise KeyInProgress
    if existing.fingerprint != digest:
        raise KeyMismatch
    if existing.status_code is not None:
        return Begun(existing, existing.status_code, existing.response)
    if existing.run is None:
        raise KeyInProgress(int((existing.created_at + unbound_grace() - now).total_seconds()) + 1)
    run = existing.run
    if run.status != RunStatus.DONE and run.mode != RunMode.BACKGROUND and _leased(run, now):
        raise KeyInProgress(int((run.lease_expires - now).total_seconds()) + 1)  # its request is alive
    return Begun(existing, run=run)


def _leased(run: Run, now) -> bool:
    return bool(run.lease_owner) and run.lease_expires is not None and run.lease_expires > now


def bind(record_id: int, run_id) -> None:
    """Inside the transaction that inserts the run: the key now names it. A key taken over meanwhile (its request
    looked dead) is not ours any more: KeyInProgress, and the caller's transaction (the run) rolls back."""
    if not IdempotencyKey.objects.filter(pk=record_id, run__isnull=True, status_code__isnull=True).update(
        run_id=run_id
    ):
        raise KeyInProgress


def finish(record: IdempotencyKey, status_code: int, response: Any) -> None:
    IdempotencyKey.objects.filter(pk=record.pk).update(status_code=status_code, response=response)


def abandon(record: IdempotencyKey) -> None:
    """The first request failed before its run existed: free the key. A key bound to a run stays (the run lives
    on, and a retry finds it)."""
    IdempotencyKey.objects.filter(pk=record.pk, run__isnull=True).delete()
