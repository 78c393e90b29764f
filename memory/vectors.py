"""The vector index of memory facts, beside the full-text one: nearest facts of one owner by cosine similarity.

Every fact keeps its vector in `memory_fact.embedding` (float32 bytes, memory/embeddings.py): the record, on every
database. The index is the database's own:

- SQLite: a sqlite-vec `vec0` table, `memory_fact_vec`, partitioned by owner (a user's query reads only that user's
  rows), holding each vector's sign bits (`bit[256]`, 32 bytes). A query takes the SHORTLIST nearest by Hamming
  distance, then ranks those by exact cosine from their stored vectors: scanning the bits is several times cheaper than
  scanning the float vectors (docs/memory.md). A trigger deletes a fact's row with the fact. sqlite-vec keeps the
  bits in chunks of 1,024 (its shadow tables); its own k-nearest search selects the k smallest of each chunk in
  O(chunk × k), 9-12 ms at k = 50 and 100,000 facts, so `_sqlite_shortlist` reads the owner's chunks (about 100 rows
  for 100,000 facts) and does the Hamming distances and the selection with numpy, ~2 ms. It trusts only the layout it
  knows (`_sqlite_layout`: sqlite-vec 0.1's table and blob sizes), and falls back to sqlite-vec's search otherwise.
- PostgreSQL with pgvector: a `vector(256)` column, `memory_fact.vec`, and an HNSW index (cosine), queried with
  iterative scans (pgvector 0.8), so that an owner filter still yields `k` rows.
- PostgreSQL without pgvector: no index; recall is full-text only and the `memory.W001` system check says how to
  enable vectors.

`install` creates the index where it can (migration 0007 and `manage.py embed_facts`); `available` says whether it
exists on a connection.
"""

from __future__ import annotations

import logging
from contextlib import suppress

import numpy as np
from django.db import connection as default_connection
from django.db import transaction

from memory import embeddings

log = logging.getLogger(__name__)

# SQLite: candidates by Hamming distance on the sign bits, re-ranked by exact cosine. With the selection done in numpy
# the shortlist's cost is the re-ranking (fetching its float vectors), not the scan: 200 keeps the 50 nearest by
# cosine where 50 lost some (docs/memory.md); sqlite-vec's own search (the fallback) stays at 50, its cost grows with k.
SHORTLIST = 200
FALLBACK_SHORTLIST = 50
# The shadow tables of sqlite-vec 0.1 that `_sqlite_shortlist` reads, with the columns it needs.
SQLITE_CHUNKS = {
    "memory_fact_vec_chunks": {"chunk_id", "size", "partition00", "validity", "rowids"},
    "memory_fact_vec_vector_chunks00": {"rowid", "vectors"},
}

SQLITE_TABLE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS memory_fact_vec USING vec0("
    "fact_id integer primary key, owner_id integer partition key, embedding bit[{dim}])"
)
SQLITE_TRIGGER = (
    "CREATE TRIGGER IF NOT EXISTS memory_fact_vec_delete AFTER DELETE ON memory_fact BEGIN "
    "DELETE FROM memory_fact_vec WHERE fact_id = old.id; END"
)
POSTGRES_INDEX = "CREATE INDEX IF NOT EXISTS memory_fact_vec_hnsw ON memory_fact USING hnsw (vec vector_cosine_ops)"


def kind(conn=None) -> str:
    """sqlite-vec, pgvector, or none: the vector index this database has for the model's vectors (an index built for
    another dimension counts as none: the memory.E002 check reports it). Remembered per connection once found."""
    conn = conn or default_connection
    found = getattr(conn, "_memory_vector_index", None)
    if found is not None:
        return found
    found = "none"
    if conn.vendor == "sqlite":
        conn.ensure_connection()
        if getattr(conn, "vec_version", None) and index_dim(conn) == embeddings.DIM:
            found = "sqlite-vec"
    elif conn.vendor == "postgresql" and index_dim(conn) == embeddings.DIM:
        found = "pgvector"
    if found != "none":
        conn._memory_vector_index = found
    return found


def forget(conn=None) -> None:
    """Look again at the next `kind` (the index was created or dropped)."""
    conn = conn or default_connection
    for name in ("_memory_vector_index", "_memory_vec_layout"):
        with suppress(AttributeError):
            delattr(conn, name)  # (through django.db.connection's proxy, too)


