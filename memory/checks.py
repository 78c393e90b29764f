"""System checks of memory's vector index (database checks: `manage.py check --database default`, and `migrate`)."""

from django.conf import settings
from django.core import checks
from django.db import connections
from django.db.migrations.recorder import MigrationRecorder

from memory import embeddings, vectors

BUILDS_INDEX = "0007_vector_index"


@checks.register(checks.Tags.database)
def check_vector_index(app_configs=None, databases=None, **kwargs):
    """W001: no vector index (recall is full-text only), with how to get one; E002: an index built for vectors of
    another dimension than the model's (after a model change): recall by meaning would fail, so it is off until
    `manage.py embed_facts --rebuild`."""
    if not settings.MEMORY_VECTORS or not databases or "default" not in databases:
        return []
    conn = connections["default"]
    try:
        if ("memory", BUILDS_INDEX) not in MigrationRecorder(conn).applied_migrations():
            return []  # `migrate` is about to build it (it runs the checks first)
        built_for = vectors.index_dim(conn)
    except Exception:  # noqa: BLE001 - no tables yet (before the first migrate): nothing to check
        return []
    if built_for is not None and built_for != embeddings.DIM:
        return [_wrong_dimension(built_for)]
    if not vectors.available(conn):
        return [
            checks.Warning(
                "Memory recall is full-text only: there is no vector index on this database.",
                hint=vectors.why_not(conn),
                id="memory.W001",
            )
        ]
    return []


def _wrong_dimension(built_for: int) -> checks.Error:
    """E002: the index holds vectors of another dimension than the embedding model makes."""
    return checks.Error(
        f"The memory vector index holds {built_for}-dimension vectors; the embedding model "
        f"({embeddings.MODEL_ID}) makes {embeddings.DIM}: recall by meaning is off until it is rebuilt.",
        hint="Run `manage.py embed_facts --rebuild`.",
        id="memory.E002",
    )
