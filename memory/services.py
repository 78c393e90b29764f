"""Memory writes and reads. The owner always comes from the caller (an authenticated user), never from input."""

from __future__ import annotations

import hashlib
import re
import unicodedata

from django.conf import settings
from django.db import IntegrityError, connection, transaction

from memory import embeddings, vectors
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


def vectors_on() -> bool:
    """Whether facts get vectors here: MEMORY_VECTORS on and a vector index on this database."""
    return settings.MEMORY_VECTORS and vectors.available()


def remember(user, text: str, run=None, call_key: str | None = None) -> tuple[Fact, bool]:
    """Store a fact for this user; the same normalised text twice keeps one fact. Returns (fact, created).

    A repeat of the call that stored it (same `call_key`, as on a resumed run) counts as that same creation. The
    fact's vector is computed before the transaction and stored in it, with the fact.
    """
    cleaned = clean_text(text)
    digest = _digest(cleaned)
    existing = Fact.objects.filter(owner=user, digest=digest).first()
    if existing is not None:
        return existing, bool(call_key) and existing.call_key == call_key
    index, vector = _vector_of(cleaned)
    try:
        with transaction.atomic():
            fact = Fact.objects.create(
                owner=user,
                text=cleaned,
                digest=digest,
                run=run,
                call_key=call_key,
                embedding=_stored(vector),
            )
            if vector is not None:
                vectors.store(fact.pk, user.pk, vector, index=index)
            return fact, True
    except IntegrityError:  # a concurrent writer stored the same fact first
        return Fact.objects.get(owner=user, digest=digest), False


def _vector_of(text: str):
    """(the index to store it in, the text's vector), computed before any transaction; (none, None) when facts get
    no vectors here."""
    index = vectors.kind() if settings.MEMORY_VECTORS else "none"
    return index, (embeddings.embed_one(text) if index != "none" else None)


def _stored(vector) -> bytes | None:
    return embeddings.to_bytes(vector) if vector is not None else None


class Conflict(MemoryError_):
    """The edit would make the fact the same as another of the owner's facts."""


def edit(user, fact_id: int, text: str) -> Fact:
    """Change the text of one of the user's facts (its vector follows); Fact.DoesNotExist for another user's."""
    cleaned = clean_text(text)
    digest = _digest(cleaned)
    index, vector = _vector_of(cleaned)
    with transaction.atomic():
        fact = Fact.objects.select_for_update().get(owner=user, pk=fact_id)
        if Fact.objects.filter(owner=user, digest=digest).exclude(pk=fact.pk).exists():
            raise Conflict("You already have a fact with this text.")
        fact.text, fact.digest = cleaned, digest
        fact.embedding = _stored(vector)
        try:
            with transaction.atomic():
                fact.save(update_fields=["text", "digest", "embedding"])
        except IntegrityError:  # a concurrent writer stored the same text first
            raise Conflict("You already have a fact with this text.") from None
        if vector is not None:
            vectors.store(fact.pk, user.pk, vector, index=index)
    return fact


def query_terms(query: str) -> list[str]:
    """The query's words without stop words (what both databases search for)."""
    words = [w.casefold() for w in _WORD.findall(unicodedata.normalize("NFKC", query or ""))]
    return [w for w in dict.fromkeys(words) if w not in STOP_WORDS][:MAX_QUERY_TERMS]


TEXT, SEMANTIC, HYBRID = "text", "semantic", "hybrid"
MODES = (TEXT, SEMANTIC, HYBRID)
MAX_RANKED = 50  # semantic and hybrid rank at most this many of a user's facts (the nearest, and the best by words)


def default_mode() -> str:
    return HYBRID if vectors_on() else TEXT


def check_mode(mode: str | None) -> str:
    """The mode to use: `mode`, or the default. One that needs vectors, asked of a server without them, falls back to
    text (the results say so: their `similarity` is None)."""
    if mode is None:
        return default_mode()
    if mode not in MODES:
        raise MemoryError_(f"mode must be one of {', '.join(MODES)}.")
    if mode != TEXT and not vectors_on():
        return TEXT
    return mode


class Ranked:
    """One query's ranking of one user's facts, read in pages (the memory API counts, then reads a page: the
    ranking of semantic and hybrid recall is computed once for both)."""

    def __init__(self, user, query: str, mode: str | None = None) -> None:
        self.user, self.query, self.mode = user, query or "", check_mode(mode)
        self.terms = query_terms(self.query)
        self.by_meaning = self.mode != TEXT and bool(self.query.strip())
        self._fused: tuple[list[int], object, dict[int, float]] | None = None

    def fused(self):
        if self._fused is None:
            self._fused = _fused(self.user.pk, self.query, self.terms, self.mode)
        return self._fused

    def count(self) -> int:
        if self.by_meaning:
            return len(self.fused()[0])
        if not self.terms:
            return Fact.objects.filter(owner=self.user).count()
        sql, params = _match_sql(self.user.pk, self.terms, select="COUNT(*)", order=False)
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchone()[0]

    def page(self, limit: int, offset: int = 0) -> list[Fact]:
        if not self.by_meaning:
            if not self.terms:
                facts = list(
                    Fact.objects.filter(owner=self.user).order_by("-created_at", "-id")[offset : offset + limit]
                )
                return _annotated(facts, self.terms, None)
            ids = _ranked_ids(self.user.pk, self.terms, limit, offset)
            found = Fact.objects.in_bulk(ids)
            return _annotated([found[i] for i in ids if i in found], self.terms, None)
        ranked, vector, similarity = self.fused()
        ids = ranked[offset : offset + limit]
        found = Fact.objects.filter(owner=self.user).in_bulk(ids)
        known = {**vectors.similarities([i for i in ids if i not in similarity], vector), **similarity}
        return _annotated([found[i] for i in ids if i in found], self.terms, known)


