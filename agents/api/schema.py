"""What drf-spectacular cannot see by itself: the limits our fields enforce, each tool's arguments, the event
stream's shape and the error statuses every route answers. The schema must tell the truth."""

from __future__ import annotations

import copy
import json
from typing import Any

from django.conf import settings
from drf_spectacular import openapi
from drf_spectacular.extensions import OpenApiSerializerExtension, OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import ResolvedComponent

from agents.api import inputs
from agents.api.bodies import KnownFieldsOnly
from agents.providers import ProviderConfigError, provider_class
from agents.runs import runtime

# Python's whitespace (what str.strip() removes: c.isspace()), spelled alike in ECMA and Python regex classes.
WHITESPACE = "\\u0009-\\u000d\\u001c-\\u0020\\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000"
NO_NUL = "^[^\\u0000]*$"
NO_NUL_NON_EMPTY = "^[^\\u0000]+$"
# Not blank (some character that is not whitespace) and no NUL anywhere: what StrictCharField accepts.
NON_BLANK = f"^[^\\u0000]*[^\\u0000{WHITESPACE}][^\\u0000]*$"
# Free-form JSON is said to be free-form, never spelled out as a recursive schema: client generators cannot follow one.
# What the server checks inside it (no NUL at any depth) is validation, said in words.
FREE_FORM_OBJECT = {"type": "object", "additionalProperties": {}}
NUL_FREE = "No NUL character in any key or string inside it, at any depth (else 400)."


class AutoSchema(openapi.AutoSchema):
    """drf-spectacular's, and a request body that refuses unknown fields says so (`additionalProperties: false`)."""

    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        if direction == "request" and _known_only(serializer):
            schema["additionalProperties"] = False
        return schema


def _known_only(serializer) -> bool:
    """Whether a serializer (a class or an instance: drf-spectacular is given both) refuses unknown fields."""
    return issubclass(serializer if isinstance(serializer, type) else type(serializer), KnownFieldsOnly)


class StrictCharFieldExtension(OpenApiSerializerFieldExtension):
    """A StrictCharField's pattern: no NUL (PostgreSQL refuses it), and not only whitespace unless blank is allowed."""

    target_class = "agents.api.fields.StrictCharField"
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction) -> dict:
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        if self.target.allow_blank:
            # Non-empty here: drf-spectacular adds "" as the other branch of a oneOf, which "" must match only once.
            return {**schema, "pattern": NO_NUL_NON_EMPTY}
        return {**schema, "minLength": 1, "pattern": NON_BLANK}  # min_length validators may raise it further


