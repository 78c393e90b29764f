"""Database triggers the app relies on, kept in place after every migration.

SQLite cannot alter most columns in place: Django's schema editor rebuilds the table (new table, copy, drop, rename)
and the old table's triggers go with it. So after each `migrate` the usage trigger (agents.limits.quotas: the unit's
commit counts the day's tokens) is created again if it is missing. PostgreSQL keeps triggers across ALTER TABLE.
"""

from __future__ import annotations

SQLITE_USAGE_TRIGGER = """
CREATE TRIGGER IF NOT EXISTS agents_run_daily_usage AFTER UPDATE OF prompt_tokens, completion_tokens ON agents_run
WHEN NEW.prompt_tokens + NEW.completion_tokens > OLD.prompt_tokens + OLD.completion_tokens
BEGIN
    INSERT INTO agents_dailyusage (owner_id, day, prompt_tokens, completion_tokens, max_unit)
    VALUES (
        NEW.owner_id, date('now'),
        max(NEW.prompt_tokens - OLD.prompt_tokens, 0), max(NEW.completion_tokens - OLD.completion_tokens, 0),
        (NEW.prompt_tokens + NEW.completion_tokens) - (OLD.prompt_tokens + OLD.completion_tokens)
    )
    ON CONFLICT (owner_id, day) DO UPDATE SET
        prompt_tokens = prompt_tokens + excluded.prompt_tokens,
        completion_tokens = completion_tokens + excluded.completion_tokens,
        max_unit = max(max_unit, excluded.max_unit);
END
"""


def ensure(sender=None, using: str = "default", **kwargs) -> None:
    """post_migrate: the usage trigger exists (SQLite; a no-op elsewhere, and before its tables exist)."""
    from django.db import connections

    connection = connections[using]
    if connection.vendor != "sqlite":
        return
    tables = set(connection.introspection.table_names())
    if {"agents_run", "agents_dailyusage"} <= tables:
        with connection.cursor() as cursor:
            cursor.execute(SQLITE_USAGE_TRIGGER)