def available(conn=None) -> bool:
    return kind(conn) != "none"


def index_dim(conn=None) -> int | None:
    """The dimension the index was built for (None without one): the system check compares it with the model's."""
    conn = conn or default_connection
    if conn.vendor == "sqlite":
        with conn.cursor() as cursor:
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'memory_fact_vec'")
            row = cursor.fetchone()
        if row is None:
            return None
        _, _, rest = row[0].partition("bit[")
        digits = rest.partition("]")[0]
        return int(digits) if digits.isdigit() else None
    if conn.vendor == "postgresql":
        return _postgres_column_dim(conn)
    return None


def why_not(conn=None) -> str:
    """Why this database has no vector index (for the system check and `embed_facts`)."""
    conn = conn or default_connection
    if conn.vendor == "sqlite":
        from reactsite.serving.sqlite import driver  # noqa: PLC0415 - the SQLite backend's own knowledge

        conn.ensure_connection()
        if not getattr(conn, "vec_version", None):
            return driver.vec_problem or "sqlite-vec is not loaded on this connection"
        return "the vector table does not exist yet: run `manage.py migrate` (or `manage.py embed_facts`)"
    if conn.vendor == "postgresql":
        if not _postgres_extension_installable(conn):
            return (
                "this PostgreSQL has no pgvector extension: install it (e.g. `apt install postgresql-15-pgvector`, "
                "or your provider's option), run `CREATE EXTENSION vector;` in the database as a superuser, then "
                "`manage.py embed_facts`"
            )
        return "pgvector is installable but not set up here: run `manage.py embed_facts`"
    return f"{conn.vendor} has no vector index support here"


def install(conn=None, dim: int = embeddings.DIM) -> bool:
    """Create the vector index if this database can hold one; True when it exists afterwards."""
    conn = conn or default_connection
    forget(conn)
    if conn.vendor == "sqlite":
        conn.ensure_connection()
        if not getattr(conn, "vec_version", None):
            return False
        with conn.cursor() as cursor:
            cursor.execute(SQLITE_TABLE.format(dim=dim))
            cursor.execute(SQLITE_TRIGGER)
        return True
    if conn.vendor == "postgresql":
        if _postgres_column_dim(conn) is None:
            try:
                with transaction.atomic(using=conn.alias), conn.cursor() as cursor:
                    cursor.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    cursor.execute(f"ALTER TABLE memory_fact ADD COLUMN IF NOT EXISTS vec vector({int(dim)})")
            except Exception as exc:  # noqa: BLE001 - no pgvector (or no right to create it): full-text recall
                log.info("no vector index on PostgreSQL: %s", type(exc).__name__)
                return False
        with conn.cursor() as cursor:
            cursor.execute("SELECT to_regclass('memory_fact_vec_hnsw') IS NOT NULL")
            if not cursor.fetchone()[0]:
                cursor.execute(POSTGRES_INDEX)
        return True
    return False


def uninstall(conn=None) -> None:
    conn = conn or default_connection
    forget(conn)
    with conn.cursor() as cursor:
        if conn.vendor == "sqlite":
            cursor.execute("DROP TRIGGER IF EXISTS memory_fact_vec_delete")
            if getattr(conn, "vec_version", None):
                cursor.execute("DROP TABLE IF EXISTS memory_fact_vec")
        elif conn.vendor == "postgresql" and _postgres_column_dim(conn) is not None:
            cursor.execute("DROP INDEX IF EXISTS memory_fact_vec_hnsw")
            cursor.execute("ALTER TABLE memory_fact DROP COLUMN IF EXISTS vec")


def store(fact_id: int, owner_id: int, vector: np.ndarray, conn=None, index: str | None = None) -> None:
    """Put a fact's vector in the index (replacing an older one); nothing without an index. The caller's transaction
    holds the fact's row and this together."""
    conn = conn or default_connection
    index = index or kind(conn)
    if index == "sqlite-vec":
        with conn.cursor() as cursor:
            cursor.execute("DELETE FROM memory_fact_vec WHERE fact_id = %s", [fact_id])
            cursor.execute(
                "INSERT INTO memory_fact_vec(fact_id, owner_id, embedding) VALUES (%s, %s, vec_quantize_binary(%s))",
                [fact_id, owner_id, embeddings.to_bytes(vector)],
            )
    elif index == "pgvector":
        with conn.cursor() as cursor:
            cursor.execute("UPDATE memory_fact SET vec = %s::vector WHERE id = %s", [pg_literal(vector), fact_id])


