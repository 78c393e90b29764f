"""Django's database cache with an atomic `incr`, so rate-limit counters are exact without Redis.

Django's DatabaseCache.incr reads the value, then writes it back: two concurrent requests can both read 4 and both
write 5, and under a burst most increments are lost (django-ratelimit's check E003 warns of exactly this). Here the
read-modify-write happens in one transaction that holds the row (PostgreSQL, MySQL: SELECT … FOR UPDATE) or the
database's write lock (SQLite: our settings begin transactions IMMEDIATE), so concurrent increments serialise.
"""

from __future__ import annotations

from django.core.cache.backends.db import DatabaseCache
from django.db import connections, router, transaction


class AtomicDatabaseCache(DatabaseCache):
    def incr(self, key, delta=1, version=None):
        db = router.db_for_write(self.cache_model_class)
        connection = connections[db]
        with transaction.atomic(using=db):
            if connection.features.has_select_for_update:
                table = connection.ops.quote_name(self._table)
                with connection.cursor() as cursor:
                    cursor.execute(
                        f"SELECT cache_key FROM {table} WHERE cache_key = %s FOR UPDATE",  # noqa: S608 - our table
                        [self.make_and_validate_key(key, version=version)],
                    )
            return super().incr(key, delta, version)