# A run's input as a list of parts (docs/api.md#images-on-a-run; agents/api/inputs.py). What JSON Schema cannot
# say is in words: at most AGENT_MAX_IMAGES images, AGENT_MAX_INPUT_CHARS characters of text in all, base64 bytes of
# the type media_type names, at most AGENT_MAX_IMAGE_BYTES each, and URLs whose host resolves to public addresses.
URL_PATTERN = f"^[Hh][Tt][Tt][Pp][Ss]://[^\\u0000{WHITESPACE}]*$"
DOCUMENT_URL_PATTERN = f"^[Hh][Tt][Tt][Pp][Ss]?://[^\\u0000{WHITESPACE}]*$"
BASE64_PATTERN = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
PART_SCHEMAS = {
    "InputTextPart": {
        "type": "object",
        "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string", "pattern": NON_BLANK}},
        "required": ["type", "text"],
        "additionalProperties": False,
    },
    "InputImageUrlPart": {
        "type": "object",
        "description": "An image at an https URL whose host resolves to public addresses only (else 400).",
        "properties": {
            "type": {"type": "string", "enum": ["image"]},
            "url": {"type": "string", "maxLength": inputs.MAX_URL_CHARS, "pattern": URL_PATTERN},
        },
        "required": ["type", "url"],
        "additionalProperties": False,
    },
    "InputImageDataPart": {
        "type": "object",
        "description": "An image as base64 (no data: prefix, no line breaks) whose bytes are of the type media_type "
        "names, at most AGENT_MAX_IMAGE_BYTES once decoded (else 400).",
        "properties": {
            "type": {"type": "string", "enum": ["image"]},
            "data": {"type": "string", "minLength": 4, "pattern": BASE64_PATTERN},
            "media_type": {"type": "string", "enum": list(inputs.MEDIA_TYPES)},
        },
        "required": ["type", "data", "media_type"],
        "additionalProperties": False,
    },
    "InputFileDataPart": {
        "type": "object",
        "description": "A document (docs/documents.md) as base64: a PDF, or UTF-8 text, at most "
        "AGENT_MAX_DOCUMENT_BYTES once decoded (else 400). Stored once; the run shows its reference.",
        "properties": {
            "type": {"type": "string", "enum": ["file"]},
            "data": {"type": "string", "minLength": 4, "pattern": BASE64_PATTERN},
            "media_type": {"type": "string", "enum": list(inputs.DOCUMENT_TYPES)},
            "name": {"type": "string", "minLength": 1, "maxLength": inputs.MAX_NAME_CHARS, "pattern": NON_BLANK},
        },
        "required": ["type", "data", "media_type"],
        "additionalProperties": False,
    },
    "InputFileUrlPart": {
        "type": "object",
        "description": "A document at an http(s) URL whose host resolves to public addresses only: this server fetches "
        "it (at most AGENT_MAX_DOCUMENT_BYTES, within AGENT_DOCUMENT_FETCH_TIMEOUT_S) and checks it as base64 data.",
        "properties": {
            "type": {"type": "string", "enum": ["file"]},
            "url": {"type": "string", "maxLength": inputs.MAX_URL_CHARS, "pattern": DOCUMENT_URL_PATTERN},
            "name": {"type": "string", "minLength": 1, "maxLength": inputs.MAX_NAME_CHARS, "pattern": NON_BLANK},
        },
        "required": ["type", "url"],
        "additionalProperties": False,
    },
}
# What a run shows of a document it was given: its reference, never its bytes.
REFERENCE_SCHEMAS = {
    "InputFileReference": {
        "type": "object",
        "description": "A document the run was given (docs/documents.md), stored once: its id, name, type and size.",
        "properties": {
            "type": {"type": "string", "enum": ["file"]},
            "document": {"type": "string", "format": "uuid"},
            "media_type": {"type": "string", "enum": list(inputs.DOCUMENT_TYPES)},
            "name": {"type": "string"},
            "size": {"type": "integer", "minimum": 1},
        },
        "required": ["type", "document", "media_type", "name", "size"],
        "additionalProperties": False,
    },
}


def parts_schema(auto_schema, given: bool = False) -> dict:
    """The list form of a run's input, its part shapes registered as components; `given`: as a run shows it (a
    document as its reference)."""
    shapes = PART_SCHEMAS
    if given:  # a document is shown as its reference, never as it was sent
        shapes = {k: v for k, v in PART_SCHEMAS.items() if not k.startswith("InputFile")} | REFERENCE_SCHEMAS
    for name, schema in shapes.items():
        # A copy: drf-spectacular's enum post-processing rewrites a component's enums in place into $refs, and the
        # next schema generated from these dicts would then point at enum components no one creates.
        component = ResolvedComponent(name, ResolvedComponent.SCHEMA, schema=copy.deepcopy(schema), object=name)
        auto_schema.registry.register_on_missing(component)
    return {
        "type": "array",
        "minItems": 1,
        "maxItems": inputs.MAX_PARTS,
        "items": {"oneOf": [{"$ref": f"#/components/schemas/{name}"} for name in shapes]},
        "description": f"Text, images and documents. At most {settings.AGENT_MAX_IMAGES} images, "
        f"{settings.AGENT_MAX_DOCUMENTS} documents and {settings.AGENT_MAX_INPUT_CHARS} characters of text in all "
        "(else 400).",
    }


