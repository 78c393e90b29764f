"""`_common.plain`: a tool schema (read-only mappings, tuples) as the plain JSON tree both SDK adapters send."""

from __future__ import annotations

import enum
import json
from types import MappingProxyType

from agents.providers._common import plain
from agents.tools.calculator import CALCULATOR_TOOL


class Level(enum.IntEnum):
    LOW = 1


def test_read_only_mappings_and_tuples_become_dicts_and_lists_and_scalars_stay():
    schema = MappingProxyType(
        {
            "type": "object",
            "properties": MappingProxyType({"n": {"type": "integer", "enum": (1, 2), "default": None}}),
            "required": ("n",),
            "additionalProperties": False,
            "x-weight": 1.5,
            "x-level": Level.LOW,
        }
    )
    result = plain(schema)
    assert result == {
        "type": "object",
        "properties": {"n": {"type": "integer", "enum": [1, 2], "default": None}},
        "required": ["n"],
        "additionalProperties": False,
        "x-weight": 1.5,
        "x-level": 1,
    }
    assert type(result) is dict and type(result["properties"]["n"]) is dict and type(result["required"]) is list
    assert result["additionalProperties"] is False and result["x-level"] is Level.LOW  # a subclass kept as it is


def test_a_copy_not_the_tool_s_own_schema():
    result = plain(CALCULATOR_TOOL.parameters)
    result["properties"]["expression"]["type"] = "number"
    assert CALCULATOR_TOOL.parameters["properties"]["expression"]["type"] == "string"
    assert json.loads(json.dumps(plain(CALCULATOR_TOOL.parameters)))["required"] == ["expression"]
