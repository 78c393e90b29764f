"""API keys a user makes for their clients: made, revoked, checked on each request, their last use recorded.

A key reads `rsk_<prefix>_<secret>`: `prefix` is 12 random hex characters, stored as they are (unique, indexed: it
finds the row in one query, and it names the key in lists); `secret` is 32 random bytes from `secrets`, base64url
(43 characters). The database holds only the SHA-256 digest of the whole key, compared with `hmac.compare_digest`.
A slow password hasher (PBKDF2, Argon2) buys time against guessing a *low-entropy* secret from a stolen hash; 256
random bits cannot be guessed at any speed, so slowness would only cost CPU on every request. Not an HMAC keyed with
SECRET_KEY either: it would add nothing against guessing, and rotating SECRET_KEY would silently void every key.

A key acts as its owner (the same runs, the same permissions), narrowed to its scopes (ApiKeyScope; which route needs
which: agents/api/permissions.py). Its last use is written at most once per API_KEY_LAST_USED_EVERY_S per key: a
process remembers when it last wrote for a key, and the shared cache's atomic `add` lets one process of all write in
each window, so a busy key costs no write (and, within a process, no query) per request. docs/api-keys.md.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import time
from datetime import UTC, datetime
from uuid import UUID

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from agents.errors import InvalidRequest
from agents.models import ApiKey, ApiKeyScope

MARK = "rsk_"  # every key starts so: a token (40 hex characters) never does
PREFIX_CHARS = 12  # hex: 48 random bits, unique among the keys
SECRET_BYTES = 32  # 256 random bits
_SHAPE = re.compile(r"rsk_([0-9a-f]{12})_([A-Za-z0-9_-]{43})")
DIGEST = "sha256"  # the stored form: "sha256$<hex>", so another digest could come later beside it
NAME_CHARS = ApiKey._meta.get_field("name").max_length
SCOPES = tuple(ApiKeyScope.values)  # their canonical order
USED_KEY = "apikey:used:"  # + the key's id: the cache's gate on writing `last_used_at`
LOCAL_GATE_SIZE = 10_000  # keys a process remembers writing for; past it, it starts again (a write more, no harm)

log = logging.getLogger(__name__)

_written: dict[UUID, float] = {}  # key id -> this process's monotonic clock when it last wrote the key's last use


class KeyRejected(Exception):
    """A request's key is not good: `detail` says why, fit to answer a client (401)."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


MALFORMED = "Malformed API key: expected rsk_<12 hex characters>_<43 characters>."
INVALID = "Invalid API key."
INACTIVE = "User inactive or deleted."


def is_key(credential: str) -> bool:
    """Whether a credential is meant as an API key (else it is a token)."""
    return credential.startswith(MARK)


def digest(key: str) -> str:
    return f"{DIGEST}${hashlib.sha256(key.encode()).hexdigest()}"


