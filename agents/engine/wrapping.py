"""Tool output hygiene: neutralise forged markers, cut to a bound, wrap between markers."""

from __future__ import annotations

import re
import unicodedata

START = "<<<TOOL_OUTPUT_START>>>"
END = "<<<TOOL_OUTPUT_END>>>"
_MARKER = re.compile(r"<<<\s*TOOL_OUTPUT_(START|END)\s*>>>", re.IGNORECASE)
_REPLACEMENT = "[tool output marker removed]"


def _strip_format_chars(text: str) -> str:
    """Drop invisible format characters (zero-width spaces and joiners, BOM, bidi controls)."""
    return "".join(ch for ch in text if unicodedata.category(ch) != "Cf")


def neutralise(text: str) -> str:
    """NFKC-normalise, drop invisible characters, and defuse anything that reads as a marker."""
    clean = _strip_format_chars(unicodedata.normalize("NFKC", text))
    while _MARKER.search(clean):
        clean = _MARKER.sub(_REPLACEMENT, clean)
    return clean


def cut(text: str, limit: int) -> str:
    """At most `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    note = f"\n…[truncated {len(text) - limit} characters]"
    return text[: max(0, limit - len(note))] + note


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
