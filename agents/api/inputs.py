"""A run's `input` as a list of parts (docs/api.md#images-on-a-run): each part checked before anything is stored.

Parts: `{"type": "text", "text"}`, `{"type": "image", "url"}` (https, to a public address: the webhooks' SSRF guard)
and `{"type": "image", "data", "media_type"}` (base64 PNG, JPEG, GIF or WebP whose bytes are what `media_type` says).
Documents (docs/documents.md): `{"type": "file", "data", "media_type", "name"?}` (base64 PDF or UTF-8 text) and
`{"type": "file", "url", "name"?}`, fetched by this server through the same guard (`fetched`, once every part is
well formed), then checked as base64 data is.
Bounds: AGENT_MAX_IMAGES images, AGENT_MAX_IMAGE_BYTES each once decoded, AGENT_MAX_DOCUMENTS documents,
AGENT_MAX_DOCUMENT_BYTES each (both 0: no parts, `input` is a string only), MAX_PARTS parts, and
AGENT_MAX_INPUT_CHARS characters of text in all. A problem is named by its part, counted from 1 ("part 2: …"). A
string input never comes here.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any
from urllib.parse import unquote, urlsplit

from django.conf import settings

from agents.engine import parts
from agents.notifications import webhooks

MAX_PARTS = 64
MAX_URL_CHARS = 2048
# The media types an image may have, and how its first bytes start (WebP: "RIFF", 4 bytes of size, then "WEBP").
MEDIA_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
FIELDS = {
    "text": {"type", "text"},
    "url": {"type", "url"},
    "data": {"type", "data", "media_type"},
    "file-url": {"type", "url", "name"},
    "file-data": {"type", "data", "media_type", "name"},
}
# The media types a document may have: a PDF (its bytes start "%PDF-"), or UTF-8 text.
DOCUMENT_TYPES = ("application/pdf", *parts.TEXT_MEDIA_TYPES)
MAX_NAME_CHARS = 200
EXTENSIONS = {"application/pdf": ".pdf", "text/plain": ".txt", "text/markdown": ".md", "text/csv": ".csv"}


def lists_taken() -> bool:
    """Whether `input` may be a list of parts here: images or documents are allowed (else a string only)."""
    return settings.AGENT_MAX_IMAGES > 0 or settings.AGENT_MAX_DOCUMENTS > 0


def sniffed(data: bytes) -> str | None:
    """The media type an image's bytes have (by their magic numbers), or None when it is none of MEDIA_TYPES."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def problems(value: list) -> list[str]:
    """What is wrong with a list input: each bad part's first problem, then the bounds of the whole; [] when fine."""
    if not value:
        return ['Give at least one part: a string, or a list of parts such as {"type": "text", "text": "…"}.']
    if len(value) > MAX_PARTS:
        return [f"At most {MAX_PARTS} parts per input ({len(value)} given)."]
    found = [f"part {n}: {p}" for n, p in ((n, part_problem(part)) for n, part in enumerate(value, 1)) if p]
    if found:
        return found
    found += whole_problems(value)
    if found:
        return found
    return url_problems(value)  # last: only a well-formed input resolves its hosts


def whole_problems(value: list[dict[str, Any]]) -> list[str]:
    """The bounds of a well-formed list: images, documents, text and at least something to say."""
    images = sum(1 for p in value if p["type"] == "image")
    limit = settings.AGENT_MAX_IMAGES
    found = []
    if images > limit:
        found.append(f"At most {limit} images per input ({images} given).")
    files = sum(1 for p in value if p["type"] == "file")
    if files > settings.AGENT_MAX_DOCUMENTS:
        found.append(f"At most {settings.AGENT_MAX_DOCUMENTS} documents per input ({files} given).")
    chars = sum(len(p["text"]) for p in value if p["type"] == "text")
    if chars > settings.AGENT_MAX_INPUT_CHARS:
        found.append(f"The text parts have {chars} characters; at most {settings.AGENT_MAX_INPUT_CHARS} in all.")
    return found


def url_problems(value: list[dict[str, Any]]) -> list[str]:
    """Each image or document URL whose host does not resolve to public addresses only (the webhooks' guard), by
    part."""
    found = []
    for n, part in enumerate(value, 1):
        if part["type"] in ("image", "file") and "url" in part:
            what = "image URLs" if part["type"] == "image" else "document URLs"
            problem = webhooks.destination_problem(part["url"], what=what)
            if problem is not None:
                found.append(f"part {n}: {problem}")
    return found


