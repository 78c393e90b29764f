"""Loading eval cases (pure Python: no database). A case's checks are agents/evals/checks.py's."""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agents.evals.checks import (
    CHECK_TYPES,
    CaseError,
    Check,
    Evidence,
    Grade,
    Graders,
    first_number,
    grade,
    parse_check,
)
from agents.evals.fixtures import Fixture, parse_fixtures

DEFAULT_CASES = Path(__file__).with_name("cases.yaml")
PROTOCOLS = ("tools", "react")
__all__ = [
    "CHECK_TYPES",
    "DEFAULT_CASES",
    "PROTOCOLS",
    "Case",
    "CaseError",
    "check_output",
    "first_number",
    "load_cases",
]


@dataclass(frozen=True)
class Case:
    id: str
    input: str
    check: dict[str, Any] | None = None  # the single check of the first cases (`checks` holds it parsed)
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
    checks: tuple[Check, ...] = ()
    pass_score: float | None = None  # None: every check must pass

    def __post_init__(self) -> None:
        if not self.checks and self.check is not None:  # a Case made in code with its one check
            object.__setattr__(self, "checks", (parse_check(self.check, f"case '{self.id}': check"),))

    def grade(self, evidence: Evidence, graders: Graders, error_steps: int = 0) -> Grade:
        """The case's checks on a run that gave a final answer, then `not_contains` and `max_errors`."""
        result = grade(self.checks, evidence, graders, self.pass_score)
        problem = _extra_problem(self, evidence.output or "", error_steps)
        if result.passed and problem:
            return Grade(False, result.score, problem, result.outcomes)
        return result


def cases_sha256(path: str | Path | None = None) -> str:
    """The SHA-256 of a cases file's bytes (what an eval run stores of the cases it ran)."""
    return hashlib.sha256((Path(path) if path else DEFAULT_CASES).read_bytes()).hexdigest()


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
    for key in ("id", "input"):
        if key not in item:
            raise CaseError(f"{where} has no '{key}'.")
    checks = _checks(item, where)
    protocols = tuple(item.get("protocols") or PROTOCOLS)
    if any(p not in PROTOCOLS for p in protocols):
        raise CaseError(f"{where}: protocols must be among {', '.join(PROTOCOLS)}.")
    try:  # a wrong type here would otherwise surface as a traceback in the middle of an eval run
        max_turns, timeout_s = int(item.get("max_turns", 8)), float(item.get("timeout_s", 60.0))
    except (TypeError, ValueError):
        raise CaseError(f"{where}: max_turns and timeout_s must be numbers.") from None
    pass_score = item.get("pass_score")
    if pass_score is not None and (isinstance(pass_score, bool) or not isinstance(pass_score, int | float)
                                   or not 0 <= pass_score <= 1):  # fmt: skip
        raise CaseError(f"{where}: 'pass_score' must be a number from 0 to 1, not {pass_score!r}.")
    try:
        fixtures = parse_fixtures(item["fixtures"]) if item.get("fixtures") is not None else None
    except ValueError as exc:
        raise CaseError(f"{where}: {exc}.") from None
    return Case(
        id=str(item["id"]),
        input=str(item["input"]),
        check=item.get("check"),
        checks=checks,
        pass_score=float(pass_score) if pass_score is not None else None,
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


def _checks(item: dict[str, Any], where: str) -> tuple[Check, ...]:
    """`check` (one) and/or `checks` (a list), parsed; at least one."""
    raw = [item["check"]] if item.get("check") is not None else []
    if item.get("checks") is not None:
        if not isinstance(item["checks"], list):
            raise CaseError(f"{where}: 'checks' must be a list of checks.")
        raw += item["checks"]
    if not raw:
        raise CaseError(f"{where} has no 'check' (or 'checks'): one of {', '.join(CHECK_TYPES)}.")
    named = len(raw) > 1 or item.get("checks") is not None
    return tuple(parse_check(c, f"{where}: check #{n}" if named else f"{where}: check") for n, c in enumerate(raw, 1))


def _extra_problem(case: Case, output: str, error_steps: int) -> str:
    for banned in case.not_contains:
        if banned.lower() in output.lower():
            return f"output contains {banned!r}"
    if case.max_errors is not None and error_steps > case.max_errors:
        return f"{error_steps} unusable replies (at most {case.max_errors} allowed)"
    return ""


def check_output(case: Case, output: str | None, error_steps: int = 0) -> str | None:
    """None when a final answer passes the case's checks that need nothing but the answer, else why not."""
    if output is None:
        return "no final answer"
    result = case.grade(Evidence(output=output), Graders(), error_steps)
    return None if result.passed else result.reason
