"""JSON Schemas that stay inside their own document: no reference is ever fetched from anywhere.

jsonschema on its own resolves a `$ref` to a URL by downloading it (its deprecated remote retrieval), so a schema a
user sends (`output_schema`) or a server describes (an MCP tool's parameters) could make this service fetch any
address and show what it got in a validation message. Every validator here resolves references through a registry
that retrieves nothing, and `schema_problem` refuses, when a schema is given, any reference that is not `#…` or that
does not resolve inside the schema.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry, Resource
from referencing.exceptions import NoSuchResource, Unresolvable
from referencing.jsonschema import DRAFT202012

REFERENCE_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
# Sample values a schema is tried on when given: a reference loop that never reaches the value fails on every one.
_SAMPLES: tuple[Any, ...] = (None, 0, "", [], {})


def _retrieve_nothing(uri: str) -> Resource[Any]:
    raise NoSuchResource(ref=uri)  # type: ignore[call-arg]  # an attrs class mypy reads without its __init__


LOCAL_ONLY: Registry[Any] = Registry(retrieve=_retrieve_nothing)  # type: ignore[call-arg]


class SchemaUnusable(Exception):
    """The schema cannot check a value: a reference that does not resolve inside it, or one that loops forever."""


_VALIDATORS: dict[int, tuple[Mapping[str, Any], Draft202012Validator]] = {}


def validator(schema: Mapping[str, Any]) -> Draft202012Validator:
    """A validator that resolves references only inside `schema`; one per schema object (they are costly to build).

    Raises SchemaError when `schema` is not a valid JSON Schema."""
    cached = _VALIDATORS.get(id(schema))
    if cached is None or cached[0] is not schema:
        Draft202012Validator.check_schema(dict(schema))
        cached = (schema, Draft202012Validator(dict(schema), registry=LOCAL_ONLY))
        _VALIDATORS[id(schema)] = cached
    return cached[1]


def first_error(schema: Mapping[str, Any], value: Any) -> str | None:
    """The first violation of `schema` by `value` as `path: message`, or None. SchemaError for an invalid schema,
    SchemaUnusable for one whose references cannot be followed."""
    try:
        error = next(iter(validator(schema).iter_errors(value)), None)
    except Unresolvable as exc:
        raise SchemaUnusable(f"a reference does not resolve inside the schema ({exc})") from None
    except RecursionError:
        raise SchemaUnusable("the schema refers to itself without end") from None
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{where + ': ' if where else ''}{error.message}"


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is not a usable JSON Schema (an object, valid, every reference inside it), or None."""
    if not isinstance(schema, dict):
        return "A JSON Schema is a JSON object."
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return f"Not a valid JSON Schema: {exc.message}"
    problem = _reference_problem(schema)
    if problem is not None:
        return problem
    for sample in _SAMPLES:
        try:
            first_error(schema, sample)
        except SchemaUnusable as exc:
            return f"Not a usable JSON Schema: {exc}."
    return None


def _reference_problem(schema: dict[str, Any]) -> str | None:
    """The first reference that points outside the schema or resolves to nothing in it, walking every subschema."""
    root = Resource.from_contents(schema, default_specification=DRAFT202012)
    stack = [(root, LOCAL_ONLY.resolver_with_root(root))]
    while stack:
        resource, resolver = stack.pop()
        contents = resource.contents
        if isinstance(contents, dict):
            for keyword in REFERENCE_KEYWORDS:
                if keyword not in contents:
                    continue
                ref = contents[keyword]
                if not isinstance(ref, str) or not ref.startswith("#"):
                    return (
                        f"{keyword} {ref!r} points outside the schema: only references inside it "
                        "(such as '#/$defs/name') are allowed, and nothing is ever fetched."
                    )
                try:
                    resolver.lookup(ref)
                except Unresolvable:
                    return f"{keyword} {ref!r} does not resolve inside the schema."
        for sub in resource.subresources():
            stack.append((sub, resolver.in_subresource(sub)))
    return None