def recall(user, query: str, limit: int = 5, offset: int = 0, mode: str | None = None) -> list[Fact]:
    """The user's facts most relevant to `query`, best first; each carries `similarity` (cosine to the query, or None)
    and `words` (the query words it contains).

    text: any word matches, more matching words rank higher, ties newest first. semantic: the nearest by meaning (at
    least MEMORY_MIN_SIMILARITY), at most MAX_RANKED. hybrid (the default once vectors exist): the candidates of
    both, scored by meaning plus a share of the words (`_fused`). A blank query returns the most recent facts; so
    does a stop-word-only one in text mode.
    """
    return Ranked(user, query, mode).page(limit, offset)


def count_matches(user, query: str, mode: str | None = None) -> int:
    return Ranked(user, query, mode).count()


def neighbours(fact: Fact, limit: int = 5) -> list[tuple[Fact, float]] | None:
    """The owner's other facts nearest in meaning to this one, with their similarity; None without a vector index."""
    if not vectors_on():
        return None
    if fact.embedding is None:
        return []
    vector = embeddings.from_bytes(fact.embedding)
    if vector.shape[0] != embeddings.DIM:
        return []
    near = [(i, sim) for i, sim in vectors.nearest(fact.owner_id, vector, limit + 1) if i != fact.pk][:limit]
    found = Fact.objects.filter(owner_id=fact.owner_id).in_bulk([i for i, _ in near])
    return [(found[i], sim) for i, sim in near if i in found]


def _fused(owner_id: int, query: str, terms: list[str], mode: str):
    """(fact ids best first, the query's vector, similarities known) for semantic or hybrid recall.

    Hybrid scores each candidate (the nearest by meaning, and the best by words) as its cosine similarity plus
    MEMORY_TEXT_WEIGHT times the share of the query's words it contains. Reciprocal rank fusion lost to meaning alone
    on our labelled set (docs/memory.md): full-text matches any one word, and for a query that shares no word with
    its fact it lists facts that share an incidental one, which RRF then ranks above the nearest fact by meaning.
    """
    vector = embeddings.embed_one(" ".join(query.split()))
    floor = settings.MEMORY_MIN_SIMILARITY
    near = vectors.nearest(owner_id, vector, MAX_RANKED)
    if mode == SEMANTIC:
        kept = [(i, sim) for i, sim in near if sim >= floor]
        return [i for i, _ in kept], vector, dict(kept)
    similarity = dict(near)
    by_words = dict(_ranked_rows(owner_id, terms, MAX_RANKED, 0, select="f.id, f.text")) if terms else {}
    similarity.update(vectors.similarities([i for i in by_words if i not in similarity], vector))
    share = _word_shares(by_words, terms)
    weight = settings.MEMORY_TEXT_WEIGHT
    scores = {
        i: similarity.get(i, 0.0) + weight * share.get(i, 0.0)
        for i in {*similarity, *by_words}
        if i in share or similarity.get(i, -1.0) >= floor
    }
    order = sorted(scores, key=lambda i: (-scores[i], -i))
    return order[:MAX_RANKED], vector, similarity


def _word_shares(texts: dict[int, str], terms: list[str]) -> dict[int, float]:
    """How much of the query's wording each fact holds: the query's words it contains, each counting 1 / the number
    of these facts that contain it (a word many facts share says little about which one is meant), over the number
    of query words."""
    if not texts or not terms:
        return {}
    found = {i: matched_words(text, terms) for i, text in texts.items()}
    holders = {t: sum(1 for words in found.values() if t in words) for t in terms}
    return {i: sum(1 / holders[t] for t in words) / len(terms) for i, words in found.items()}


def _annotated(facts: list[Fact], terms: list[str], similarity: dict[int, float] | None) -> list[Fact]:
    for fact in facts:
        fact.similarity = None if similarity is None else similarity.get(fact.pk)
        fact.words = matched_words(fact.text, terms)
    return facts


def matched_words(text: str, terms: list[str]) -> list[str]:
    """The query terms this text contains (as words, or as a word's start: "colour" in "colours")."""
    if not terms:
        return []
    words = [w.casefold() for w in _WORD.findall(unicodedata.normalize("NFKC", text))]
    return [t for t in terms if any(w == t or (len(t) > 3 and w.startswith(t[:-1])) for w in words)]


def _ranked_ids(owner_id: int, terms: list[str], limit: int, offset: int) -> list[int]:
    return [row[0] for row in _ranked_rows(owner_id, terms, limit, offset)]


def _ranked_rows(owner_id: int, terms: list[str], limit: int, offset: int, select: str = "f.id") -> list[tuple]:
    sql, params = _match_sql(owner_id, terms, select=select, order=True)
    with connection.cursor() as cursor:
        cursor.execute(sql + " LIMIT %s OFFSET %s", [*params, limit, offset])
        return cursor.fetchall()


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