class RunInputFieldExtension(OpenApiSerializerFieldExtension):
    """A run's input: a string, or (while AGENT_MAX_IMAGES or AGENT_MAX_DOCUMENTS > 0) a list of parts."""

    target_class = "agents.api.fields.RunInputField"
    priority = 1  # before StrictCharFieldExtension, which matches it too (a subclass)

    def map_serializer_field(self, auto_schema, direction) -> dict:
        text = StrictCharFieldExtension(self.target).map_serializer_field(auto_schema, direction)
        if not inputs.lists_taken():
            return text  # drf-spectacular adds the length bounds to a string schema
        text = {**text, "minLength": max(self.target.min_length or 1, 1), "maxLength": self.target.max_length}
        return {"oneOf": [text, parts_schema(auto_schema)], "description": "A string, or a list of parts."}


class NulFreeDictFieldExtension(OpenApiSerializerFieldExtension):
    """A free-form JSON object whose keys and strings hold no NUL at any depth (the field checks, the schema says)."""

    target_class = "agents.api.fields.NulFreeDictField"
    match_subclasses = True

    def map_serializer_field(self, auto_schema, direction) -> dict:
        return {**FREE_FORM_OBJECT, "description": f"Any JSON object. {NUL_FREE}"}


class RunSerializerExtension(OpenApiSerializerExtension):
    """The run object as docs/api.md#the-run-object fixes it: `max_reflections` only when > 0, tool lists of names."""

    target_class = "agents.api.serializers.RunSerializer"
    match_subclasses = True

    def map_serializer(self, auto_schema, direction) -> dict:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        schema["required"] = [name for name in schema["required"] if name != "max_reflections"]
        properties = schema["properties"]
        properties["max_reflections"] |= {"minimum": 1, "description": "Present only when the run uses reflection."}
        for name in ("tools", "sensitive_tools"):
            properties[name] = {"type": "array", "items": {"type": "string"}, "readOnly": True}
        properties["input"] = input_as_given(auto_schema)
        return schema


def input_as_given(auto_schema) -> dict:
    """A stored run's input as it was given: a string, or its list of parts."""
    return {"oneOf": [{"type": "string"}, parts_schema(auto_schema, given=True)], "readOnly": True}


class ThreadRunSerializerExtension(OpenApiSerializerExtension):
    """A thread's run shows its input as it was given, like the run object."""

    target_class = "agents.api.serializers.ThreadRunSerializer"

    def map_serializer(self, auto_schema, direction) -> dict:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        schema["properties"]["input"] = input_as_given(auto_schema)
        return schema


def usable_providers() -> list[str]:
    """Providers a run may name now: allowed here and configured (a missing key is a 400)."""
    usable = []
    for name in settings.AGENT_ALLOWED_PROVIDERS:
        try:
            provider_class(name).check_config()
        except ProviderConfigError:
            continue
        usable.append(name)
    return usable


def ecma_literal(text: str) -> str:
    """`text` as a regex matching itself, in a spelling ECMA 262 (with or without the u flag) and Python both read:
    only the syntax characters are escaped (Python's re.escape also escapes `-`, `/` and others, which the u flag
    refuses)."""
    return "".join("\\" + c if c in "\\^$.|?*+()[]{}" else c for c in text)


def fallback_model_pattern() -> str:
    """The "provider/model" a fallback may name now: a usable provider, then any model (a model may hold "/"
    itself), or exactly one of the models AGENT_MODELS_<NAME> allows for it."""
    branches = []
    for name in usable_providers():
        allowlist = settings.AGENT_MODELS.get(name) or []
        models = "|".join(ecma_literal(model) for model in allowlist) if allowlist else None
        branches.append(f"{ecma_literal(name)}/" + (f"(?:{models})" if models else "[^\\u0000]+"))
    return f"^(?:{'|'.join(branches)})$" if branches else "^(?!)$"  # no usable provider: nothing matches


class FallbackModelsFieldExtension(OpenApiSerializerFieldExtension):
    """Fallback models as this server is configured right now: each a usable "provider/model", none twice."""

    target_class = "agents.api.fields.FallbackModelsField"

    def map_serializer_field(self, auto_schema, direction) -> dict:
        schema = auto_schema._map_serializer_field(self.target, direction, bypass_extensions=True)
        schema["items"] = {**schema["items"], "pattern": fallback_model_pattern()}
        return {**schema, "uniqueItems": True}


