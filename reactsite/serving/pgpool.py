"""The psycopg pool's check of a connection it is about to lend (PostgreSQL with DB_POOL).

A broken connection means the server ended its sessions (a restart, a failover, pg_terminate_backend), so every idle
connection of the pool is most likely broken too. psycopg_pool checks them one at a time and waits 1, 2, 4, 8 s
between failed checks: with five dead connections the first request after an outage waited past the pool's timeout
(10 s) and failed. So the first broken connection has the pool check all its idle connections at once (one quick
round trip each), dropping the dead and replacing them, and the next attempt gets a live connection at once.
"""

from __future__ import annotations

import logging
from typing import Any

from psycopg_pool import ConnectionPool

log = logging.getLogger(__name__)


def check(conn: Any) -> None:
    """psycopg_pool's own check; when it fails, the whole pool is checked before the failure goes back to it."""
    try:
        ConnectionPool.check_connection(conn)
    except Exception:
        from django.db import connections  # settings name this function: Django's connections load after them

        pool = getattr(connections["default"], "pool", None)
        if pool is not None and not pool.closed:
            try:
                pool.check()
            except Exception:  # noqa: BLE001 - the pool goes on with its own slower way
                log.warning("could not check the pool's idle connections", exc_info=True)
        raise
