"""Django's database cache with an atomic `incr`, so rate-limit counters are exact without Redis.

Django's DatabaseCache.incr reads the value, then writes it back: two concurrent requests can both read 4 and both
write 5, and under a burst most increments are lost (django-ratelimit's check E003 refuses it for exactly this).
Here the read and the write happen in one transaction that holds the row (PostgreSQL: SELECT … FOR UPDATE) or the
database's write lock (SQLite: our settings begin transactions IMMEDIATE), so concurrent increments serialise. The
write keeps the entry's expiry: Django's incr sets it again with the default timeout (300 s), which would end an
hour-long window's counter after five idle minutes. `add` of a live key answers False after one read: django-ratelimit
adds before every increment, and Django's add would count the table and try a failing INSERT in a write transaction.
"""

from __future__ import annotations

import base64
import pickle

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.db import DatabaseCache
from django.core.management import call_command
from django.db import connections, router, transaction
from django.utils import timezone


class AtomicDatabaseCache(DatabaseCache):
    def add(self, key, value, timeout=DEFAULT_TIMEOUT, version=None):
        """Django's add, unless the key is already live: then False at the cost of one SELECT."""
        if self.has_key(key, version=version):
            return False
        return super().add(key, value, timeout, version)

    def incr(self, key, delta=1, version=None):
        """Add `delta` to a live entry in one locked read and one write; ValueError when it is missing or expired."""
        key = self.make_and_validate_key(key, version=version)
        db = router.db_for_write(self.cache_model_class)
        connection = connections[db]
        quote = connection.ops.quote_name
        table, cache_key, value, expires = map(quote, (self._table, "cache_key", "value", "expires"))
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        now = connection.ops.adapt_datetimefield_value(timezone.now().replace(microsecond=0))
        with transaction.atomic(using=db), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {value} FROM {table} WHERE {cache_key} = %s AND {expires} >= %s{lock}",  # noqa: S608 - ours
                [key, now],
            )
            row = cursor.fetchone()
            if row is None:
                raise ValueError(f"Key '{key}' not found")
            new_value = pickle.loads(base64.b64decode(row[0].encode())) + delta  # noqa: S301 - our own pickles
            encoded = base64.b64encode(pickle.dumps(new_value, self.pickle_protocol)).decode("latin1")
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