TOOL_NAMES = "Tool names, as GET /api/v1/tools lists them (an MCP server's tools come and go); unknown: 400."


class RunCreateSerializerExtension(OpenApiSerializerExtension):
    """The providers a run body may name, as this server is configured right now; tool names are strings, not an enum
    frozen when the document was made (a client generated before an MCP server connected must still name its tools)."""

    target_class = "agents.api.serializers.RunCreateSerializer"

    def map_serializer(self, auto_schema, direction) -> dict:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        properties = schema["properties"]
        properties["provider"] = {"type": "string", "enum": usable_providers()}
        for name in ("tools", "sensitive_tools"):
            properties[name]["description"] = TOOL_NAMES
        return schema


class ForkSerializerExtension(OpenApiSerializerExtension):
    """A fork names its provider as a new run does: one this server can use right now."""

    target_class = "agents.api.serializers.ForkSerializer"

    def map_serializer(self, auto_schema, direction) -> dict:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        schema["properties"]["provider"] = {"type": "string", "enum": usable_providers()}
        return schema


class AdvanceSerializerExtension(OpenApiSerializerExtension):
    """An advance body is the one-call decision (`approval`, `arguments`, `reason`) or the batch (`decisions`), never
    both at once: a body naming `decisions` and any of the others is a 400. An empty batch is a 400 too (drf-spectacular
    leaves a list serializer's min_length out)."""

    target_class = "agents.api.serializers.AdvanceSerializer"

    def map_serializer(self, auto_schema, direction) -> dict:
        schema = auto_schema._map_serializer(self.target, direction, bypass_extensions=True)
        if direction == "request":
            schema["not"] = {"anyOf": [{"required": ["decisions", name]} for name in self.target.single_decision]}
            schema["properties"]["decisions"]["minItems"] = 1
        return schema


ERROR_SCHEMA = {
    "type": "object",
    "additionalProperties": {},
    "description": 'DRF\'s shapes: `{"detail": "…"}` or field errors `{"field": ["…"]}`.',
}
ERROR_TEXT = {
    400: "Bad input; the message names the problem.",
    401: "Missing or invalid credentials.",
    403: "Not allowed for this user.",
    404: "No such resource (or another user's).",
    409: "Conflicts with the resource's state (done, busy, or a request with this key still in progress).",
    413: "The request body is too large.",
    414: "The request line is longer than 4 KB (answered by gunicorn, in JSON).",
    415: "The body is not JSON.",
    422: "This Idempotency-Key was used with a different body.",
    429: "Over the rate limit or the daily token quota.",
    431: "The request's headers are over 8 KB or 100 fields (answered by gunicorn, in JSON).",
}
ERROR_HEADERS = {
    401: {"WWW-Authenticate": {"schema": {"type": "string"}, "required": True}},
    429: {"Retry-After": {"schema": {"type": "integer"}, "required": True, "description": "Seconds to wait."}},
}
# Statuses beyond those an operation's shape implies (see _implied_statuses).
EXTRA_STATUSES: dict[str, set[int]] = {
    "api_v1_runs_create": {409, 422, 429},
    "api_v1_runs_advance_create": {403, 409, 429},
    "api_v1_runs_cancel_create": {409},
    "api_v1_tools_invoke_create": {403, 429},
    "v1_agent_runs_create": {429},
    "api_v1_evals_runs_list": {403},
    "api_v1_evals_runs_retrieve": {403},
    "api_v1_evals_runs_create": {403, 429},
}
IDEMPOTENCY_KEY = {
    "in": "header",
    "name": "Idempotency-Key",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": NO_NUL},
    "description": "The same key and body within 24 hours answers the first response again; another body is 422. "
    "When the first request failed or was stopped after creating its run, a retry answers that run: as it is now "
    "(202, continuing in the background) or, once it is done, its final response. 409, with Retry-After, only "
    "while the first request is still at work on it (at most one lease, AGENT_LEASE_S, after it died).",
}
EVENT = {
    "type": "object",
    "description": "One server-sent event: `step` (data: a step), `run` (data: the run, on a status change), "
    "and a last `done` (data: the run).",
    "properties": {
        "event": {"type": "string", "enum": ["step", "run", "done"]},
        "id": {"type": "string", "pattern": "^[0-9]+$", "description": "The step's index (step events)."},
        "data": {"type": "string", "description": "JSON: the step or the run."},
    },
    "required": ["event", "data"],
}


