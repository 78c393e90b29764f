"""The step object in the served document: a union of one schema per kind, told apart by `kind` (a discriminator),
every field typed, as agents/runs/representation.py writes it (typed clients see typed steps)."""

from __future__ import annotations

import copy
from typing import Any

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.plumbing import ResolvedComponent

from agents.api.schema import FREE_FORM_OBJECT
from agents.engine.types import Finish
from agents.runs.representation import USAGE_KEYS

# The fields every step has, then each kind's.
STEP_COMMON = {
    "index": {"type": "integer", "minimum": 0, "description": "The step's place in the trace, from 0, no gaps."},
    "created_at": {"type": "string", "format": "date-time"},
    "latency_ms": {"type": "integer", "minimum": 0},
}
NULLABLE_STRING = {"type": "string", "nullable": True}
TOKEN_USAGE = {
    "type": "object",
    "properties": {
        key: {"type": "integer", "minimum": 0} for key in (*USAGE_KEYS, "cached_tokens", "cache_write_tokens")
    },
    "required": list(USAGE_KEYS),
}
COST = {
    "type": "string",
    "nullable": True,
    "pattern": r"^[0-9]+(\.[0-9]+)?$",
    "description": "What the call cost, a decimal string in the deployment's currency (AGENT_CURRENCY); null when no "
    "price is known for the model.",
}
LIMIT = {"type": "string", "description": 'Present when a per-run limit answered or stopped: "max_tool_calls", '
         '"max_total_tokens" or "tool_limits.<tool>".'}  # fmt: skip
GUARDRAIL = {"type": "string", "description": "Present when a guardrail answered or stopped: its name."}
TOOL_CALL = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "name": {"type": "string"},
        "arguments": {**FREE_FORM_OBJECT, "description": "The arguments the model gave: any JSON object."},
    },
    "required": ["id", "name", "arguments"],
}
# name: (kind, description, fields, optional fields)
STEP_SCHEMAS: dict[str, tuple[Any, ...]] = {
    "ModelStep": (
        "model",
        "A model call and its reply.",
        {
            "thought": {**NULLABLE_STRING, "description": "The reasoning the reply gave, or null."},
            "text": {"type": "string", "description": 'The raw reply ("" if none).'},
            "tool_calls": {"type": "array", "items": TOOL_CALL},
            "final_answer": {**NULLABLE_STRING, "description": "The answer, when the reply is final."},
            "usage": TOKEN_USAGE,
            "cost": COST,
            "model": {
                "type": "string",
                "description": 'Present when a fallback model answered: its "provider/model".',
            },
            "reflection": {"type": "boolean", "description": "Present (true) only on a critique between attempts."},
            "finish": {
                "type": "string",
                "enum": [finish.value for finish in Finish],
                "description": "Present only on a reply that did not end the ordinary way.",
            },
        },
        ("reflection", "finish", "model"),
    ),
    "ToolStep": (
        "tool",
        "A tool call and its result.",
        {
            "call_id": {"type": "string"},
            "name": {"type": "string"},
            "arguments": {**FREE_FORM_OBJECT, "description": "The arguments it ran with: any JSON object."},
            "output": {"type": "string", "description": "Exactly as fed back to the model, before wrapping."},
            "is_error": {"type": "boolean"},
            "limit": LIMIT,
            "guardrail": GUARDRAIL,
        },
        ("limit", "guardrail"),
    ),
    "ApprovalStep": (
        "approval",
        "A decision on a sensitive call.",
        {
            "call_id": {"type": "string"},
            "name": {"type": "string"},
            "original_arguments": {**FREE_FORM_OBJECT, "description": "As the model asked: any JSON object."},
            "arguments": {**FREE_FORM_OBJECT, "description": "As run (a reviewer may edit them): any JSON object."},
            "approved": {"type": "boolean"},
            "reviewer": {**NULLABLE_STRING, "description": "The reviewer's username; null for the system (expiry)."},
            "reason": NULLABLE_STRING,
        },
        (),
    ),
    "ErrorStep": (
        "error",
        "A reply that could not be used, a provider failure, a deadline hit, the quota crossed, a limit reached, a "
        "guardrail tripped.",
        {"message": {"type": "string"}, "limit": LIMIT, "guardrail": GUARDRAIL},
        ("limit", "guardrail"),
    ),
    "SummaryStep": (
        "summary",
        "The thread's earlier turns that the history budget leaves out, condensed by the run's model (history "
        '"summarize"): a call of the run, before its first turn.',
        {
            "summary": {
                **NULLABLE_STRING,
                "description": "What the model sees in place of those turns; null when the call failed.",
            },
            "runs": {
                "type": "integer",
                "minimum": 0,
                "description": "How many of the thread's runs, oldest first, the summary covers.",
            },
            "condensed": {"type": "integer", "minimum": 0, "description": "How many runs this call condensed."},
            "extended": {"type": "boolean", "description": "Whether it extends the thread's summary so far."},
            "usage": TOKEN_USAGE,
            "cost": COST,
            "model": {
                "type": "string",
                "description": 'Present when a fallback model answered: its "provider/model".',
            },
            "error": {
                "type": "string",
                "description": "Present when the call failed: the run went on with those turns left out.",
            },
        },
        ("model", "error"),
    ),
}


def step_schema(kind: str, description: str, fields: dict, optional: tuple[str, ...]) -> dict:
    """One kind of step: `kind` holds only that kind, and every field is typed."""
    index, *common = STEP_COMMON.items()
    properties = dict([index, ("kind", {"type": "string", "enum": [kind]}), *common]) | fields
    return {
        "type": "object",
        "description": description,
        "properties": properties,
        "required": [name for name in properties if name not in optional],
    }


class StepSerializerExtension(OpenApiSerializerExtension):
    """A step is one of five shapes, told apart by `kind` (a union with a discriminator)."""

    target_class = "agents.api.serializers.StepSerializer"

    def map_serializer(self, auto_schema, direction) -> dict:
        refs = {}
        for name, (kind, description, fields, optional) in STEP_SCHEMAS.items():
            # Made anew each time: the enum post-processing rewrites a component's enums in place (see parts_schema).
            schema = step_schema(kind, description, copy.deepcopy(fields), optional)
            auto_schema.registry.register_on_missing(
                ResolvedComponent(name, ResolvedComponent.SCHEMA, schema=schema, object=name)
            )
            refs[kind] = f"#/components/schemas/{name}"
        return {
            "oneOf": [{"$ref": ref} for ref in refs.values()],
            "discriminator": {"propertyName": "kind", "mapping": refs},
        }
