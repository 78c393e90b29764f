"""Finding runs by the client's metadata, by the words of their input and output, and by time (`GET /api/v1/runs`
and the console's run list). Each look-up uses an index on both databases (agents/migrations/0021_run_search.py).

Metadata (`?metadata.<key>=<value>`): a query string is text, a stored value a string, number or boolean: `5`
matches the number 5 and the string "5", `true` the boolean and the string "true". Several pairs: a run must have
them all. Words (`?q=`): every word must be in the run's input or output (English stemming: "dogs" finds "dog").
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.db.models import Q, QuerySet
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from agents.errors import InvalidRequest

# Metadata bounds (a run's and a thread's alike): a flat object, small enough for every list row to carry.
MAX_KEYS = 32
MAX_KEY_CHARS = 64
MAX_VALUE_CHARS = 512
KEY = re.compile(r"^[A-Za-z0-9_.:-]+$")
_WORD = re.compile(r"\w+")
# `q` must hold a word (an ASCII letter, digit or _, as the served schema's pattern says); at most MAX_Q_CHARS.
Q_PATTERN = "[A-Za-z0-9_]"
MAX_Q_CHARS = 500
# created_after / created_before: a date, or an RFC 3339 date-time (with its offset).
_DATE = r"\d{4}-\d{2}-\d{2}"
_MOMENT = re.compile(rf"{_DATE}|{_DATE}[Tt]\d{{2}}:\d{{2}}:\d{{2}}(\.\d+)?([Zz]|[+-]\d{{2}}:\d{{2}})")
MOMENT_SCHEMA = {"anyOf": [{"type": "string", "format": "date"}, {"type": "string", "format": "date-time"}]}
POSTGRES_TEXT = "to_tsvector('english'::regconfig, input || ' ' || coalesce(output, ''))"  # as migration 0021


def metadata_problem(value: Any) -> str | None:
    """Why `value` is not usable as metadata, or None: a JSON object of at most MAX_KEYS keys (letters, digits and
    `_ . : -`), each value a string (at most MAX_VALUE_CHARS, no NUL), a finite number or a boolean."""
    if not isinstance(value, dict):
        return "Must be a JSON object of keys to strings, numbers or booleans."
    if len(value) > MAX_KEYS:
        return f"At most {MAX_KEYS} keys (got {len(value)})."
    for key, item in value.items():
        if not (isinstance(key, str) and 0 < len(key) <= MAX_KEY_CHARS and KEY.match(key)):
            return f"Key {key!r}: 1 to {MAX_KEY_CHARS} letters, digits or the characters _ . : -"
        if isinstance(item, bool) or (isinstance(item, int | float) and math.isfinite(item)):
            continue
        if isinstance(item, str):
            if len(item) > MAX_VALUE_CHARS or "\x00" in item:
                return f"The value of {key!r}: at most {MAX_VALUE_CHARS} characters, and no NUL."
            continue
        kind = "an object" if isinstance(item, dict) else "a list" if isinstance(item, list) else "null or not finite"
        return f"The value of {key!r} is {kind}: metadata is flat (strings, numbers, booleans)."
    return None


@dataclass
class RunSearch:
    """What a run list is narrowed by (all optional)."""

    metadata: dict[str, str] = field(default_factory=dict)
    q: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None

    def apply(self, runs: QuerySet) -> QuerySet:
        if self.created_after is not None:
            runs = runs.filter(created_at__gt=self.created_after)
        if self.created_before is not None:
            runs = runs.filter(created_at__lt=self.created_before)
        if not self.metadata and not self.q:
            return runs
        if connection.vendor == "postgresql":
            return _postgres(runs, self.metadata, words(self.q))
        return _sqlite(runs, self.metadata, words(self.q))


def from_query(params) -> RunSearch:
    """The search a list request's query string asks for; InvalidRequest (400) naming the parameter at fault."""
    search = RunSearch()
    for name in params:
        if not name.startswith("metadata."):
            continue
        key, value = name[len("metadata.") :], params.get(name)
        if not (0 < len(key) <= MAX_KEY_CHARS and KEY.match(key)):
            raise InvalidRequest({name: [f"A metadata key: 1 to {MAX_KEY_CHARS} letters, digits or _ . : -"]})
        if len(params.getlist(name)) > 1:
            raise InvalidRequest({name: ["Give each metadata key once."]})
        search.metadata[key] = value
    if "q" in params:
        q = params.get("q", "")
        if not re.search(Q_PATTERN, q) or len(q) > MAX_Q_CHARS:
            raise InvalidRequest({"q": [f"Give at least one word to search for (at most {MAX_Q_CHARS} characters)."]})
        search.q = q
    for name in ("created_after", "created_before"):
        if name in params:
            setattr(search, name, _moment(name, params.get(name, "")))
    return search


