"""Searching runs: by the client's metadata and by the words of their input and output (agents/runs/search.py).

PostgreSQL: a GIN index (jsonb_path_ops) on `metadata`, which a containment query (`metadata @> '{"k": "v"}'`) uses,
and a GIN index on the English tsvector of input and output, which a `@@` query on the same expression uses.

SQLite: one FTS5 table beside agents_run, kept by triggers: `input` and `output` (porter-stemmed words, as English
full-text search stems them on PostgreSQL), and `meta`, one token per metadata pair (`m<key hex>t<JSON type>v<value
hex>`), so `?metadata.k=v` is an index look-up too. It holds no copy of the text (contentless); its rows are the run
rows' rowids. A run's output changes once, when it finishes: only that update touches the table.
"""

from django.db import migrations

# One token per metadata pair: its key and its value in hex (any character allowed), and the value's JSON type, so the
# number 5, the string "5" and true stay apart.
_META = (
    "(SELECT coalesce(group_concat('m' || lower(hex(key)) || 't' || type || 'v' || "
    "lower(hex(CASE type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE value END)), ' '), '') "
    "FROM json_each(new.metadata))"
)
_ROW = f"new.rowid, new.input, coalesce(new.output, ''), {_META}"

SQLITE_FORWARD = [
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
    # The runs stored before this migration.
    "INSERT INTO agents_run_fts(rowid, input, output, meta) SELECT r.rowid, r.input, coalesce(r.output, ''), "
    "(SELECT coalesce(group_concat('m' || lower(hex(key)) || 't' || type || 'v' || "
    "lower(hex(CASE type WHEN 'true' THEN 'true' WHEN 'false' THEN 'false' ELSE value END)), ' '), '') "
    "FROM json_each(r.metadata)) FROM agents_run r",
]
SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS agents_run_fts_insert",
    "DROP TRIGGER IF EXISTS agents_run_fts_update",
    "DROP TRIGGER IF EXISTS agents_run_fts_delete",
    "DROP TABLE IF EXISTS agents_run_fts",
]
# The expression agents/runs/search.py queries with, word for word (else the index is not used).
POSTGRES_TEXT = "to_tsvector('english'::regconfig, input || ' ' || coalesce(output, ''))"
POSTGRES_FORWARD = [
    "CREATE INDEX IF NOT EXISTS run_metadata_gin ON agents_run USING gin (metadata jsonb_path_ops)",
    f"CREATE INDEX IF NOT EXISTS run_text_gin ON agents_run USING gin ({POSTGRES_TEXT})",
]
POSTGRES_BACKWARD = ["DROP INDEX IF EXISTS run_metadata_gin", "DROP INDEX IF EXISTS run_text_gin"]


def _run(statements_by_vendor):
    def apply(apps, schema_editor):
        for sql in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):
    dependencies = [("agents", "0020_operations")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": POSTGRES_FORWARD, "sqlite": SQLITE_FORWARD}),
            _run({"postgresql": POSTGRES_BACKWARD, "sqlite": SQLITE_BACKWARD}),
        )
    ]