def nearest(owner_id: int, vector: np.ndarray, k: int, conn=None) -> list[tuple[int, float]]:
    """The owner's `k` facts nearest to `vector`: (fact id, cosine similarity), most similar first."""
    conn = conn or default_connection
    index = kind(conn)
    if index == "sqlite-vec":
        return _sqlite_nearest(conn, owner_id, vector, k)
    if index == "pgvector":
        return _postgres_nearest(conn, owner_id, vector, k)
    return []


def similarities(fact_ids: list[int], vector: np.ndarray, conn=None) -> dict[int, float]:
    """Cosine similarity of each fact's stored vector to `vector` (facts without one are left out)."""
    if not fact_ids:
        return {}
    conn = conn or default_connection
    marks = ", ".join(["%s"] * len(fact_ids))
    with conn.cursor() as cursor:
        cursor.execute(
            f"SELECT id, embedding FROM memory_fact WHERE id IN ({marks}) AND embedding IS NOT NULL", list(fact_ids)
        )
        rows = cursor.fetchall()
    if not rows:
        return {}
    matrix = np.frombuffer(b"".join(bytes(row[1]) for row in rows), dtype="<f4").reshape(len(rows), -1)
    if matrix.shape[1] != vector.shape[0]:  # vectors of another model: the system check reports it
        return {}
    scores = matrix @ vector
    return {row[0]: float(score) for row, score in zip(rows, scores, strict=True)}


def _sqlite_nearest(conn, owner_id: int, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
    shortlist = _sqlite_shortlist(conn, owner_id, vector, max(k, SHORTLIST))
    if shortlist is None:
        shortlist = _sqlite_vec_shortlist(conn, owner_id, vector, max(min(k, FALLBACK_SHORTLIST), 1))
    scored = similarities(shortlist, vector, conn)
    return sorted(scored.items(), key=lambda item: (-item[1], -item[0]))[:k]


def _sqlite_vec_shortlist(conn, owner_id: int, vector: np.ndarray, k: int) -> list[int]:
    """The owner's `k` facts nearest by Hamming distance, by sqlite-vec's own search."""
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT fact_id FROM memory_fact_vec WHERE embedding MATCH vec_quantize_binary(%s) AND k = %s "
            "AND owner_id = %s",
            [embeddings.to_bytes(vector), k, owner_id],
        )
        return [row[0] for row in cursor.fetchall()]


def sign_bits(vector: np.ndarray) -> np.ndarray:
    """The vector's sign bits as sqlite-vec's vec_quantize_binary packs them: bit i of byte j is element 8j + i,
    set when positive."""
    return np.packbits(np.asarray(vector) > 0, bitorder="little")


