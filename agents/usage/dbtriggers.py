"""Database triggers the app relies on, kept in place after every migration.

SQLite cannot alter most columns in place: Django's schema editor rebuilds the table (new table, copy, drop, rename)
and the old table's triggers go with it (and the rows get new rowids). So after each `migrate` the usage trigger
(agents.usage.quotas: the unit's commit counts the day's tokens and spend; the text of migration 0023, or 0010's
below it) is created again if it is missing, and the run search index (migration 0021) is made again from the rows if
its triggers are gone. PostgreSQL keeps triggers across ALTER TABLE.
"""

from __future__ import annotations

SQLITE_USAGE_TRIGGER = """
CREATE TRIGGER IF NOT EXISTS agents_run_daily_usage AFTER UPDATE OF prompt_tokens, completion_tokens ON agents_run
WHEN NEW.prompt_tokens + NEW.completion_tokens > OLD.prompt_tokens + OLD.completion_tokens
BEGIN
    INSERT INTO agents_dailyusage (owner_id, day, prompt_tokens, completion_tokens, max_unit, cost_nanos)
    VALUES (
        NEW.owner_id, date('now'),
        max(NEW.prompt_tokens - OLD.prompt_tokens, 0), max(NEW.completion_tokens - OLD.completion_tokens, 0),
        (NEW.prompt_tokens + NEW.completion_tokens) - (OLD.prompt_tokens + OLD.completion_tokens),
        max(coalesce(NEW.cost_nanos, 0) - coalesce(OLD.cost_nanos, 0), 0)
    )
    ON CONFLICT (owner_id, day) DO UPDATE SET
        prompt_tokens = prompt_tokens + excluded.prompt_tokens,
        completion_tokens = completion_tokens + excluded.completion_tokens,
        max_unit = max(max_unit, excluded.max_unit),
        cost_nanos = cost_nanos + excluded.cost_nanos;
END
"""


# The usage trigger before the day's spend was counted (migration 0010's text): a database migrated back below 0023
# gets this one, since its tables have no `cost_nanos` (a trigger naming a missing column breaks later migrations).
SQLITE_TOKENS_TRIGGER = """
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

# Run search on SQLite (agents/runs/search.py): the FTS5 table of migration 0021 and the triggers that keep it. A table
# rebuild of agents_run drops the triggers and gives the rows new rowids, so the index is then made again from the
# rows: the same statements as the migration's.
_META = (
    "(SELECT coalesce(group_concat('m' || lower(hex(key)) || 't' || type || 'v' || "
    "lower(hex(CASE type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE value END)), ' '), '') "
    "FROM json_each({row}.metadata))"
)
_ROW = f"new.rowid, new.input, coalesce(new.output, ''), {_META.format(row='new')}"
SQLITE_SEARCH_INDEX = [
    "DROP TRIGGER IF EXISTS agents_run_fts_insert",
    "DROP TRIGGER IF EXISTS agents_run_fts_update",
    "DROP TRIGGER IF EXISTS agents_run_fts_delete",
    "DROP TABLE IF EXISTS agents_run_fts",
    "CREATE VIRTUAL TABLE agents_run_fts USING fts5(input, output, meta, content='', contentless_delete=1, "
    "tokenize='porter unicode61')",
    f"CREATE TRIGGER agents_run_fts_insert AFTER INSERT ON agents_run BEGIN "
    f"INSERT INTO agents_run_fts(rowid, input, output, meta) VALUES ({_ROW}); END",
    f"CREATE TRIGGER agents_run_fts_update AFTER UPDATE OF input, output, metadata ON agents_run "
    f"WHEN new.output IS NOT old.output OR new.input IS NOT old.input OR new.metadata IS NOT old.metadata BEGIN "
    f"DELETE FROM agents_run_fts WHERE rowid = old.rowid; "
    f"INSERT INTO agents_run_fts(rowid, input, output, meta) VALUES ({_ROW}); END",
    "CREATE TRIGGER agents_run_fts_delete AFTER DELETE ON agents_run BEGIN "
    "DELETE FROM agents_run_fts WHERE rowid = old.rowid; END",
    "INSERT INTO agents_run_fts(rowid, input, output, meta) SELECT r.rowid, r.input, coalesce(r.output, ''), "
    f"{_META.format(row='r')} FROM agents_run r",
]


def ensure(sender=None, using: str = "default", **kwargs) -> None:
    """post_migrate: the usage trigger, in the form the tables' columns call for, and the run search index with its
    triggers exist (SQLite; a no-op elsewhere, and before their tables exist)."""
    from django.db import connections

    connection = connections[using]
    if connection.vendor != "sqlite":
        return
    tables = set(connection.introspection.table_names())
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'agents_run'")
        triggers = {row[0] for row in cursor.fetchall()}
        if {"agents_run", "agents_dailyusage"} <= tables and "agents_run_daily_usage" not in triggers:
            spend = all(
                "cost_nanos" in {c.name for c in connection.introspection.get_table_description(cursor, table)}
                for table in ("agents_run", "agents_dailyusage")
            )
            cursor.execute(SQLITE_USAGE_TRIGGER if spend else SQLITE_TOKENS_TRIGGER)
        if "agents_run_fts" in tables and "agents_run_fts_insert" not in triggers:
            for statement in SQLITE_SEARCH_INDEX:
                cursor.execute(statement)
