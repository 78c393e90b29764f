"""Idempotency-Key for run creation: same user + key + body within 24 h gets the first response again."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.models import IdempotencyKey

TTL = timedelta(hours=24)
# The first request with a key runs at most the largest run budget (timeout_s ≤ 600 s) plus its last commit: a key
# still "in progress" after that belongs to a request that died (a crash, a killed worker) and is taken over.
ABANDONED_AFTER = timedelta(seconds=600 + 60)
MAX_KEY_LENGTH = 255


class KeyMismatch(Exception):
    """422: the key was used with a different body."""


class KeyInProgress(Exception):
    """409: the first request with this key is still being processed."""


def fingerprint(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def begin(user, key: str, body: Any) -> tuple[IdempotencyKey, bool]:
    """(record, is_replay). A new record marks the key as in progress until `finish` or `abandon`."""
    digest = fingerprint(body)
    now = timezone.now()
    IdempotencyKey.objects.filter(created_at__lt=now - TTL).delete()  # every user's expired keys (indexed range)
    abandoned = IdempotencyKey.objects.filter(user=user, key=key, status_code__isnull=True)
    abandoned.filter(created_at__lt=now - ABANDONED_AFTER).delete()
    try:
        with transaction.atomic():
            return IdempotencyKey.objects.create(user=user, key=key, fingerprint=digest), False
    except IntegrityError:
        existing = IdempotencyKey.objects.filter(user=user, key=key).first()
    if existing is None:  # expired and removed between our two queries: treat as in progress, the client retries
        raise KeyInProgress
    if existing.fingerprint != digest:
        raise KeyMismatch
    if existing.status_code is None:
        raise KeyInProgress
    return existing, True


def finish(record: IdempotencyKey, status_code: int, response: Any) -> None:
    IdempotencyKey.objects.filter(pk=record.pk).update(status_code=status_code, response=response)


def abandon(record: IdempotencyKey) -> None:
    """The first request failed before producing a response worth replaying: free the key."""
    IdempotencyKey.objects.filter(pk=record.pk).delete()