def postprocess(result: dict, generator, request, public) -> dict:
    """SPECTACULAR_SETTINGS hook: the parts of the truth drf-spectacular cannot introspect."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    paths = result["paths"]
    for path, item in list(paths.items()):
        for operation in item.values():
            _describe_operation(paths, path, operation)
    for item in paths.values():
        for operation in item.values():
            _document_errors(operation, EXTRA_STATUSES.get(operation["operationId"], set()))
    _defaults_in_words(result)
    return result


def _defaults_in_words(result: dict) -> None:
    """A request body's defaults are said in its fields' descriptions, not as `default`: generators read `default` as
    "always present" (openapi-typescript makes such a field required), which holds for answers, not for requests."""
    schemas = result["components"]["schemas"]
    for item in result["paths"].values():
        for operation in item.values():
            for content in operation.get("requestBody", {}).get("content", {}).values():
                ref = content["schema"].get("$ref", "")
                for field in schemas.get(ref.rpartition("/")[2], {}).get("properties", {}).values():
                    if "default" in field:
                        default = json.dumps(field.pop("default"))
                        field["description"] = f"{field.get('description', '')} Default: {default}.".lstrip()


def _describe_operation(paths: dict, path: str, operation: dict) -> None:
    """Per-operation facts: the event stream's shape, the idempotency header, one path per tool."""
    name = operation["operationId"]
    if name == "api_v1_runs_events_retrieve":
        operation["parameters"] = [p for p in operation["parameters"] if p["name"] != "format"]
        operation["responses"]["200"] = {
            "description": "The run's steps (replayed, then live), status changes and a last `done` event.",
            "content": {"text/event-stream": {"schema": EVENT}},
        }
    elif name == "api_v1_runs_create":
        operation.setdefault("parameters", []).append(IDEMPOTENCY_KEY)
    elif name == "api_v1_runs_list":
        _document_filters(operation)
    elif name == "api_v1_tools_invoke_create":
        _document_tools(paths, path, operation)


def _document_filters(operation: dict) -> None:
    """`?status=` and `?stop_reason=` left empty filter nothing (django-filter): the enums hold only real values, and
    the empty value is OpenAPI's own `allowEmptyValue`; there is no `null` to send."""
    for parameter in operation["parameters"]:
        schema = parameter["schema"]
        if parameter["name"] in ("status", "stop_reason"):
            schema.pop("nullable", None)
            schema["enum"] = [value for value in schema["enum"] if value not in ("", None)]
            parameter["allowEmptyValue"] = True
            parameter["description"] += "\n* empty - any"


def _document_tools(paths: dict, template: str, operation: dict) -> None:
    """Each tool gets its own path with its own arguments schema; `{name}` stays any tool's name, a string (a tool
    that connects after a client was generated is invoked there)."""
    registry, floor = runtime.tool_registry(), set(runtime.sensitive_floor())
    names = registry.names()
    for parameter in operation["parameters"]:
        if parameter["name"] == "name":
            parameter["schema"] = {"type": "string"}
            parameter["description"] = (
                "A tool's name, as GET /api/v1/tools lists them (an MCP server's tools come and go); unknown: 404. "
                "Each tool known when this document was made also has its own path, with its arguments' schema."
            )
    for tool_name in names:
        tool = registry.get(tool_name)
        if tool is None:  # gone since the names were read
            continue
        sensitive = runtime.is_sensitive(tool, floor)
        paths[template.replace("{name}", tool_name)] = {"post": _tool_operation(operation, tool, sensitive)}


