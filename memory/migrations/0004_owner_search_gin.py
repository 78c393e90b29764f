"""PostgreSQL: one GIN index over (owner_id, search), so a user's recall never walks other users' facts.

A GIN index on `search` alone matches every user's facts for a query word and filters by owner afterwards: the
cost grows with everyone's memory, not the asking user's. btree_gin lets the owner id live in the same GIN index
(it is a trusted extension: a database owner may create it without superuser rights).
"""

from django.contrib.postgres.operations import BtreeGinExtension
from django.db import migrations

FORWARD = [
    "CREATE INDEX memory_fact_owner_search_gin ON memory_fact USING GIN (owner_id, search) WITH (fastupdate = off)",
    "DROP INDEX IF EXISTS memory_fact_search_gin",
]
BACKWARD = [
    "CREATE INDEX memory_fact_search_gin ON memory_fact USING GIN (search) WITH (fastupdate = off)",
    "DROP INDEX IF EXISTS memory_fact_owner_search_gin",
]


def _run(statements):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            for sql in statements:
                schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):
    dependencies = [("memory", "0003_gin_without_pending_list")]

    operations = [
        BtreeGinExtension(),  # does nothing on other databases
        migrations.RunPython(_run(FORWARD), _run(BACKWARD)),
    ]
