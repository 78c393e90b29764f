"""A message's content as the engine passes it on: a string, or a list of neutral parts (a run's input with images).

Parts are the API's own (docs/api.md#images-on-a-run): `{"type": "text", "text"}`, `{"type": "image", "url"}`
and `{"type": "image", "data", "media_type"}` (base64). They are checked before a run is stored; each provider
converts them to its own format. Most content is a string, and these helpers leave a string as it is.

A document (docs/documents.md) is stored once and referenced: a run's parts hold `{"type": "file", "document": id,
"media_type", "name", "size"}`, and a thread's history holds an earlier image as `{"type": "image", "document": id,
"media_type", "size"}`. The host loads the bytes just before a model call (agents/runs/calls.py), so a provider
sees `{"type": "file", "data", "media_type", "name"}` and images with their data, as given.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

Content = str | list[dict[str, Any]]
JOIN = "\n\n"  # between text parts, in the text of a list (a run's `input` column, what a text-only reader sees)


def text_of(content: Any) -> str:
    """The text of a content: the string itself, or a list's text parts joined (images leave no text)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return JOIN.join(str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content or "")


def of_type(content: Any, kind: str) -> list[dict[str, Any]]:
    """The parts of a content whose type is `kind`, in order (none for a string)."""
    if not isinstance(content, list):
        return []
    return [p for p in content if isinstance(p, dict) and p.get("type") == kind]


def images(content: Any) -> list[dict[str, Any]]:
    """The image parts of a content, in order (none for a string)."""
    return of_type(content, "image")


def files(content: Any) -> list[dict[str, Any]]:
    """The document parts of a content, in order (none for a string)."""
    return of_type(content, "file")


def references(content: Any) -> list[dict[str, Any]]:
    """The parts of a content that name a stored document (`document`) instead of holding its bytes."""
    if not isinstance(content, list):
        return []
    return [p for p in content if isinstance(p, dict) and p.get("document") and p.get("type") in ("file", "image")]


TEXT_MEDIA_TYPES = ("text/plain", "text/markdown", "text/csv")  # documents a model is given as text


def document_text(part: dict[str, Any]) -> str | None:
    """A loaded text document's text (its base64 `data` as UTF-8), or None for a PDF or a part without data."""
    if part.get("media_type") not in TEXT_MEDIA_TYPES or not isinstance(part.get("data"), str):
        return None
    try:
        return base64.b64decode(part["data"]).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        return None


def as_content(given: list[dict[str, Any]] | None, text: str) -> Content:
    """What a model is sent for an input: its parts when they hold an image or a document, else text (parts
    without either joined: every API takes a string, not every one a list of text parts)."""
    if given is None:
        return text
    return given if images(given) or files(given) else text_of(given)


def appended(content: Content, text: str) -> Content:
    """The content with `text` added at its end: to a string as it is, to a list as a last text part."""
    if not text:
        return content
    if isinstance(content, str):
        return content + text
    return [*content, {"type": "text", "text": text.lstrip("\n")}]


def decoded_size(data: str) -> int:
    """Bytes a (valid, unpadded or padded) base64 string decodes to, without decoding it."""
    return len(data) * 3 // 4 - (len(data) - len(data.rstrip("=")))
