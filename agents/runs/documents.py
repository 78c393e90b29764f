"""Documents given to runs (docs/documents.md): stored once per owner and content, referenced by the runs that use
them, loaded just before a model call.

A run's input parts hold a document as a reference, `{"type": "file", "document": id, "media_type", "name",
"size"}` (`stored`, when the run is created), and a thread's later runs copy that reference into their history,
never the bytes. A base64 image of an earlier run becomes a reference the same way when a later run's history is
read (`images_referenced`). Right before a call the references are replaced by the bytes (`loaded`), read in one
query while the connection is still held: the call itself holds none (agents/runs/calls.py). An owner reads only
their own documents; a fork by someone else takes its own copies (`rehomed`).

Services layer: no transactions of its own but a savepoint around an insert that may race another.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from django.db import IntegrityError, transaction

from agents.engine import parts
from agents.models import Document

Parts = list[dict[str, Any]]
GONE = "(A document was here: {name}; it is no longer stored.)"


def reference(document: Document, name: str, kind: str = "file") -> dict[str, Any]:
    """The part that stands for a stored document (an image's has no name)."""
    ref: dict[str, Any] = {"type": kind, "document": str(document.pk), "media_type": document.media_type}
    if kind == "file":
        ref["name"] = name
    ref["size"] = document.size
    return ref


def stored(owner_id: Any, input_parts: Parts | None, redact: Callable[[str], str] | None = None) -> Parts | None:
    """The input with each document given as base64 `data` (checked by the API: agents/api/inputs.py) stored as a
    Document of the owner and replaced by its reference; every other part as it is. The same content is stored
    once. `redact`: a text document's text as the run's guardrails leave it (its personal data never stored)."""
    if not any("data" in p for p in parts.files(input_parts)):
        return input_parts
    assert input_parts is not None  # it has files
    out: Parts = []
    for part in input_parts:
        if part.get("type") == "file" and "data" in part:
            raw = base64.b64decode(part["data"])
            if redact is not None and part["media_type"] in parts.TEXT_MEDIA_TYPES:
                raw = redact(raw.decode("utf-8")).encode("utf-8")
            name = str(part.get("name") or "document")
            part = reference(store(owner_id, raw, part["media_type"], name), name)
        out.append(part)
    return out


def store(owner_id: Any, raw: bytes, media_type: str, name: str = "") -> Document:
    """The owner's Document of these bytes and media type: the one stored already, else a new one (a concurrent
    request storing the same content at once: the unique constraint keeps one, and both use it)."""
    digest = hashlib.sha256(raw).hexdigest()
    key = {"owner_id": owner_id, "sha256": digest, "media_type": media_type}
    found = Document.objects.filter(**key).only("id", "media_type", "size").first()
    if found is not None:
        return found
    try:
        with transaction.atomic():
            return Document.objects.create(**key, name=name[:200], size=len(raw), data=raw)
    except IntegrityError:
        return Document.objects.only("id", "media_type", "size").get(**key)


def images_referenced(owner_id: Any, turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A thread's history with each earlier run's base64 image stored as a Document of the owner and replaced by its
    reference: a later run's history holds no copy of an image's bytes. Turns without one are as they are."""
    out = []
    for turn in turns:
        shown = turn.get("input_parts")
        if shown and any("data" in p for p in parts.images(shown)):
            turn = {**turn, "input_parts": [_image_referenced(owner_id, p) for p in shown]}
        out.append(turn)
    return out


def _image_referenced(owner_id: Any, part: dict[str, Any]) -> dict[str, Any]:
    if part.get("type") != "image" or "data" not in part:
        return part
    raw = base64.b64decode(part["data"])
    return reference(store(owner_id, raw, part["media_type"]), "", kind="image")


def loaded(owner_id: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with every reference replaced by its bytes (base64 `data`, as a provider takes parts), read in
    one query of the owner's documents; one that is gone (or not the owner's) becomes a note. Messages without a
    reference are the same objects."""
    wanted = {ref["document"] for m in messages for ref in parts.references(m.get("content"))}
    if not wanted:
        return messages
    rows = Document.objects.filter(owner_id=owner_id, pk__in=_ids(wanted)).values_list("pk", "data")
    data = {str(pk): base64.b64encode(bytes(raw)).decode("ascii") for pk, raw in rows}
    out = []
    for message in messages:
        if parts.references(message.get("content")):
            message = {**message, "content": [_loaded(p, data) for p in message["content"]]}
        out.append(message)
    return out


def _loaded(part: dict[str, Any], data: dict[str, str]) -> dict[str, Any]:
    if not (isinstance(part, dict) and part.get("document") and part.get("type") in ("file", "image")):
        return part
    found = data.get(str(part["document"]))
    if found is None:
        return {"type": "text", "text": GONE.format(name=part.get("name") or "an image")}
    shown = {"type": part["type"], "data": found, "media_type": part.get("media_type")}
    if part["type"] == "file":
        shown["name"] = part.get("name") or "document"
    return shown


def _ids(values: Iterable[str]) -> list[uuid.UUID]:
    """The values that are document ids (a stored reference always is; anything else matches nothing)."""
    ids = []
    for value in values:
        try:
            ids.append(uuid.UUID(str(value)))
        except ValueError:
            continue
    return ids


def rehomed(owner_id: Any, content: Parts | None) -> Parts | None:
    """The parts with each reference to another owner's document replaced by one to the owner's own copy (a fork
    by a reviewer: an owner reads only their own documents). A reference to nothing left is kept as it is."""
    refs = parts.references(content)
    if not refs:
        return content
    assert content is not None  # it has references
    theirs = Document.objects.filter(pk__in=_ids(r["document"] for r in refs)).exclude(owner_id=owner_id)
    copies = {str(d.pk): store(owner_id, bytes(d.data), d.media_type, d.name) for d in theirs}
    if not copies:
        return content
    return [{**p, "document": str(copies[str(p["document"])].pk)} if _names(p, copies) else p for p in content]


def _names(part: Any, documents: dict[str, Document]) -> bool:
    return isinstance(part, dict) and part.get("type") in ("file", "image") and str(part.get("document")) in documents
