"""Tool output hygiene: neutralise forged markers, cut to a bound, wrap between markers."""

from __future__ import annotations

import functools
import json
import re
import unicodedata
from dataclasses import dataclass
from importlib import resources

START = "<<<TOOL_OUTPUT_START>>>"
END = "<<<TOOL_OUTPUT_END>>>"
_REPLACEMENT = "[tool output marker removed]"

# What either marker reads as once look-alikes, case and separators are folded away (see skeleton()).
_MARKER_SKELETON = re.compile("<<<tooloutput(?:start|end)>>>")
_SYMBOLS = frozenset("<>tolupsarend")
# Characters that look like these read as a separator, so they are dropped like the separators themselves.
_SEPARATOR_LOOKS = " -_"
# Cc/Cf/Mn/Me cover zero-width characters, bidi controls, joiners, variation selectors and tags. These invisible
# ones are letters, symbols or unassigned by category (Default_Ignorable_Code_Point, and the blank braille cell).
_INVISIBLE = frozenset("\u115f\u1160\u2065\u2800\u3164\uffa0\ufff0\ufff1\ufff2\ufff3\ufff4\ufff5\ufff6\ufff7\ufff8")
_SEPARATOR_CATEGORIES = frozenset({"Cc", "Cf", "Mn", "Me", "Pc", "Pd", "Zs", "Zl", "Zp"})
# TR39 does not map these to "<<" / ">>", yet «<TOOL_OUTPUT_END>» reads as the marker all the same.
_EXTRA_LOOKS = {"«": "<<", "»": ">>"}
# Every character that reads as a marker symbol or a separator lies in planes 0, 1 and 14 (planes 2-3 hold CJK
# ideographs, 15-16 private use, the rest is unassigned); a test scans the others to keep this true.
_PLANES = (range(0x20000), range(0xE0000, 0xE1000))


@dataclass(frozen=True)
class _Folding:
    """How each character reads when compared with the markers."""

    table: dict[int, str | None]  # code point → the symbols it reads as (None: nothing); absent: itself
    openers: re.Pattern[str]  # any character that reads as, or as containing, "<"


def confusables() -> dict[str, set[str]]:
    """Unicode's TR39 confusables as an undirected graph, from the confusable-homoglyphs package data."""
    # Read the data file rather than import the package's module: that module pulls in urllib for its updater.
    raw = json.loads(resources.files("confusable_homoglyphs").joinpath("confusables.json").read_text("utf-8"))
    bidi_marks = {0x200E: None, 0x200F: None}  # the data quotes right-to-left characters between LRM marks
    graph: dict[str, set[str]] = {}
    for key, entries in raw.items():
        graph.setdefault(key.translate(bidi_marks), set()).update(e["c"].translate(bidi_marks) for e in entries)
    return graph


def _component(graph: dict[str, set[str]], seed: str) -> set[str]:
    """Every single character confusable with `seed` (TR39: the same prototype), `seed` included."""
    seen, todo = {seed}, [seed]
    while todo:
        for glyph in graph.get(todo.pop(), ()):
            if len(glyph) == 1 and glyph not in seen:
                seen.add(glyph)
                todo.append(glyph)
    return seen


def _look_alikes() -> dict[str, str]:
    """Character → the marker symbols it looks like ("" for a separator look-alike), in either case."""
    graph = confusables()
    looks: dict[str, str] = {}
    for symbol in sorted(_SYMBOLS) + list(_SEPARATOR_LOOKS):
        target = "" if symbol in _SEPARATOR_LOOKS else symbol
        for seed in (symbol, symbol.upper()):
            for glyph in _component(graph, seed):
                looks.setdefault(glyph, target)
    for prototype, glyphs in graph.items():  # prototypes of several characters: "⋘" reads "<<<", "∞" reads "oo"
        if len(prototype) > 1 and set(prototype.lower()) <= _SYMBOLS:
            for glyph in glyphs:  # ASCII keeps its own reading ("m" is "rn" in TR39, harmless and costly here)
                if len(glyph) == 1 and not glyph.isascii():
                    looks.setdefault(glyph, prototype.lower())
    for glyph, symbols in _EXTRA_LOOKS.items():
        looks.setdefault(glyph, symbols)
    return looks