def _moment(name: str, text: str) -> datetime:
    moment = None
    if _MOMENT.fullmatch(text):
        try:
            moment = parse_datetime(text.upper())
            day = parse_date(text) if moment is None else None
            if day is not None:
                moment = datetime.combine(day, datetime.min.time())
        except ValueError:
            moment = None
    if moment is None:
        raise InvalidRequest({name: ["An ISO 8601 date or date-time, e.g. 2026-12-03 or 2026-12-03T09:30:00Z."]})
    return moment if timezone.is_aware(moment) else timezone.make_aware(moment, UTC)


def words(text: str | None) -> list[str]:
    """The words of a search, folded (at most 16)."""
    if not text:
        return []
    return [w.casefold() for w in _WORD.findall(unicodedata.normalize("NFKC", text))][:16]


def candidates(value: str) -> list[Any]:
    """The stored values a query string's value matches: itself as a string, and the number or boolean it spells."""
    found: list[Any] = [value]
    if value in ("true", "false"):
        found.append(value == "true")
    elif re.fullmatch(r"-?\d{1,18}", value):
        found.append(int(value))
    else:
        try:
            number = float(value)
        except ValueError:
            number = None
        if number is not None and math.isfinite(number) and re.fullmatch(r"-?[\d.]+([eE][-+]?\d+)?", value):
            found.append(number)
    return found


def _postgres(runs: QuerySet, metadata: dict[str, str], terms: list[str]) -> QuerySet:
    for key, value in metadata.items():  # `@>`: the GIN index (jsonb_path_ops) answers each
        match = Q()
        for candidate in candidates(value):
            match |= Q(metadata__contains={key: candidate})
        runs = runs.filter(match)
    if terms:
        query = " & ".join(t.replace("'", "") for t in terms)
        runs = runs.filter(pk__in=RawSQL(f"SELECT id FROM agents_run WHERE {POSTGRES_TEXT} @@ to_tsquery("
                                          "'english'::regconfig, %s)", [query]))  # fmt: skip
    return runs


def _sqlite(runs: QuerySet, metadata: dict[str, str], terms: list[str]) -> QuerySet:
    groups = []
    for key, value in metadata.items():
        tokens = [_token(key, c) for c in candidates(value)]
        groups.append("meta : (" + " OR ".join(tokens) + ")")
    if terms:
        groups.append("{input output} : (" + " AND ".join('"' + t.replace('"', "") + '"' for t in terms) + ")")
    expression = " AND ".join(groups)
    rowids = "SELECT rowid FROM agents_run_fts WHERE agents_run_fts MATCH %s"
    return runs.filter(pk__in=RawSQL(f"SELECT id FROM agents_run WHERE rowid IN ({rowids})", [expression]))


def _token(key: str, value: Any) -> str:
    """The FTS token of one metadata pair, as migration 0021's triggers write it."""
    if isinstance(value, bool):
        kind, text = ("true", "true") if value else ("false", "false")
    elif isinstance(value, int):
        kind, text = "integer", str(value)
    elif isinstance(value, float):
        kind, text = "real", repr(value)
    else:
        kind, text = "text", value
    return f"m{key.encode().hex()}t{kind}v{text.encode().hex()}"
