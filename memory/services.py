"""Memory writes and reads. The owner always comes from the caller (an authenticated user), never from input."""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections import Counter

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
            found = _by_id(self.user.pk, ids)
            return _annotated([found[i] for i in ids if i in found], self.terms, None)
        ranked, vector, similarity = self.fused()
        ids = ranked[offset : offset + limit]
        found = _by_id(self.user.pk, ids)
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
    found = _by_id(fact.owner_id, [i for i, _ in near])
    return [(found[i], sim) for i, sim in near if i in found]


def _by_id(owner_id: int, ids: list[int]) -> dict[int, Fact]:
    """The owner's facts of these ids. Without the model's ordering: with it, SQLite walks the owner's whole
    (owner, created_at) index to skip a sort of a few rows (9 ms at 100,000 facts) instead of looking the ids up."""
    return Fact.objects.filter(owner_id=owner_id).order_by().in_bulk(ids)


def _fused(owner_id: int, query: str, terms: list[str], mode: str):
    """(fact ids best first, the query's vector, similarities known) for semantic or hybrid recall: the nearest by
    meaning, and for hybrid the owner's facts holding the query's words too (`_word_candidates`), ranked by `fuse`."""
    vector = embeddings.embed_one(" ".join(query.split()))
    floor = settings.MEMORY_MIN_SIMILARITY
    near = vectors.nearest(owner_id, vector, MAX_RANKED)
    if mode == SEMANTIC:
        kept = [(i, sim) for i, sim in near if sim >= floor]
        return [i for i, _ in kept], vector, dict(kept)
    similarity = dict(near)
    hits, known = _word_candidates(owner_id, terms, vector)
    similarity.update(known)
    similarity.update(vectors.similarities([i for i in hits if i not in similarity], vector))
    return fuse(similarity, hits, len(terms), floor, settings.MEMORY_TEXT_WEIGHT), vector, similarity


def fuse(similarity: dict[int, float], hits: dict[int, set[int]], terms: int, floor: float, weight: float) -> list[int]:
    """Hybrid's order, best first (at most MAX_RANKED): each candidate scored by its cosine similarity plus `weight`
    times the share of the query's words it holds, a word counting 1 / the number of candidates holding it (a word
    many facts share says little about which one is meant); a fact holding no more than half the query's words gets
    no bonus. Candidates below the similarity floor stay only with a bonus.

    Reciprocal rank fusion lost to meaning alone on our labelled set (docs/memory.md): full-text matches any one word,
    and for a query that shares no word with its fact it lists facts that share an incidental one, which RRF then
    ranks above the nearest fact by meaning. The majority rule stops the same with one incidental word of a two- or
    three-word query; tuned on one half of the labelled set, it is what puts hybrid ahead of meaning alone on the
    other (`manage.py bench --only recall`). `similarity` holds every candidate's; `hits`, the query words (their
    indexes) each fact holds.
    """
    holders = Counter(t for held in hits.values() for t in held)
    bonus = {i: weight * sum(1 / holders[t] for t in held) / terms for i, held in hits.items() if 2 * len(held) > terms}
    scores = {i: sim + bonus.get(i, 0.0) for i, sim in similarity.items() if i in bonus or sim >= floor}
    return sorted(scores, key=lambda i: (-scores[i], -i))[:MAX_RANKED]


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


def _word_candidates(owner_id: int, terms: list[str], vector) -> tuple[dict[int, set[int]], dict[int, float]]:
    """Hybrid's candidates by words: the owner's facts holding the query's words, and which (indexes into `terms`):
    for each word MAX_RANKED of its holders, and MAX_RANKED of those holding them all, in one query. SQLite takes the
    newest (FTS5 reads its index backwards for free); PostgreSQL whichever its GIN index yields first (ordering by id
    made it walk the table backwards through every row until enough matched: 7 ms against 2 at 100,000 facts).

    Not the MAX_RANKED best by words, as text mode ranks them: that counts and sorts every fact holding any query
    word (8-13 ms at 100,000 facts), where these lookups stop at their limit (1-2 ms); and a word that MAX_RANKED
    facts hold adds almost nothing to a fact's score (`fuse`). A fact found for one word is checked for the others
    as `matched_words` does."""
    if not terms:
        return {}, {}
    params: list = []
    if connection.vendor == "postgresql":
        # With pgvector, each fact's similarity comes along (no second query for the stored vectors).
        sim = "1 - (f.vec <=> q.v)" if vectors.kind() == "pgvector" else "NULL::float8"
        head = "WITH q AS (SELECT %s::vector AS v) " if vectors.kind() == "pgvector" else ""
        params += [vectors.pg_literal(vector)] if head else []
        lookup = (
            f"(SELECT f.id, f.text, {{tag}}, {sim} FROM memory_fact f{', q' if head else ''} WHERE f.owner_id = %s "
            "AND f.search @@ to_tsquery('english'::regconfig, %s) LIMIT %s)"
        )
        phrases = [*terms, " & ".join(terms)]
    else:
        head = ""
        lookup = (
            "SELECT * FROM (SELECT f.id, f.text, {tag}, NULL FROM memory_fact_fts JOIN memory_fact f "
            "ON f.id = memory_fact_fts.rowid WHERE f.owner_id = %s AND memory_fact_fts MATCH %s "
            "ORDER BY memory_fact_fts.rowid DESC LIMIT %s)"
        )
        quoted = ['"' + t.replace('"', "") + '"' for t in terms]
        phrases = [*quoted, " AND ".join(quoted)]
    phrases = phrases[:1] if len(terms) == 1 else phrases  # the tag len(terms): the lookup of all the words
    sql = head + " UNION ALL ".join(lookup.format(tag=tag) for tag in range(len(phrases)))
    with connection.cursor() as cursor:
        cursor.execute(sql, params + [p for phrase in phrases for p in (owner_id, phrase, MAX_RANKED)])
        rows = cursor.fetchall()
    everything = set(range(len(terms)))
    found: dict[int, set[int]] = {}
    texts: dict[int, str] = {}
    similarity: dict[int, float] = {}
    for fact_id, text, tag, sim in rows:
        found.setdefault(fact_id, set()).update(everything if tag == len(terms) else {tag})
        texts[fact_id] = text
        if sim is not None:
            similarity[fact_id] = float(sim)
    index = {t: n for n, t in enumerate(terms)}
    for fact_id, held in found.items():
        if len(held) < len(terms):
            held.update(index[t] for t in matched_words(texts[fact_id], terms))
    return found, similarity


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
