"""Vectors for facts that have none in the index yet: those remembered before the index existed (migration 0007),
or on a PostgreSQL where pgvector was enabled later, or all of them after a model change (`rebuild`). Used by the
migration and by `manage.py embed_facts`, in batches of BATCH facts, one transaction each."""

from __future__ import annotations

from collections.abc import Callable

from django.db import connection as default_connection
from django.db import transaction

from memory import embeddings, vectors

BATCH = 500


def missing_count(conn=None, rebuild: bool = False) -> int:
    conn = conn or default_connection
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM memory_fact f WHERE {_missing(conn, rebuild)}")
        return cursor.fetchone()[0]


def embed_missing(
    conn=None, rebuild: bool = False, batch: int = BATCH, progress: Callable[[int], None] | None = None
) -> int:
    """Embed and index every fact the index lacks (every fact with `rebuild`); the number done. `progress` is told
    each batch's size."""
    conn = conn or default_connection
    index = vectors.kind(conn)
    if index == "none":
        return 0
    done, after = 0, 0
    where = _missing(conn, rebuild)
    while True:
        rows = _next_batch(conn, where, after, batch)
        if not rows:
            if done and conn.vendor == "postgresql":
                _analyze(conn)
            return done
        _index_batch(conn, index, rows, rebuild)
        done += len(rows)
        after = rows[-1][0]
        if progress is not None:
            progress(len(rows))


def _next_batch(conn, where: str, after: int, batch: int) -> list[tuple]:
    """Up to `batch` facts the index lacks after fact `after`, in id order: (id, owner id, text, stored embedding)."""
    with conn.cursor() as cursor:
        cursor.execute(
            f"SELECT f.id, f.owner_id, f.text, f.embedding FROM memory_fact f WHERE f.id > %s AND {where} "
            "ORDER BY f.id LIMIT %s",
            [after, batch],
        )
        return cursor.fetchall()


def _index_batch(conn, index: str, rows: list[tuple], rebuild: bool) -> None:
    """Index a batch of facts in one transaction, embedding (and storing the embedding of) those that need it."""
    # computed again: with `rebuild`, without a stored vector, or with one of another model's dimension
    fresh = [row for row in rows if rebuild or row[3] is None or len(row[3]) != embeddings.DIM * 4]
    computed = dict(zip((r[0] for r in fresh), embeddings.embed([r[2] for r in fresh]), strict=True))
    with transaction.atomic(using=conn.alias), conn.cursor() as cursor:
        for fact_id, owner_id, _, stored in rows:
            vector = computed.get(fact_id)
            if vector is None:
                vector = embeddings.from_bytes(stored)
            else:
                cursor.execute(
                    "UPDATE memory_fact SET embedding = %s WHERE id = %s", [embeddings.to_bytes(vector), fact_id]
                )
            vectors.store(fact_id, owner_id, vector, conn=conn, index=index)


def _missing(conn, rebuild: bool) -> str:
    if rebuild:
        return "1 = 1"
    if conn.vendor == "sqlite":
        return "NOT EXISTS (SELECT 1 FROM memory_fact_vec v WHERE v.fact_id = f.id)"
    return "f.vec IS NULL"


def _analyze(conn) -> None:
    """Fresh planner statistics for the vector column after a backfill. Until autovacuum's ANALYZE, PostgreSQL
    believes `vec` is null wherever it was at the last one (all of it, after a bulk load of facts embedded later),
    plans the nearest-facts query as a scan of the owner's rows sorted by distance instead of the HNSW index, and
    takes 340 ms instead of 6 at 100,000 facts."""
    with conn.cursor() as cursor:
        cursor.execute("ANALYZE memory_fact")