def _tool_operation(template: dict, tool, sensitive: bool) -> dict:
    """`POST /api/v1/tools/<tool>/invoke`: the body's `arguments` follow the tool's own JSON Schema."""
    parameters = inline_refs(dict(tool.parameters))
    body = {"type": "object", "properties": {"arguments": parameters}, "additionalProperties": False}
    if parameters.get("required"):
        body["required"] = ["arguments"]  # a missing `arguments` is `{}`, which lacks the required ones
    operation = copy.deepcopy(template)
    operation |= {
        "operationId": f"api_v1_tools_{tool.name}_invoke_create",
        "description": tool.description + (" Sensitive: needs the agents.review_run permission." if sensitive else ""),
        "parameters": [p for p in template["parameters"] if p["name"] != "name"],
        "requestBody": {"content": {"application/json": {"schema": body}}, "required": True},
    }
    _document_errors(operation, {403, 429} if sensitive else {429})
    return operation


MAX_REF_DEPTH = 8
MAX_REF_EXPANSIONS = 1000  # per tool: a server's schema cannot make the document explode
ROOT_ONLY = ("$defs", "definitions", "$schema", "$id")


def inline_refs(schema: dict) -> dict:
    """A tool's JSON Schema with its local references (`#/$defs/…`, as an MCP server's schemas have) replaced by
    what they point at: inside the OpenAPI document a `#/…` reference would point at the document itself. A
    reference deeper than MAX_REF_DEPTH (a recursive definition), or past MAX_REF_EXPANSIONS, becomes `{}`: any
    value."""
    inlined = _inline(schema, schema, 0, [MAX_REF_EXPANSIONS])
    return {k: v for k, v in inlined.items() if k not in ROOT_ONLY}


def _inline(node: Any, root: dict, depth: int, budget: list[int]) -> Any:
    if isinstance(node, list):
        return [_inline(item, root, depth, budget) for item in node]
    if not isinstance(node, dict):
        return copy.deepcopy(node)
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#"):
        budget[0] -= 1
        target = _pointer(root, ref) if depth < MAX_REF_DEPTH and budget[0] >= 0 else None
        rest = {k: v for k, v in node.items() if k != "$ref"}
        return _inline({**target, **rest}, root, depth + 1, budget) if isinstance(target, dict) else {}
    return {key: _inline(value, root, depth, budget) for key, value in node.items()}


def _pointer(root: dict, ref: str) -> Any:
    """The value a local JSON Pointer reference (`#`, `#/…`) names, or None (an anchor such as `#node` too)."""
    if ref != "#" and not ref.startswith("#/"):
        return None
    node: Any = root
    for part in ref[2:].split("/") if ref != "#" else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _implied_statuses(operation: dict) -> set[int]:
    """Errors an operation's shape implies: 401 and 403 when secured, 400/413/415 with a body, 404 with a path id."""
    statuses: set[int] = {414, 431}  # gunicorn's own, before any route: every operation can meet them
    if operation.get("security") != [{}]:
        statuses |= {401, 403}  # 403: an API key without the operation's scope (agents/api/permissions.py)
    if "requestBody" in operation:
        statuses |= {400, 413, 415}
    locations = {p["in"] for p in operation.get("parameters", [])}
    if "query" in locations:
        statuses.add(400)
    if "path" in locations:
        statuses.add(404)
    return statuses


def _document_errors(operation: dict, extra: set[int]) -> None:
    """Add each status the operation can answer, with DRF's error shape, unless it is documented already."""
    for status in sorted(_implied_statuses(operation) | extra):
        response: dict[str, Any] = {"description": ERROR_TEXT[status], "content": _error_content(operation, status)}
        if status in ERROR_HEADERS:
            response["headers"] = ERROR_HEADERS[status]
        operation["responses"].setdefault(str(status), response)


def _error_content(operation: dict, status: int) -> dict:
    """JSON, and where it also happens: the same JSON labelled as the stream, or Django's page for a bad path."""
    error = {"schema": {"$ref": "#/components/schemas/Error"}}
    content = {"application/json": error}
    if "text/event-stream" in operation["responses"].get("200", {}).get("content", {}):
        content["text/event-stream"] = error  # DRF labels an error with the media type the client accepted
    if status == 404:
        content["text/html"] = {"schema": {"type": "string", "description": "A path no route matches."}}
    return content