def when(moment: datetime) -> str:
    """A moment as the API writes it: ISO 8601, UTC, to the second."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def usable() -> Q:
    """Keys that still authenticate: not revoked, not expired."""
    return Q(revoked_at__isnull=True) & (Q(expires_at__isnull=True) | Q(expires_at__gt=timezone.now()))


def checked_scopes(scopes: list[str]) -> list[str]:
    """The scopes in their canonical order, each once; an unknown one or none at all is a 400 naming `scopes`."""
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise InvalidRequest({"scopes": [f"Unknown scope {unknown[0]!r}: choose from {', '.join(SCOPES)}."]})
    if not scopes:
        raise InvalidRequest({"scopes": [f"Give at least one scope: {', '.join(SCOPES)}."]})
    return [s for s in SCOPES if s in scopes]


def create_key(owner, *, name: str, scopes: list[str], expires_at: datetime | None = None) -> tuple[ApiKey, str]:
    """A new key of `owner`'s and its secret form, which is never stored and cannot be shown again."""
    if not name.strip() or len(name) > NAME_CHARS:
        raise InvalidRequest({"name": [f"Give the key a name of 1 to {NAME_CHARS} characters."]})
    scopes = checked_scopes(scopes)
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidRequest({"expires_at": [f"{when(expires_at)} has passed: give a time in the future."]})
    held = ApiKey.objects.filter(usable(), owner=owner).count()
    if held >= settings.API_KEYS_PER_USER:
        most = settings.API_KEYS_PER_USER
        raise InvalidRequest({"detail": f"You have {held} usable API keys, the most allowed ({most}): revoke one."})
    fields = {"owner": owner, "name": name, "scopes": scopes, "expires_at": expires_at}
    for _ in range(3):  # a prefix already taken (one chance in 2**48 per key held): draw again
        prefix = secrets.token_hex(PREFIX_CHARS // 2)
        key = f"{MARK}{prefix}_{secrets.token_urlsafe(SECRET_BYTES)}"
        row = ApiKey(prefix=prefix, hashed_key=digest(key), **fields)
        try:
            with transaction.atomic():
                row.save(force_insert=True)
        except IntegrityError:
            continue
        return row, key
    raise RuntimeError("three random key prefixes in a row were taken")  # pragma: no cover - 2**-144


def revoke_key(key: ApiKey) -> ApiKey:
    """The key stops authenticating now (its next request is a 401). Revoking a revoked key changes nothing: it
    keeps the time it was first revoked. The row stays, listed with `revoked_at`."""
    revoke_keys(ApiKey.objects.filter(pk=key.pk))
    key.refresh_from_db(fields=["revoked_at"])
    return key


def revoke_keys(keys: QuerySet[ApiKey]) -> int:
    """Revoke every key of `keys` not revoked yet (the console's action); how many were."""
    return keys.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())


def authenticate(credential: str) -> ApiKey:
    """The key a request's credential is, with its owner, or KeyRejected saying why not: malformed, unknown or not
    matching (one answer for both: a prefix is no secret, but a guess learns nothing more), revoked, expired, or its
    owner inactive. One indexed query; the state of a key is told only to a request holding its whole secret."""
    shape = _SHAPE.fullmatch(credential)
    if shape is None:
        raise KeyRejected(MALFORMED)
    key = ApiKey.objects.select_related("owner").filter(prefix=shape.group(1)).first()
    if key is None or not hmac.compare_digest(key.hashed_key, digest(credential)):
        raise KeyRejected(INVALID)
    if key.revoked_at is not None:
        raise KeyRejected(f"This API key was revoked at {when(key.revoked_at)}.")
    if key.expires_at is not None and key.expires_at <= timezone.now():
        raise KeyRejected(f"This API key expired at {when(key.expires_at)}.")
    if not key.owner.is_active:
        raise KeyRejected(INACTIVE)
    return key


def allows(key: ApiKey, scope: str) -> bool:
    return scope in key.scopes


def touch(key: ApiKey) -> bool:
    """Record that `key` was used now, unless it was recorded less than API_KEY_LAST_USED_EVERY_S ago (by this
    process, or by any, through the shared cache); whether this call wrote."""
    every = settings.API_KEY_LAST_USED_EVERY_S
    clock = time.monotonic()
    last = _written.get(key.pk)
    if every > 0 and last is not None and clock - last < every:
        return False
    if len(_written) >= LOCAL_GATE_SIZE:
        _written.clear()
    _written[key.pk] = clock
    if every > 0:
        try:
            if not cache.add(f"{USED_KEY}{key.pk}", 1, timeout=every):
                return False  # another process wrote it in this window
        except Exception as exc:  # noqa: BLE001 - the shared cache away: the process's own gate still bounds writes
            log.warning("api key last use: the cache did not answer: %s", type(exc).__name__)
    now = timezone.now()
    ApiKey.objects.filter(pk=key.pk).update(last_used_at=now)
    key.last_used_at = now
    return True
