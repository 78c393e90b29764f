"""Django's database cache with an atomic `incr`, so rate-limit counters are exact without Redis.

Django's DatabaseCache.incr reads the value, then writes it back: two concurrent requests can both read 4 and both
write 5, and under a burst most increments are lost (django-ratelimit's check E003 refuses it for exactly this).
Here the write is a compare-and-set (`UPDATE … WHERE value = <the value read>`): it changes nothing when another
process counted in between, and the increment reads again; after a few lost races it takes the row's lock instead
(PostgreSQL: SELECT … FOR UPDATE; SQLite: our transactions begin IMMEDIATE). The write keeps the entry's expiry:
Django's incr sets it again with the default timeout (300 s), which would end an hour-long window's counter after
five idle minutes. `add` of a live key answers False after one read, and that read's value is where the next
`incr` of the key starts: django-ratelimit adds before every increment, so a counted request costs two statements
(SELECT, UPDATE) and no transaction, where a locked read-and-write took five on SQLite.
"""

from __future__ import annotations

import base64
import pickle
import threading

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.db import DatabaseCache
from django.core.management import call_command
from django.db import connections, router, transaction
from django.utils import timezone

# The value `add` found live, per thread (greenlet under gevent): django-ratelimit adds, then increments the same key.
_seen = threading.local()
CAS_TRIES = 5  # compare-and-set attempts before an increment takes the row's lock instead


class AtomicDatabaseCache(DatabaseCache):
    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        """Django's add, unless the key is already live: then False at the cost of one SELECT, whose value the next
        `incr` of the key on this thread starts from."""
        made = self.make_and_validate_key(key, version=version)
        current = self._live(made, strict=True)
        if current is not None:
            _seen.entry = (made, current)
            return False
        return super().add(key, value, timeout, version)

    def incr(self, key, delta=1, version=None):
        """Add `delta` to a live entry; ValueError when it is missing or expired. A compare-and-set UPDATE from the
        value last read (by `add`, or one SELECT): one statement when nothing raced it, and no transaction held.
        Past CAS_TRIES lost races, one locked read and one write in a transaction, which serialise."""
        key = self.make_and_validate_key(key, version=version)
        seen, _seen.entry = getattr(_seen, "entry", None), None
        current = seen[1] if seen is not None and seen[0] == key else None
        for _ in range(CAS_TRIES):
            if current is None:
                current = self._live(key)
                if current is None:
                    raise ValueError(f"Key '{key}' not found")
            new_value, encoded = self._added(current, delta)
            if self._swapped(key, current, encoded):
                return new_value
            current = None  # another process counted meanwhile: read again
        return self._locked_incr(key, delta)

    def _sql(self):
        connection = connections[router.db_for_write(self.cache_model_class)]
        quote = connection.ops.quote_name
        now = connection.ops.adapt_datetimefield_value(timezone.now().replace(microsecond=0))
        return connection, (*map(quote, (self._table, "cache_key", "value", "expires")),), now

    def _live(self, key: str, strict: bool = False) -> str | None:
        """The stored (encoded) value of a live entry, or None. `strict`: Django's has_key's own `expires > now`."""
        connection, (table, cache_key, value, expires), now = self._sql()
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {value} FROM {table} WHERE {cache_key} = %s AND {expires} {'>' if strict else '>='} %s",  # noqa: S608
                [key, now],
            )
            row = cursor.fetchone()
        return None if row is None else row[0]

    def _added(self, encoded: str, delta: int) -> tuple[int, str]:
        new_value = pickle.loads(base64.b64decode(encoded.encode())) + delta  # noqa: S301 - our own pickles
        return new_value, base64.b64encode(pickle.dumps(new_value, self.pickle_protocol)).decode("latin1")

    def _swapped(self, key: str, old: str, new: str) -> bool:
        connection, (table, cache_key, value, expires), now = self._sql()
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {table} SET {value} = %s WHERE {cache_key} = %s AND {value} = %s AND {expires} >= %s",  # noqa: S608
                [new, key, old, now],
            )
            return cursor.rowcount == 1

    def _locked_incr(self, key: str, delta: int) -> int:
        connection, (table, cache_key, value, expires), now = self._sql()
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        with transaction.atomic(using=connection.alias), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {value} FROM {table} WHERE {cache_key} = %s AND {expires} >= %s{lock}",  # noqa: S608 - ours
                [key, now],
            )
            row = cursor.fetchone()
            if row is None:
                raise ValueError(f"Key '{key}' not found")
            new_value, encoded = self._added(row[0], delta)
            cursor.execute(f"UPDATE {table} SET {value} = %s WHERE {cache_key} = %s", [encoded, key])  # noqa: S608
        return new_value


CREATE_HINT = "run `python manage.py migrate` (which creates it) or `python manage.py createcachetable`"


def database_cache_tables() -> list[str]:
    """The tables of the caches kept in the database (none with Redis)."""
    from django.conf import settings

    tables = []
    for config in settings.CACHES.values():
        backend = config.get("BACKEND", "")
        if backend == "django.core.cache.backends.db.DatabaseCache" or backend.endswith(".AtomicDatabaseCache"):
            tables.append(config["LOCATION"])
    return tables


def ensure_tables(sender=None, using: str = "default", verbosity: int = 1, **kwargs) -> None:
    """post_migrate: the database cache's table exists once `migrate` has run, so the set-up cannot be half done (a
    forgotten `createcachetable` made every request that counts a rate an HTML 500 on PostgreSQL). Idempotent."""
    if not database_cache_tables():
        return
    call_command("createcachetable", database=using, verbosity=0)


def missing_table(exc: BaseException) -> str | None:
    """The database cache table whose absence this database error reports, or None (another error)."""
    text = str(exc).lower()
    if "does not exist" not in text and "no such table" not in text:
        return None
    return next((table for table in database_cache_tables() if table.lower() in text), None)


def missing_table_detail(table: str) -> str:
    return f"The cache table '{table}' is missing: {CREATE_HINT}."