def fetched(value: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    """A checked list as the services take it: each document URL's content fetched through the guard (at most
    AGENT_MAX_DOCUMENT_BYTES, within AGENT_DOCUMENT_FETCH_TIMEOUT_S) and checked as base64 data is, and each
    document named (its name, else its URL's last segment, else "document" and its type's extension). Returns
    (parts, problems by part); nothing is stored here."""
    out, found = [], []
    for n, part in enumerate(value, 1):
        if part["type"] != "file":
            out.append(part)
            continue
        if "url" in part:
            part, problem = _fetched(part)
            if problem is not None:
                found.append(f"part {n}: {problem}")
                continue
        out.append({**part, "name": part.get("name") or _default_name(part)})
    return out, found


def _fetched(part: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A document URL's part as a data part, or the problem with what it answered."""
    limit = settings.AGENT_MAX_DOCUMENT_BYTES
    try:
        raw, content_type = webhooks.fetch(
            part["url"], what="document URLs", max_bytes=limit, timeout_s=settings.AGENT_DOCUMENT_FETCH_TIMEOUT_S
        )
    except webhooks.FetchProblem as exc:
        return part, str(exc) + "."
    declared, _, params = content_type.partition(";")
    declared = declared.strip().lower()
    media_type = declared if declared in DOCUMENT_TYPES else "application/pdf" if raw.startswith(b"%PDF-") else None
    if media_type is None:
        shown = f"Content-Type {declared!r}" if declared else "no Content-Type"
        return part, f"the URL answered with {shown}: a document is one of {', '.join(DOCUMENT_TYPES)}."
    if media_type in parts.TEXT_MEDIA_TYPES:
        raw, problem = _as_utf8(raw, params)
        if problem is not None:
            return part, problem
    problem = _document_bytes_problem(raw, media_type)
    if problem is not None:
        return part, problem
    data = {"type": "file", "data": base64.b64encode(raw).decode("ascii"), "media_type": media_type}
    return {**data, "name": part.get("name") or _url_name(part["url"])}, None


def _as_utf8(raw: bytes, params: str) -> tuple[bytes, str | None]:
    """Fetched text in UTF-8: as it came, or decoded from the charset its Content-Type names."""
    charset = next((p.split("=", 1)[1].strip().strip('"') for p in params.split(";") if "charset=" in p.lower()), "")
    if not charset or charset.lower() in ("utf-8", "utf8", "us-ascii", "ascii"):
        return raw, None
    try:
        return raw.decode(charset).encode("utf-8"), None
    except (LookupError, UnicodeDecodeError):
        return raw, f"the URL's text is not valid {charset}."


def _url_name(url: str) -> str:
    """A fetched document's name when none is given: its URL path's last segment (decoded), or empty."""
    segment = unquote(urlsplit(url).path.rsplit("/", 1)[-1])
    return "" if _name_problem(segment) else segment


def _default_name(part: dict[str, Any]) -> str:
    return "document" + EXTENSIONS.get(part.get("media_type", ""), "")


def part_problem(part: Any) -> str | None:
    """What is wrong with one part on its own (its shape, its text, its image's bytes), or None."""
    if not isinstance(part, dict):
        return f'Expected an object such as {{"type": "text", "text": "…"}}, got {json_type(part)}.'
    kind = part.get("type")
    if kind not in ("text", "image", "file"):
        shown = f"'{kind}'" if isinstance(kind, str) else json_type(kind) if "type" in part else "none"
        return f'unknown type {shown}: a part is "text", "image" or "file".'
    if kind == "file":
        return _file_problem(part)
    shape = "text" if kind == "text" else "url" if "url" in part and "data" not in part else "data"
    if kind == "image" and "url" in part and "data" in part:
        return "an image has a url or data, not both."
    unknown = sorted(set(part) - FIELDS[shape])
    if unknown:
        has = "a text part has text" if kind == "text" else "an image part has url, or data and media_type"
        return f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: {has}."
    if shape == "text":
        return _text_problem(part)
    return _url_problem(part.get("url")) if shape == "url" else _data_problem(part)


def _file_problem(part: dict[str, Any]) -> str | None:
    """A document part on its own: its shape, its name, its URL's form or its data (as `_data_problem` does)."""
    if "url" in part and "data" in part:
        return "a document has a url or data, not both."
    shape = "file-url" if "url" in part else "file-data"
    unknown = sorted(set(part) - FIELDS[shape])
    if unknown:
        has = "a document part has url, or data and media_type; and a name if you like"
        return f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}: {has}."
    if "name" in part and (problem := _name_problem(part["name"])) is not None:
        return problem
    if shape == "file-url":
        return _file_url_problem(part["url"])
    return _file_data_problem(part)


def _name_problem(name: Any) -> str | None:
    if not isinstance(name, str):
        return f"name must be a string, got {json_type(name)}."
    if not name.strip() or len(name) > MAX_NAME_CHARS or any(not c.isprintable() for c in name):
        return f"name must be 1 to {MAX_NAME_CHARS} printable characters, not blank."
    return None


def _file_url_problem(url: Any) -> str | None:
    """A document URL's own form: http or https (this server fetches it, through the guard)."""
    if not isinstance(url, str):
        return f"url must be a string, got {json_type(url)}."
    if len(url) > MAX_URL_CHARS or "\x00" in url or any(c.isspace() for c in url):
        return f"url must be a URL of at most {MAX_URL_CHARS} characters, without spaces or NUL."
    if not url.lower().startswith(("https://", "http://")):
        return "a document url must be https:// or http:// (send other documents as base64 data with media_type)."
    return None


def _file_data_problem(part: dict[str, Any]) -> str | None:
    """A document's base64 data: present, of a media type taken, within the size bound, decodable, and the kind of
    bytes its media type says."""
    data, media_type = part.get("data"), part.get("media_type")
    if "data" not in part:
        return "a document needs a url, or data with media_type."
    if media_type not in DOCUMENT_TYPES:
        if media_type is None:
            return f"data needs a media_type: one of {', '.join(DOCUMENT_TYPES)}."
        shown = repr(media_type) if isinstance(media_type, str) else json_type(media_type)
        return f"media_type {shown} is not supported for a document: it must be one of {', '.join(DOCUMENT_TYPES)}."
    raw, problem = _decoded(data, settings.AGENT_MAX_DOCUMENT_BYTES, "document")
    return problem if raw is None else _document_bytes_problem(raw, media_type)


def _decoded(data: Any, limit: int, what: str) -> tuple[bytes, None] | tuple[None, str]:
    """A part's base64 `data` decoded, at most `limit` bytes (the `what` it holds: an image, a document), or why not."""
    if not isinstance(data, str) or not data:
        return None, f"data must be a base64 string, got {json_type(data) if data != '' else 'an empty string'}."
    if len(data) > -(-limit // 3) * 4:  # longer than `limit` bytes in base64: too large, before decoding it
        return None, f"the {what} is {_size(parts.decoded_size(data))} once decoded; at most {_size(limit)}."
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None, f"data is not valid base64{_base64_hint(data)}."
    if len(raw) > limit:
        return None, f"the {what} is {_size(len(raw))} once decoded; at most {_size(limit)}."
    return raw, None


def _document_bytes_problem(raw: bytes, media_type: str) -> str | None:
    """Whether a document's bytes are what its media type says: a PDF starts "%PDF-"; text is UTF-8, not blank,
    without NUL. (A fetched document's size was bounded as it was read.)"""
    if len(raw) > settings.AGENT_MAX_DOCUMENT_BYTES:
        return f"the document is {_size(len(raw))}; at most {_size(settings.AGENT_MAX_DOCUMENT_BYTES)}."
    if media_type == "application/pdf":
        return None if raw.startswith(b"%PDF-") else "media_type says application/pdf, but the bytes are not a PDF."
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return f"media_type says {media_type}, but the bytes are not UTF-8 text."
    if "\x00" in text:
        return "a text document may not hold a NUL character."
    return None if text.strip() else "the document's text is blank."


def _text_problem(part: dict[str, Any]) -> str | None:
    if "text" not in part:
        return "text is missing."
    text = part["text"]
    if not isinstance(text, str):
        return f"text must be a string, got {json_type(text)}."
    if not text.strip():
        return "text may not be blank."
    return "text may not hold a NUL character." if "\x00" in text else None


def _url_problem(url: Any) -> str | None:
    """The URL's own form (where it resolves to is checked last, for the whole input: url_problems)."""
    if not isinstance(url, str):
        return f"url must be a string, got {json_type(url)}."
    if len(url) > MAX_URL_CHARS or "\x00" in url or any(c.isspace() for c in url):
        return f"url must be a URL of at most {MAX_URL_CHARS} characters, without spaces or NUL."
    if not url.lower().startswith("https://"):
        return "an image url must be https:// (send other images as base64 data with media_type)."
    return None


def _data_problem(part: dict[str, Any]) -> str | None:
    """The base64 data: present, within the size bound, decodable, and of the media type it claims."""
    data, media_type = part.get("data"), part.get("media_type")
    if "data" not in part:
        return "an image needs a url, or data with media_type."
    if media_type not in MEDIA_TYPES:
        return _unsupported(media_type)
    raw, problem = _decoded(data, settings.AGENT_MAX_IMAGE_BYTES, "image")
    if raw is None:
        return problem
    actual = sniffed(raw)
    if actual != media_type:
        seen = f"they are {actual}" if actual else "they are not a PNG, JPEG, GIF or WebP image"
        return f"media_type says {media_type}, but the bytes do not match: {seen}."
    return None


def _unsupported(media_type: object) -> str:
    """Why a media_type that is not one of MEDIA_TYPES (or none at all) is refused."""
    if media_type is None:
        return f"data needs a media_type: one of {', '.join(MEDIA_TYPES)}."
    shown = repr(media_type) if isinstance(media_type, str) else json_type(media_type)
    return f"media_type {shown} is not supported: it must be one of {', '.join(MEDIA_TYPES)}."


def _base64_hint(data: str) -> str:
    """What most likely made `data` fail to decode, when it can be told."""
    if data.startswith("data:"):
        return " (send the base64 text alone, without a data: URL prefix)"
    if any(c.isspace() for c in data):
        return " (without spaces or line breaks)"
    return ""


def _size(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    return f"{n / 1024:.1f} KB" if n < 1024**2 else f"{n / 1024**2:.1f} MB"


_JSON_TYPES = ((bool, "a boolean"), (int | float, "a number"), (str, "a string"), (list, "a list"), (dict, "an object"))


def json_type(value: object) -> str:
    """How a parsed JSON value reads in an error message ("a number", "an object", ...)."""
    return next((name for cls, name in _JSON_TYPES if isinstance(value, cls)), "null")
