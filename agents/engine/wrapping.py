"""Tool output hygiene: neutralise forged markers, cut to a bound, wrap between markers."""

from __future__ import annotations

import re
import unicodedata

START = "<<<TOOL_OUTPUT_START>>>"
END = "<<<TOOL_OUTPUT_END>>>"
_MARKER = re.compile(r"<<<\s*TOOL_OUTPUT_(START|END)\s*>>>", re.IGNORECASE)
_REPLACEMENT = "[tool output marker removed]"


# Invisible characters outside category Cf (Unicode's Default_Ignorable_Code_Point): a combining grapheme joiner
# or a variation selector hides inside a marker as well as a zero-width space does.
_IGNORABLE = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u3164\ufe00-\ufe0f\uffa0\U000e0000-\U000e0fff]")


def _strip_format_chars(text: str) -> str:
    """Drop invisible characters (zero-width spaces and joiners, BOM, bidi controls, variation selectors)."""
    return _IGNORABLE.sub("", "".join(ch for ch in text if unicodedata.category(ch) != "Cf"))


def neutralise(text: str) -> str:
    """NFKC-normalise, drop invisible characters, and defuse anything that reads as a marker."""
    clean = _strip_format_chars(unicodedata.normalize("NFKC", text))
    while _MARKER.search(clean):
        clean = _MARKER.sub(_REPLACEMENT, clean)
    return clean


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
