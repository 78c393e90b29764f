"""Full-text search beside memory_fact: a generated tsvector + GIN index on PostgreSQL, an FTS5 table on SQLite.

The SQLite FTS5 table is an external-content index kept in step by triggers (insert, update, delete).
"""

from django.db import migrations

POSTGRES_FORWARD = [
    "ALTER TABLE memory_fact ADD COLUMN search tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED",
    "CREATE INDEX memory_fact_search_gin ON memory_fact USING GIN (search)",
]
POSTGRES_BACKWARD = [
    "DROP INDEX IF EXISTS memory_fact_search_gin",
    "ALTER TABLE memory_fact DROP COLUMN IF EXISTS search",
]
SQLITE_FORWARD = [
    "CREATE VIRTUAL TABLE memory_fact_fts USING fts5("
    "text, content='memory_fact', content_rowid='id', tokenize='porter unicode61')",
    "CREATE TRIGGER memory_fact_fts_insert AFTER INSERT ON memory_fact BEGIN "
    "INSERT INTO memory_fact_fts(rowid, text) VALUES (new.id, new.text); END",
    "CREATE TRIGGER memory_fact_fts_delete AFTER DELETE ON memory_fact BEGIN "
    "INSERT INTO memory_fact_fts(memory_fact_fts, rowid, text) VALUES ('delete', old.id, old.text); END",
    "CREATE TRIGGER memory_fact_fts_update AFTER UPDATE ON memory_fact BEGIN "
    "INSERT INTO memory_fact_fts(memory_fact_fts, rowid, text) VALUES ('delete', old.id, old.text); "
    "INSERT INTO memory_fact_fts(rowid, text) VALUES (new.id, new.text); END",
    "INSERT INTO memory_fact_fts(memory_fact_fts) VALUES ('rebuild')",
]
SQLITE_BACKWARD = [
    "DROP TRIGGER IF EXISTS memory_fact_fts_insert",
    "DROP TRIGGER IF EXISTS memory_fact_fts_delete",
    "DROP TRIGGER IF EXISTS memory_fact_fts_update",
    "DROP TABLE IF EXISTS memory_fact_fts",
]


def _run(statements_by_vendor):
    def apply(apps, schema_editor):
        for sql in statements_by_vendor.get(schema_editor.connection.vendor, []):
            schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):
    dependencies = [("memory", "0001_facts")]

    operations = [
        migrations.RunPython(
            _run({"postgresql": POSTGRES_FORWARD, "sqlite": SQLITE_FORWARD}),
            _run({"postgresql": POSTGRES_BACKWARD, "sqlite": SQLITE_BACKWARD}),
        )
    ]
