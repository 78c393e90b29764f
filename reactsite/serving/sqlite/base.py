"""Django's SQLite backend, except that under gevent waiting for the write lock yields to other greenlets.

SQLite lets one writer at a time into a database file. When a second process wants to write, SQLite's own busy
handler sleeps in C until the lock is free (the `timeout` option) — and under gevent that sleep stops the whole
process: every greenlet (hundreds of runs) waits for one write lock. At 256 clients and two gunicorn workers that
was most of the throughput lost on SQLite.

So under gevent the connection's own timeout is 0 (SQLite answers "database is locked" at once) and the cursor waits
for the lock itself, with `gevent.sleep` between tries (0.5 ms, doubling up to 20 ms) until the configured `timeout`
has passed. Only statements that take the lock are retried: `BEGIN IMMEDIATE` (every transaction here), and
writes in autocommit mode; inside a transaction the lock is already held. Opening a connection waits the same way:
its `PRAGMA journal_mode=WAL` can find the file busy (another process checkpointing, or a writer in rollback-journal
mode), which with a timeout of 0 was a 500 on the first requests of a freshly started server under load. Without
gevent nothing changes.

Django's cursor also rewrites every query from `%s` to `?` with a regular expression, on every execute: about 2 %
of a worker's CPU on the hot path, where the same few statements run again and again. The cursor here keeps the
text Django rewrote for each distinct query (up to a bound), so each statement is rewritten once per process.
"""

from __future__ import annotations

import sqlite3
import time

from django.db.backends.sqlite3 import base

from reactsite.serving import green

FIRST_PAUSE_S, MAX_PAUSE_S = 0.0005, 0.02


def _locked(exc: sqlite3.OperationalError) -> bool:
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

    def get_new_connection(self, conn_params):
        if not self._green_timeout_s:
            return super().get_new_connection(conn_params)
        return wait_for_lock(
            lambda: super(DatabaseWrapper, self).get_new_connection(conn_params), self._green_timeout_s
        )

    def create_cursor(self, name=None):
        if not self._green_timeout_s:
            return self.connection.cursor(factory=CursorWrapper)
        cursor = self.connection.cursor(factory=GreenCursorWrapper)
        cursor.lock_timeout_s = self._green_timeout_s
        return cursor
