"""Request bodies name only the fields they know: DRF drops the others silently, so `"thread": "<id>"` (for
`thread_id`) made a run outside the thread and `{"bogus_field": 1}` was a 201. Every create and update body, and the
objects inside it, is a 400 naming each unknown field instead; the schema says so with `additionalProperties: false`
(agents/api/schema.py), so generated clients refuse such a body before they send it."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from rest_framework import serializers


def unknown_fields(data: Mapping, known: list[str]) -> dict[str, list[str]]:
    """An error per field of `data` not in `known`, with the nearest known name when one is close."""
    problems = {}
    for name in sorted(str(key) for key in data if key not in known):
        close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
        hint = f" Did you mean '{close[0]}'?" if close else f" Known: {', '.join(sorted(known))}."
        problems[name] = [f"Unknown field.{hint}"]
    return problems


class KnownFieldsOnly:
    """A serializer of a request body (or of an object in one) that refuses fields it does not declare."""

    fields: dict

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            known = [name for name, field in self.fields.items() if not field.read_only]
            problems = unknown_fields(data, known)
            if problems:
                raise serializers.ValidationError(problems, code="unknown")
        return super().to_internal_value(data)  # type: ignore[misc]


class BodySerializer(KnownFieldsOnly, serializers.Serializer):
    """The base of every request body."""
