"""PostgreSQL: write new facts straight into the GIN index (fastupdate off).

With the default pending list, every recall scans the not-yet-merged entries until a vacuum merges them, which
makes recall slow right after many facts arrive; memory is read far more than it is written.
"""

from django.db import migrations


def _run(sql):
    def apply(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(sql)

    return apply


class Migration(migrations.Migration):
    dependencies = [("memory", "0002_fulltext_search")]

    operations = [
        migrations.RunPython(
            _run("ALTER INDEX memory_fact_search_gin SET (fastupdate = off)"),
            _run("ALTER INDEX memory_fact_search_gin RESET (fastupdate)"),
        )
    ]
