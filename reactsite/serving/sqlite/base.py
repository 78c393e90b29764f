"""Django's SQLite backend, except that under gevent a wait for the write lock yields to the other greenlets, and
each distinct query's `%s` → `?` rewriting is done once per process (docs/performance.md).

Under gevent the connection's own timeout is 0 and the cursor retries a statement that takes the lock (`BEGIN
IMMEDIATE`, a write in autocommit; inside a transaction the lock is held already), and a connect's `PRAGMA
journal_mode=WAL`, with `gevent.sleep` between tries, until the configured `timeout`. Without gevent it is Django's.
"""

from __future__ import annotations

import time
from typing import Any

from reactsite.serving import green
from reactsite.serving.sqlite import driver

base: Any = driver.django_backend()  # bound to sqlean.py's driver, which can load sqlite-vec (driver.py)
sqlite3: Any = base.Database

FIRST_PAUSE_S, MAX_PAUSE_S = 0.0005, 0.02


def _locked(exc: Exception) -> bool:
    return "database is locked" in str(exc)


CONVERTED_MAX = 1024  # distinct "format" queries kept; past that the cache starts again (queries built per call)
_converted: dict[str, str] = {}


def wait_for_lock(attempt, timeout_s: float, holds_lock=lambda: False):
    """attempt() until it does not find the database locked, yielding to other greenlets between tries, for at most
    timeout_s; a lock error is raised at once when the caller already holds the lock (retrying cannot help)."""
    deadline, pause = None, FIRST_PAUSE_S
    while True:
        try:
            return attempt()
        except sqlite3.OperationalError as exc:
            if not _locked(exc) or holds_lock():
                raise
            now = time.monotonic()
            deadline = deadline or now + timeout_s
            if now >= deadline:
                raise
            import gevent

            gevent.sleep(pause)
            pause = min(pause * 2, MAX_PAUSE_S)


class CursorWrapper(base.SQLiteCursorWrapper):
    def convert_query(self, query, *, param_names=None):
        if param_names is not None:  # "pyformat" (named) parameters: Django's own conversion, which is cheap
            return super().convert_query(query, param_names=param_names)
        converted = _converted.get(query)
        if converted is None:  # Django's own rewriting, once per distinct query
            if len(_converted) >= CONVERTED_MAX:
                _converted.clear()
            converted = _converted[query] = super().convert_query(query)
        return converted


class GreenCursorWrapper(CursorWrapper):
    lock_timeout_s = 0.0  # set per connection

    def execute(self, query, params=None):
        return self._waiting(super().execute, query, params)

    def executemany(self, query, param_list):
        return self._waiting(super().executemany, query, param_list)

    def _waiting(self, run, query, params):
        return wait_for_lock(lambda: run(query, params), self.lock_timeout_s, lambda: self.connection.in_transaction)


class DatabaseWrapper(base.DatabaseWrapper):
    _green_timeout_s = 0.0  # > 0: this connection waits for the write lock itself (under gevent)

    def get_connection_params(self):
        params = super().get_connection_params()
        self._green_timeout_s = 0.0
        if green.patched():
            self._green_timeout_s = float(params.get("timeout", 5))
            params["timeout"] = 0  # "database is locked" at once: the cursor waits, yielding to other greenlets
        return params

    vec_version: str | None = None  # sqlite-vec's version on this connection, None when it could not load

    def get_new_connection(self, conn_params):
        if not self._green_timeout_s:
            conn = super().get_new_connection(conn_params)
        else:
            conn = wait_for_lock(
                lambda: super(DatabaseWrapper, self).get_new_connection(conn_params), self._green_timeout_s
            )
        self.vec_version = driver.load_vec(conn)
        return conn

    def create_cursor(self, name=None):
        if not self._green_timeout_s:
            return self.connection.cursor(factory=CursorWrapper)
        cursor = self.connection.cursor(factory=GreenCursorWrapper)
        cursor.lock_timeout_s = self._green_timeout_s
        return cursor