def _sqlite_shortlist(conn, owner_id: int, vector: np.ndarray, k: int) -> list[int] | None:
    """The owner's `k` facts nearest by Hamming distance of their sign bits, from the vec0 table's chunks of this
    owner's partition; None when the tables are not the layout this reads (then sqlite-vec's search serves).

    A chunk row holds `size` slots: a validity bitmap (a deleted or unused slot is 0), the slots' fact ids (int64)
    and, in the vector chunk of the same id, their bits (dim / 8 bytes each)."""
    if not _sqlite_layout(conn):
        return None
    width = vector.shape[0] // 8
    if vector.shape[0] % 64:
        return None  # the scan reads whole 64-bit words
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT c.size, c.validity, c.rowids, v.vectors FROM memory_fact_vec_chunks c "
            "JOIN memory_fact_vec_vector_chunks00 v ON v.rowid = c.chunk_id WHERE c.partition00 = %s",
            [owner_id],
        )
        chunks = cursor.fetchall()
    if not chunks:
        return []
    for size, validity, rowids, bits in chunks:
        if len(validity) * 8 != size or len(rowids) != size * 8 or len(bits) != size * width:
            log.warning("memory_fact_vec: a chunk of an unexpected layout; using sqlite-vec's search")
            return None
    valid = np.unpackbits(np.frombuffer(b"".join(bytes(c[1]) for c in chunks), dtype=np.uint8), bitorder="little")
    slots = np.flatnonzero(valid)
    if not len(slots):
        return []
    # In 64-bit words, XORed in place in one buffer (summing 32 bytes a row, or allocating per step, is several times
    # slower); every slot is scored and the unused ones dropped after.
    words = np.empty(len(valid) * width // 8, dtype="<u8")
    at = 0
    for chunk in chunks:
        part = np.frombuffer(chunk[3], dtype="<u8")
        words[at : at + len(part)] = part
        at += len(part)
    words = words.reshape(len(valid), -1)
    np.bitwise_xor(words, np.frombuffer(sign_bits(vector).tobytes(), dtype="<u8"), out=words)
    counts = np.bitwise_count(words)
    distances = counts[:, 0].astype(np.int32)
    for column in range(1, counts.shape[1]):
        distances += counts[:, column]
    distances = distances[slots]
    if len(slots) > k:
        keep = np.argpartition(distances, k - 1)[:k]
        slots, distances = slots[keep], distances[keep]
    # Only the kept slots' fact ids are read: (chunk, offset) of each, in the chunks' order.
    starts = np.cumsum([0, *(c[0] for c in chunks)])
    found = []
    for slot in slots[np.argsort(distances, kind="stable")]:
        chunk = int(np.searchsorted(starts, slot, side="right")) - 1
        offset = int(slot - starts[chunk]) * 8
        found.append(int.from_bytes(bytes(chunks[chunk][2][offset : offset + 8]), "little", signed=True))
    return found


def _sqlite_layout(conn) -> bool:
    """Whether memory_fact_vec's shadow tables are sqlite-vec 0.1's, as `_sqlite_shortlist` reads them (once per
    connection)."""
    known = getattr(conn, "_memory_vec_layout", None)
    if known is None:
        known = True
        with conn.cursor() as cursor:
            cursor.execute("SELECT value FROM memory_fact_vec_info WHERE key = 'CREATE_VERSION'")
            row = cursor.fetchone()
            if row is None or not str(row[0]).startswith("v0.1."):
                known = False
            for table, needed in SQLITE_CHUNKS.items():
                cursor.execute(f"SELECT name FROM pragma_table_info('{table}')")
                if not needed <= {r[0] for r in cursor.fetchall()}:
                    known = False
        if not known:
            log.warning("memory_fact_vec is not sqlite-vec 0.1's layout: sqlite-vec's own search serves")
        conn._memory_vec_layout = known
    return known


def _postgres_nearest(conn, owner_id: int, vector: np.ndarray, k: int) -> list[tuple[int, float]]:
    literal = pg_literal(vector)
    with transaction.atomic(using=conn.alias), conn.cursor() as cursor:
        # An owner's facts among everyone's: iterative scans go on past ef_search until k rows pass the filter.
        # A candidate list (ef_search, 40 by default) shorter than k stops short and iterates again; twice k keeps
        # more of the exact nearest (92 % of the top 5 against 90 % at 100,000 facts) at about the same cost.
        cursor.execute(
            "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), set_config('hnsw.ef_search', %s, true)",
            [str(min(max(2 * k, 40), 1000))],
        )
        cursor.execute(
            "SELECT id, 1 - (vec <=> %s::vector) AS similarity FROM memory_fact "
            "WHERE owner_id = %s AND vec IS NOT NULL ORDER BY vec <=> %s::vector LIMIT %s",
            [literal, owner_id, literal, k],
        )
        rows = cursor.fetchall()
    return sorted(((row[0], float(row[1])) for row in rows), key=lambda item: (-item[1], -item[0]))


def pg_literal(vector: np.ndarray) -> str:
    return "[" + ",".join(f"{x:.7g}" for x in np.asarray(vector, dtype=np.float32)) + "]"


def _postgres_column_dim(conn) -> int | None:
    with conn.cursor() as cursor:
        cursor.execute(
            "SELECT format_type(a.atttypid, a.atttypmod) FROM pg_attribute a "
            "WHERE a.attrelid = to_regclass('memory_fact') AND a.attname = 'vec' AND NOT a.attisdropped"
        )
        row = cursor.fetchone()
    if row is None:
        return None
    digits = row[0].partition("(")[2].rstrip(")")
    return int(digits) if digits.isdigit() else 0


def _postgres_extension_installable(conn) -> bool:
    with conn.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
        return cursor.fetchone() is not None
