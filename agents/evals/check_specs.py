"""What a check of an eval case may say, and the reading of it (pure Python): `parse_spec` gives a check's type,
weight and fields or raises CaseError naming the case, the check and the field. agents/evals/checks.py grades them."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from agents.engine.schemas import schema_problem

CHECK_TYPES = ("exact", "contains", "regex", "numeric", "json", "similar", "judge", "tools", "cost", "latency", "turns")
NEEDS_EXPECTED = frozenset({"exact", "contains", "regex", "numeric", "similar"})
ORDERS = ("in_order", "exact", "any")
_COMMON = frozenset({"type", "weight"})


class CaseError(ValueError):
    """The cases file is missing or malformed; the message names the case and the problem."""


@dataclass(frozen=True)
class ToolUse:
    """One tool call the run made: its name and arguments."""

    name: str
    arguments: Mapping[str, Any]


def parse_spec(raw: Any, where: str, *, online: bool = False) -> tuple[str, float, dict[str, Any]]:
    """A check's type, weight and fields from a cases file (or an evaluator: `online`, where checks needing an
    expected answer are refused); CaseError naming `where` and the field."""
    if not isinstance(raw, dict):
        raise CaseError(f"{where}: a check must be a mapping with a type.")
    kind = raw.get("type")
    if kind not in CHECK_TYPES:
        raise CaseError(f"{where}: check type must be one of {', '.join(CHECK_TYPES)}, not {kind!r}.")
    where = f"{where} ({kind})"
    if online and kind in NEEDS_EXPECTED:
        raise CaseError(f"{where}: needs an expected answer, which a production run has not; use one of "
                        f"{', '.join(t for t in CHECK_TYPES if t not in NEEDS_EXPECTED)}.")  # fmt: skip
    parse, known = _PARSERS[kind]
    unknown = sorted(set(raw) - _COMMON - known)
    if unknown:
        raise CaseError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}.")
    weight = _number(raw.get("weight", 1), where, "weight", minimum=0)
    if weight <= 0:
        raise CaseError(f"{where}: 'weight' must be above 0.")
    return kind, weight, parse(raw, where)


def _number(value: Any, where: str, name: str, *, minimum: float | None = None, maximum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CaseError(f"{where}: '{name}' must be a number, not {value!r}.")
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        bounds = f"from {minimum:g}" + (f" to {maximum:g}" if maximum is not None else "")
        raise CaseError(f"{where}: '{name}' must be a number {bounds}, not {value!r}.")
    return float(value)


def _required(raw: Mapping[str, Any], where: str, name: str) -> Any:
    if raw.get(name) is None:
        raise CaseError(f"{where}: '{name}' is required.")
    return raw[name]


def _text(raw: Mapping[str, Any], where: str, name: str) -> str:
    value = _required(raw, where, name)
    if not isinstance(value, str) or not value.strip():
        raise CaseError(f"{where}: '{name}' must be a non-empty string.")
    return value


def _parse_value(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    spec = {"value": _required(raw, where, "value")}
    if raw["type"] == "contains":
        spec["ignore_case"] = bool(raw.get("ignore_case"))
    if raw["type"] == "regex":
        try:
            spec["pattern"] = re.compile(raw["value"])
        except (re.error, TypeError) as exc:  # TypeError: a YAML number, not a pattern
            raise CaseError(f"{where}: invalid regex: {exc}.") from None
    if raw["type"] == "numeric":
        try:
            spec["value"], spec["tolerance"] = float(raw["value"]), float(raw.get("tolerance", 1e-9))
            spec["shown"] = raw["value"]
        except (TypeError, ValueError):
            raise CaseError(f"{where}: 'value' and 'tolerance' must be numbers.") from None
    return spec


def _parse_json(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    schema, fields = raw.get("schema"), raw.get("fields")
    if schema is None and fields is None:
        raise CaseError(f"{where}: give a 'schema', 'fields' or both.")
    if schema is not None:
        problem = schema_problem(schema)
        if problem:
            raise CaseError(f"{where}: 'schema': {problem}")
    if fields is not None and (not isinstance(fields, dict) or not all(isinstance(k, str) and k for k in fields)):
        raise CaseError(f'{where}: \'fields\' must map dotted paths ("a.b", "items.0") to expected values.')
    return {"schema": schema, "fields": dict(fields or {})}


def _parse_similar(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    threshold = _number(raw.get("threshold", 0.8), where, "threshold", minimum=0, maximum=1)
    return {"value": _text(raw, where, "value"), "threshold": threshold}


def _parse_judge(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    model = raw.get("model")
    if model is not None and (not isinstance(model, str) or not re.fullmatch(r"[\w.-]+/\S+", model)):
        raise CaseError(f'{where}: \'model\' must be "provider/model" (e.g. "openai/gpt-4o-mini"), not {model!r}.')
    threshold = _number(raw.get("threshold", 0.5), where, "threshold", minimum=0, maximum=1)
    return {"rubric": _text(raw, where, "rubric"), "model": model, "threshold": threshold}


def _parse_tools(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    calls = raw.get("calls", [])
    if not isinstance(calls, list):
        raise CaseError(f"{where}: 'calls' must be a list of {{name, arguments?}}.")
    expected = []
    for n, call in enumerate(calls, 1):
        if not isinstance(call, dict) or not isinstance(call.get("name"), str) or not call["name"]:
            raise CaseError(f"{where}: calls[{n}] needs a 'name'.")
        if not isinstance(call.get("arguments", {}), dict) or set(call) - {"name", "arguments"}:
            raise CaseError(f"{where}: calls[{n}] takes a 'name' and an 'arguments' mapping, nothing else.")
        expected.append(ToolUse(call["name"], dict(call.get("arguments") or {})))
    order = raw.get("order", "in_order")
    if order not in ORDERS:
        raise CaseError(f"{where}: 'order' must be one of {', '.join(ORDERS)}, not {order!r}.")
    forbid = raw.get("forbid", [])
    if not isinstance(forbid, list) or not all(isinstance(f, str) for f in forbid):
        raise CaseError(f"{where}: 'forbid' must be a list of tool names.")
    max_calls = raw.get("max_calls")
    if max_calls is not None and (isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 0):
        raise CaseError(f"{where}: 'max_calls' must be a whole number from 0.")
    if not expected and not forbid and max_calls is None:
        raise CaseError(f"{where}: give 'calls', 'forbid' or 'max_calls'.")
    return {"calls": tuple(expected), "order": order, "forbid": tuple(forbid), "max_calls": max_calls}


def _parse_cost(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    value = _required(raw, where, "max")
    try:
        amount = Decimal(str(value))
    except InvalidOperation:
        amount = Decimal("NaN")
    if isinstance(value, bool) or not amount.is_finite() or amount < 0:
        raise CaseError(f"{where}: 'max' must be an amount from 0 (a decimal string, e.g. \"0.01\"), not {value!r}.")
    return {"max_nanos": int(amount.scaleb(9)), "max": str(value)}


def _parse_latency(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    return {"max_ms": _number(_required(raw, where, "max_ms"), where, "max_ms", minimum=0)}


def _parse_turns(raw: Mapping[str, Any], where: str) -> dict[str, Any]:
    value = _required(raw, where, "max")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CaseError(f"{where}: 'max' must be a whole number from 0, not {value!r}.")
    return {"max": value}


_Parser = Callable[[Mapping[str, Any], str], dict[str, Any]]
_PARSERS: dict[str, tuple[_Parser, frozenset[str]]] = {
    "exact": (_parse_value, frozenset({"value"})),
    "contains": (_parse_value, frozenset({"value", "ignore_case"})),
    "regex": (_parse_value, frozenset({"value"})),
    "numeric": (_parse_value, frozenset({"value", "tolerance"})),
    "json": (_parse_json, frozenset({"schema", "fields"})),
    "similar": (_parse_similar, frozenset({"value", "threshold"})),
    "judge": (_parse_judge, frozenset({"rubric", "model", "threshold"})),
    "tools": (_parse_tools, frozenset({"calls", "order", "forbid", "max_calls"})),
    "cost": (_parse_cost, frozenset({"max"})),
    "latency": (_parse_latency, frozenset({"max_ms"})),
    "turns": (_parse_turns, frozenset({"max"})),
}
