"""Database connections under gunicorn's gevent worker.

gevent serves each client connection in its own greenlet, and Django keeps one database connection per greenlet.
Kept across the requests of a keep-alive client connection (CONN_MAX_AGE), it saves a connect per request (on
SQLite: the connection set-up and its pragmas, a third of a request's CPU under load); but when the client goes away
the greenlet ends without Django ever closing it. This closes a greenlet's connections when the greenlet itself is
gone, so none outlives its client connection.
"""

from __future__ import annotations

import sys
import weakref

from django.core.signals import request_finished
from django.db import connections

_MARK = "_reactsite_db_finalizer"


def patched() -> bool:
    """Whether gevent has patched this process (gunicorn's gevent worker does it before loading the app)."""
    monkey = sys.modules.get("gevent.monkey")
    return bool(monkey and monkey.is_module_patched("socket"))


def install() -> None:
    """Close each greenlet's database connections when the greenlet is gone (a no-op without gevent)."""
    if patched():
        request_finished.connect(_close_with_greenlet, dispatch_uid="reactsite.green")


def _close_with_greenlet(**kwargs) -> None:
    import gevent

    current = gevent.getcurrent()
    if getattr(current, _MARK, None) is not None:
        return
    wrappers = [c for c in connections.all(initialized_only=True) if c.connection is not None]
    if wrappers:
        setattr(current, _MARK, weakref.finalize(current, _close, wrappers))


def _close(wrappers: list) -> None:
    """Close the DB-API connections directly: their greenlet is gone, and nothing else ever uses them."""
    for wrapper in wrappers:
        raw, wrapper.connection = wrapper.connection, None
        if raw is not None:
            try:
                raw.close()
            except Exception:  # noqa: BLE001 - already closed by the server, or broken: nothing left to release
                pass
