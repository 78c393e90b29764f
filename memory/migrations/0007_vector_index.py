"""The vector index beside memory_fact (memory/vectors.py), and a vector for every fact remembered before it.

SQLite: a sqlite-vec table when the extension loads; PostgreSQL: pgvector's column and HNSW index when the extension
can be created, otherwise nothing (recall stays full-text; the memory.W001 check says how to enable vectors, and
`manage.py embed_facts` builds the index later). The facts' vectors are computed here, in batches, like
`manage.py embed_facts` does (about 0.2 ms a fact).
"""

from django.db import migrations


def forward(apps, schema_editor):
    from memory import backfill, vectors  # noqa: PLC0415 - today's code: the index is raw SQL, not a model

    if vectors.install(schema_editor.connection):
        backfill.embed_missing(schema_editor.connection)


def backward(apps, schema_editor):
    from memory import vectors  # noqa: PLC0415

    vectors.uninstall(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("memory", "0006_fact_embedding")]

    operations = [migrations.RunPython(forward, backward)]