def _is_separator(ch: str) -> bool:
    """Whitespace, dashes, connectors (underscore) and invisible characters: nothing a reader sees as a letter."""
    if ch.isspace() or ch in _INVISIBLE or "\U000e0000" <= ch <= "\U000e0fff":  # plane 14 is all tags and selectors
        return True
    return unicodedata.category(ch) in _SEPARATOR_CATEGORIES


def _reads_as(ch: str, looks: dict[str, str]) -> str:
    """What one character reads as: its look-alike symbols, else its compatibility decomposition, case-folded."""
    if ch in looks:
        return looks[ch]
    if _is_separator(ch):
        return ""
    parts = unicodedata.normalize("NFKD", ch)  # fullwidth, ligatures, accents split off (then dropped as marks)
    if parts == ch:
        return ch.casefold()
    return "".join(_reads_as(part, looks) for part in parts)  # parts are decomposed already: one level deep


@functools.cache
def _folding() -> _Folding:
    """Built once per process (a fraction of a second): only characters that read as a separator or a symbol."""
    looks = _look_alikes()
    table: dict[int, str | None] = {}
    for plane in _PLANES:
        for code in plane:
            ch = chr(code)
            reading = _reads_as(ch, looks)
            if reading != ch and (not reading or not _SYMBOLS.isdisjoint(reading)):
                table[code] = reading or None
    openers = sorted({"<"} | {chr(code) for code, reading in table.items() if reading and "<" in reading})
    return _Folding(table, re.compile("[" + "".join(map(re.escape, openers)) + "]"))


def warm() -> None:
    """Build the look-alike table now (a host calls this before it serves, rather than stall its first tool call)."""
    _folding()


def skeleton(text: str) -> str:
    """The text as compared with the markers: look-alikes (Unicode TR39) folded, lower case, separators dropped."""
    return text.translate(_folding().table)


def neutralise(text: str) -> str:
    """Replace every span that reads as a marker; leave all other text exactly as it is."""
    folding = _folding()
    if folding.openers.search(text) is None:  # fast path: nothing reads as "<", so no marker can
        return text
    if _MARKER_SKELETON.search(text.translate(folding.table)) is None:
        return text
    return _replace_markers(text, folding.table)


def _replace_markers(text: str, table: dict[int, str | None]) -> str:
    """One pass suffices: markers cannot overlap, and the replacement's brackets break any marker through it."""
    pieces = [table.get(ord(ch), ch) or "" for ch in text]
    origin = [index for index, piece in enumerate(pieces) for _ in piece]  # skeleton position → text index
    parts: list[str] = []
    done = 0
    for match in _MARKER_SKELETON.finditer("".join(pieces)):
        # A character may end one marker and start the next ("⪥" reads "><"): then text[done:begin] is empty.
        parts += [text[done : origin[match.start()]], _REPLACEMENT]
        done = origin[match.end() - 1] + 1
    parts.append(text[done:])
    return "".join(parts)


def _note(dropped: int) -> str:
    return f"\n…[truncated {dropped} characters]"


def cut(text: str, limit: int) -> str:
    """At most `limit` characters, saying how many were cut when the note fits in the bound."""
    if len(text) <= limit:
        return text
    keep = limit - len(_note(len(text) - limit))
    while keep >= 0 and keep + len(_note(len(text) - keep)) > limit:  # the count's digits lengthen the note
        keep -= 1
    if keep < 0:
        return text[: max(0, limit)]
    return text[:keep] + _note(len(text) - keep)


def prepare(raw: str, limit: int) -> str:
    """What is stored on the tool step and fed back to the model (before wrapping)."""
    return cut(neutralise(raw), limit)


def wrap(prepared: str) -> str:
    """Put prepared output between the markers; the output itself can no longer close them."""
    return f"{START}\n{prepared}\n{END}"


def unwrap(wrapped: str) -> str:
    """The text between the markers (for models that read observations back, like the demo)."""
    text = wrapped.strip()
    if text.startswith(START) and text.endswith(END):
        return text[len(START) : -len(END)].strip("\n")
    return text
