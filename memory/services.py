"""Memory writes and reads. The owner always comes from the caller (an authenticated user), never from input."""

from __future__ import annotations

import hashlib
import re
import unicodedata

from django.db import IntegrityError, connection, transaction

from memory.models import MAX_FACT_CHARS, Fact

_WORD = re.compile(r"\w+", re.UNICODE)
MAX_QUERY_TERMS = 16
# PostgreSQL's english configuration drops these; we drop them before querying so both databases agree.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between
    both but by can could did do does doing down during each few for from further had has have having he her here
    hers herself him himself his how i if in into is it its itself just me more most my myself no nor not now of
    off on once only or other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up very was we were what
    when where which while who whom why will with would you your yours yourself yourselves s t don remember recall
    know tell""".split()
)


class MemoryError_(ValueError):
    """Bad input for memory (empty, too long, or a NUL character)."""


def normalise(text: str) -> str:
    """The comparison form: NFKC, case-folded, whitespace collapsed, trailing punctuation dropped."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return " ".join(folded.split()).rstrip(" .!?;,")


def _digest(text: str) -> str:
    return hashlib.sha256(normalise(text).encode()).hexdigest()


def clean_text(text: str) -> str:
    """The stored form: whitespace collapsed; refused when empty, too long, or holding a NUL character."""
    cleaned = " ".join(str(text).split())
    if "\x00" in cleaned:  # PostgreSQL cannot store it; refuse it on every database, in our words, before any query
        raise MemoryError_("A fact cannot contain the NUL character (U+0000).")
    if not cleaned:
        raise MemoryError_("A fact needs some text.")
    if len(cleaned) > MAX_FACT_CHARS:
        raise MemoryError_(f"A fact has at most {MAX_FACT_CHARS} characters.")
    return cleaned


def remember(user, text: str, run=None, call_key: str | None = None) -> tuple[Fact, bool]:
    """Store a fact for this user; the same normalised text twice keeps one fact. Returns (fact, created).

    A repeat of the call that stored it (same `call_key`, as on a resumed run) counts as that same creation.
    """
    cleaned = clean_text(text)
    digest = _digest(cleaned)
    existing = Fact.objects.filter(owner=user, digest=digest).first()
    if existing is not None:
        return existing, bool(call_key) and existing.call_key == call_key
    try:
        with transaction.atomic():
            fact = Fact.objects.create(owner=user, text=cleaned, digest=digest, run=run, call_key=call_key)
            return fact, True
    except IntegrityError:  # a concurrent writer stored the same fact first
        return Fact.objects.get(owner=user, digest=digest), False


def query_terms(query: str) -> list[str]:
    """The query's words without stop words (what both databases search for)."""
    words = [w.casefold() for w in _WORD.findall(unicodedata.normalize("NFKC", query or ""))]
    return [w for w in dict.fromkeys(words) if w not in STOP_WORDS][:MAX_QUERY_TERMS]


def recall(user, query: str, limit: int = 5, offset: int = 0) -> list[Fact]:
    """The user's facts most relevant to `query`: any word matches, more matching words rank higher, ties newest first.

    An empty or stop-word-only query returns the most recent facts.
    """
    terms = query_terms(query)
    if not terms:
        return list(Fact.objects.filter(owner=user).order_by("-created_at", "-id")[offset : offset + limit])
    ids = _ranked_ids(user.pk, terms, limit, offset)
    facts = Fact.objects.in_bulk(ids)
    return [facts[i] for i in ids if i in facts]


def count_matches(user, query: str) -> int:
    terms = query_terms(query)
    if not terms:
        return Fact.objects.filter(owner=user).count()
    sql, params = _match_sql(user.pk, terms, select="COUNT(*)", order=False)
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def _ranked_ids(owner_id: int, terms: list[str], limit: int, offset: int) -> list[int]:
    sql, params = _match_sql(owner_id, terms, select="f.id", order=True)
    with connection.cursor() as cursor:
        cursor.execute(sql + " LIMIT %s OFFSET %s", [*params, limit, offset])
        return [row[0] for row in cursor.fetchall()]


def _match_sql(owner_id: int, terms: list[str], *, select: str, order: bool) -> tuple[str, list]:
    """Facts of one owner matching any term, scored by how many distinct terms they match (same on both databases)."""
    if connection.vendor == "postgresql":
        return _postgres_sql(owner_id, terms, select=select, order=order)
    return _sqlite_sql(owner_id, terms, select=select, order=order)


def _postgres_sql(owner_id: int, terms: list[str], *, select: str, order: bool) -> tuple[str, list]:
    query = "to_tsquery('english'::regconfig, %s)"
    sql = f"SELECT {select} FROM memory_fact f WHERE f.owner_id = %s AND f.search @@ {query}"
    params: list = [owner_id, " | ".join(terms)]
    if order:
        hits = " + ".join(f"(f.search @@ {query})::int" for _ in terms)
        sql += f" ORDER BY ({hits}) DESC, f.created_at DESC, f.id DESC"
        params += terms
    return sql, params


def _sqlite_sql(owner_id: int, terms: list[str], *, select: str, order: bool) -> tuple[str, list]:
    # One FTS5 lookup per term; a fact's score is the number of lookups that found it.
    lookups = " UNION ALL ".join("SELECT rowid FROM memory_fact_fts WHERE memory_fact_fts MATCH %s" for _ in terms)
    sql = (
        f"SELECT {select} FROM (SELECT rowid AS rid, COUNT(*) AS hits FROM ({lookups}) GROUP BY rowid) m "
        "JOIN memory_fact f ON f.id = m.rid WHERE f.owner_id = %s"
    )
    if order:
        sql += " ORDER BY m.hits DESC, f.created_at DESC, f.id DESC"
    return sql, ['"' + t.replace('"', "") + '"' for t in terms] + [owner_id]
