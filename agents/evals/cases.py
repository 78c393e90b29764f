"""Loading and checking eval cases (pure Python: no database)."""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agents.evals.fixtures import Fixture, parse_fixtures

DEFAULT_CASES = Path(__file__).with_name("cases.yaml")
CHECK_TYPES = ("exact", "contains", "regex", "numeric")
PROTOCOLS = ("tools", "react")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?")


class CaseError(ValueError):
    """The cases file is missing or malformed; the message names the case and the problem."""


@dataclass(frozen=True)
class Case:
    id: str
    input: str
    check: dict[str, Any]
    protocols: tuple[str, ...] = PROTOCOLS
    max_turns: int = 8
    timeout_s: float = 60.0
    tools: tuple[str, ...] | None = None
    setup: tuple[str, ...] = ()
    not_contains: tuple[str, ...] = ()
    max_errors: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    # Made from a stored run (export_cases): the tool calls `run_evals --replay` answers, and the run it came from.
    fixtures: tuple[Fixture, ...] | None = None
    source_run: str = ""


def load_cases(path: str | Path | None = None, only: str | None = None) -> list[Case]:
    """Read and validate a YAML/JSON list of cases; `only` is a glob (or a substring) on case ids."""
    source = Path(path) if path else DEFAULT_CASES
    try:
        raw = yaml.safe_load(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise CaseError(f"Cannot read cases file {source}: {exc.strerror}.") from None
    except yaml.YAMLError as exc:
        raise CaseError(f"Cases file {source} is not valid YAML/JSON: {exc}") from None
    if not isinstance(raw, list) or not raw:
        raise CaseError(f"Cases file {source} must hold a non-empty list of cases.")
    cases = [_case(item, i) for i, item in enumerate(raw)]
    ids = [c.id for c in cases]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise CaseError(f"Duplicate case ids: {', '.join(duplicates)}.")
    return [c for c in cases if _selected(c.id, only)]


def _selected(case_id: str, only: str | None) -> bool:
    if not only:
        return True
    if any(ch in only for ch in "*?["):
        return fnmatch.fnmatchcase(case_id, only)
    return only in case_id


def _case(item: Any, position: int) -> Case:
    where = f"case #{position + 1}"
    if not isinstance(item, dict):
        raise CaseError(f"{where} must be a mapping.")
    where = f"case '{item.get('id', position + 1)}'"
    for key in ("id", "input", "check"):
        if key not in item:
            raise CaseError(f"{where} has no '{key}'.")
    check = item["check"]
    if not isinstance(check, dict) or check.get("type") not in CHECK_TYPES or "value" not in check:
        raise CaseError(f"{where}: check needs a type ({', '.join(CHECK_TYPES)}) and a value.")
    protocols = tuple(item.get("protocols") or PROTOCOLS)
    if any(p not in PROTOCOLS for p in protocols):
        raise CaseError(f"{where}: protocols must be among {', '.join(PROTOCOLS)}.")
    if check["type"] == "regex":
        try:
            re.compile(check["value"])
        except (re.error, TypeError) as exc:  # TypeError: a YAML number, not a pattern
            raise CaseError(f"{where}: invalid regex: {exc}.") from None
    try:  # a wrong type here would otherwise surface as a traceback in the middle of an eval run
        max_turns, timeout_s = int(item.get("max_turns", 8)), float(item.get("timeout_s", 60.0))
        if check["type"] == "numeric":
            float(check["value"]), float(check.get("tolerance", 0))
    except (TypeError, ValueError):
        raise CaseError(f"{where}: max_turns, timeout_s and numeric check values must be numbers.") from None
    try:
        fixtures = parse_fixtures(item["fixtures"]) if item.get("fixtures") is not None else None
    except ValueError as exc:
        raise CaseError(f"{where}: {exc}.") from None
    return Case(
        id=str(item["id"]),
        input=str(item["input"]),
        check=check,
        protocols=protocols,
        max_turns=max_turns,
        timeout_s=timeout_s,
        tools=tuple(item["tools"]) if item.get("tools") is not None else None,
        setup=tuple(item.get("setup") or ()),
        not_contains=tuple(item.get("not_contains") or ()),
        max_errors=item.get("max_errors"),
        fixtures=fixtures,
        source_run=str(item.get("source_run") or ""),
    )


def first_number(text: str) -> float | None:
    match = _NUMBER.search(text.replace("\u2212", "-"))
    if match is None:
        return None
    try:
        return float(match.group(0).replace(",", ""))
    except ValueError:
        return None


def check_output(case: Case, output: str | None, error_steps: int = 0) -> str | None:
    """None when the output passes the case's check, else why not."""
    if output is None:
        return "no final answer"
    problem = _check(case.check, output)
    if problem:
        return problem
    for banned in case.not_contains:
        if banned.lower() in output.lower():
            return f"output contains {banned!r}"
    if case.max_errors is not None and error_steps > case.max_errors:
        return f"{error_steps} unusable replies (at most {case.max_errors} allowed)"
    return None


def _check(check: dict[str, Any], output: str) -> str | None:
    kind, value = check["type"], check["value"]
    if kind == "exact":
        expected, got = str(value).strip(), output.strip()
        return None if got == expected else f"expected exactly {_differing(expected, got)}"
    if kind == "contains":
        values = value if isinstance(value, list) else [value]
        folded = output.lower() if check.get("ignore_case") else output
        missing = [v for v in values if (str(v).lower() if check.get("ignore_case") else str(v)) not in folded]
        return f"missing {missing[0]!r}" if missing else None
    if kind == "regex":
        return None if re.search(value, output) else f"does not match /{value}/"
    number = first_number(output)
    tolerance = float(check.get("tolerance", 1e-9))
    if number is None or not math.isclose(number, float(value), rel_tol=0, abs_tol=tolerance):
        return f"expected a number within {tolerance:g} of {value}, got {_short(output)}"
    return None


def _short(text: str, limit: int = 120, start: int = 0) -> str:
    """Text for a one-line reason: quoted, from `start`, cut short."""
    text = ("…" + text[start:]) if start else text.strip()
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def _differing(expected: str, got: str) -> str:
    """Both texts for the reason; long ones are shown from a little before where they first differ."""
    at = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), min(len(expected), len(got)))
    start = at - 20 if at > 60 else 0
    return f"{_short(expected, start=start)}, got {_short(got, start=start)}"
