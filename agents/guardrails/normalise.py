"""Text as a reader sees it, for the regex and pii guardrails: disguises of a word or a number folded away, with a
map back to the text as written so that redaction replaces exactly the characters that were there.

Each character is read on its own (what it reads as depends on nothing around it), in this order:

1. invisible characters are dropped: format characters (category Cf: zero-width space, joiners, word joiner, soft
   hyphen, byte order mark, bidi controls, tags), combining marks (Mn, Me: accents, variation selectors) and the
   few other default-ignorable code points (Hangul fillers);
2. the rest is decomposed for compatibility (NFKD: fullwidth and mathematical letters, ligatures, circled letters,
   no-break spaces), its combining marks dropped, and recomposed (NFKC);
3. each character left that is not ASCII reads as its Unicode TR39 confusable prototype when that is one ASCII
   character (Cyrillic "а" → "a", Greek "ο" → "o", en dash → "-"), a small capital as its letter ("ᴘ" → "p"),
   and a decimal digit of any script as its ASCII digit ("٤" → "4").

ASCII text is its own reading (the fast path: no copy, no map). The map back is built only when a span is asked for.
"""

from __future__ import annotations

import functools
import unicodedata
from dataclasses import dataclass
from functools import cached_property

from agents.engine.wrapping import confusables

_DROPPED_CATEGORIES = frozenset({"Cf", "Mn", "Me"})
_MARKS = frozenset({"Mn", "Me"})
_SMALL_CAPITAL = "LATIN LETTER SMALL CAPITAL "
_MAX_REMEMBERED = 65_536
# Default_Ignorable_Code_Point characters that are not Cf, Mn or Me: Hangul fillers and reserved code points.
_IGNORABLE = frozenset("\u115f\u1160\u2065\u3164\uffa0\ufff0\ufff1\ufff2\ufff3\ufff4\ufff5\ufff6\ufff7\ufff8")


def _invisible(ch: str) -> bool:
    """Whether a reader sees nothing of `ch`: a format character, a combining mark, a default-ignorable one."""
    return ch in _IGNORABLE or "\U000e0000" <= ch <= "\U000e0fff" or unicodedata.category(ch) in _DROPPED_CATEGORIES


@functools.cache
def _prototypes() -> dict[str, str]:
    """Non-ASCII character → the one ASCII character it is confusable with (Unicode TR39, via confusable-homoglyphs)."""
    found: dict[str, str] = {}
    for glyph, neighbours in confusables().items():
        if len(glyph) != 1 or glyph.isascii():
            continue
        ascii_ones = sorted(n for n in neighbours if len(n) == 1 and n.isascii() and n.isprintable() and n != " ")
        if ascii_ones:
            # TR39 folds "I" into "l": a capital that looks like "l" reads as the capital I
            found[glyph] = "I" if ascii_ones[0] == "l" and glyph.isupper() else ascii_ones[0]
    return found


def _latin(ch: str) -> str:
    """One composed, visible character as read: ASCII as it is, a digit as its ASCII digit, else its prototype (or,
    for a small capital, which TR39 leaves alone, its letter)."""
    if ch.isascii():
        return ch
    if unicodedata.category(ch) == "Nd":
        return str(unicodedata.decimal(ch))
    if ch in _prototypes():
        return _prototypes()[ch]
    name = unicodedata.name(ch, "")
    if name.startswith(_SMALL_CAPITAL) and len(name) == len(_SMALL_CAPITAL) + 1:
        return name[-1].lower()
    return ch


def reading(ch: str) -> str:
    """What one character reads as ("" for an invisible one)."""
    if ch.isascii():
        return ch
    if _invisible(ch):
        return ""
    visible = "".join(part for part in unicodedata.normalize("NFKD", ch) if not _invisible(part))
    composed = unicodedata.normalize("NFKC", visible)
    return "".join(_latin(part) for part in composed if not _invisible(part))


class _Readings(dict[int, str | None]):
    """str.translate's table, filled as characters are met (None deletes): a character is read once per process, up
    to a bound (a text made of every code point there is would otherwise keep them all)."""

    def __missing__(self, code: int) -> str | None:
        read = reading(chr(code)) or None
        if len(self) < _MAX_REMEMBERED:
            self[code] = read
        return read


_TABLE = _Readings()


@dataclass(frozen=True)
class Normalised:
    """A text as read (`text`) and as written (`original`); `span` maps a span of the one onto the other."""

    original: str
    text: str

    @property
    def changed(self) -> bool:
        return self.text is not self.original and self.text != self.original

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The span of `original` that `text[start:end]` reads from: whole characters, a character's combining marks
        with it (a match that ends on an accented letter takes its accent)."""
        if not self.changed:
            return start, end
        starts, ends = self._bounds
        if start >= end:  # an empty span: where it sits
            at = starts[start] if start < len(starts) else len(self.original)
            return at, at
        return starts[start], ends[end - 1]

    @cached_property
    def _bounds(self) -> tuple[list[int], list[int]]:
        """For each character of `text`, the start and end in `original` of the character (with the combining marks
        that follow it) it comes from."""
        original = self.original
        counts = [len(_TABLE[ord(ch)] or "") for ch in original]  # read for `text` already
        cluster_ends = list(range(1, len(original) + 1))
        for index in range(len(original) - 2, -1, -1):  # a combining mark belongs to the character before it
            after = original[index + 1]
            if not counts[index + 1] and after >= "\u0300" and unicodedata.category(after) in _MARKS:
                cluster_ends[index] = cluster_ends[index + 1]
        starts: list[int] = []
        ends: list[int] = []
        cluster_start = 0
        for index, count in enumerate(counts):
            if index >= cluster_ends[cluster_start]:
                cluster_start = index
            if count:
                starts += [cluster_start] * count
                ends += [cluster_ends[cluster_start]] * count
        return starts, ends


def normalise(text: str) -> Normalised:
    """`text` as a reader sees it (module docstring); pure ASCII is returned as it is."""
    if text.isascii():
        return Normalised(text, text)
    read = text.translate(_TABLE)
    return Normalised(text, text if read == text else read)
