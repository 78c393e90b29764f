"""The checks an eval case (or an agent's online evaluator) grades a run with, in pure Python: no database.

A check is parsed once, when its cases file (or agent) is read: `parse_check` gives a `Check` or raises CaseError
naming the case, the check and the field. Grading it gives an `Outcome`: `passed`, a `score` from 0 to 1 and a
`reason` (empty when it passed). The run is seen through `Evidence`, what a stored run says about itself; the two
checks that need more than that call out through `Graders`: `similar` the embedding model, `judge` a judge model
(an ordinary run through the providers: agents/evals/judging.py). A case's checks combine in `grade`.

Check types (docs/evals.md#checks):
- on the final answer: `exact`, `contains`, `regex`, `numeric` (the first cases' four), `json`, `similar`, `judge`;
- on what the run did: `tools` (its calls), `cost`, `latency`, `turns`.
`NEEDS_EXPECTED` are those that compare against an expected answer: an online evaluator cannot use them.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Any

from agents.engine import react
from agents.engine.schemas import first_error
from agents.evals.check_specs import CHECK_TYPES, NEEDS_EXPECTED, ORDERS, CaseError, ToolUse, parse_spec

__all__ = [
    "CHECK_TYPES", "NEEDS_EXPECTED", "ORDERS", "CaseError", "Check", "Evidence", "Grade", "Graders", "Judge",
    "JudgeError", "Outcome", "ToolUse", "Verdict", "first_number", "grade", "parse_check",
]  # fmt: skip

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:[eE][+-]?\d+)?")


@dataclass(frozen=True)
class Evidence:
    """What a finished run says about itself, as the checks read it."""

    output: str | None  # the final answer, None without one
    input: str = ""
    output_json: Any = None  # the structured answer of a run with an output schema
    tool_calls: tuple[ToolUse, ...] = ()
    cost_nanos: int | None = None  # None: no price known for its model
    latency_ms: float = 0.0
    turns: int = 0


@dataclass(frozen=True)
class Verdict:
    """A judge's answer: a score (0-1), its reason, and what the judging cost."""

    score: float
    reason: str
    cost_nanos: int = 0


class JudgeError(Exception):
    """The judge gave no usable verdict (after its retry): the check counts as an error, never as a pass."""

    def __init__(self, message: str, cost_nanos: int = 0) -> None:
        super().__init__(message)
        self.cost_nanos = cost_nanos


# (rubric, input, answer, "provider/model" or None) -> Verdict; raises JudgeError.
Judge = Callable[[str, str, str, str | None], Verdict]


@dataclass(frozen=True)
class Graders:
    """What the checks call outside pure code: the judge, and the similarity of two texts (cosine, -1 to 1)."""

    judge: Judge | None = None
    similarity: Callable[[str, str], float] | None = None


@dataclass(frozen=True)
class Outcome:
    type: str
    passed: bool
    score: float
    reason: str = ""
    weight: float = 1.0
    error: bool = False  # the check could not be made (a judge without a verdict): never a pass
    cost_nanos: int = 0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["score"] = round(self.score, 4)
        if not self.error:
            data.pop("error")
        if not self.cost_nanos:
            data.pop("cost_nanos")
        return data


@dataclass(frozen=True)
class Check:
    """A parsed check: its type, weight and the fields of its type."""

    type: str
    weight: float = 1.0
    spec: Mapping[str, Any] = field(default_factory=dict)

    def grade(self, evidence: Evidence, graders: Graders) -> Outcome:
        score, reason, cost, error = _GRADERS[self.type](self.spec, evidence, graders)
        passed = not error and not reason
        return Outcome(self.type, passed, max(0.0, min(1.0, score)), reason, self.weight, error, cost)


@dataclass(frozen=True)
class Grade:
    """A case's checks taken together: passed, the weighted score and the first failing check's reason."""

    passed: bool
    score: float
    reason: str
    outcomes: tuple[Outcome, ...] = ()

    @property
    def cost_nanos(self) -> int:
        return sum(o.cost_nanos for o in self.outcomes)


def grade(checks: Sequence[Check], evidence: Evidence, graders: Graders, pass_score: float | None = None) -> Grade:
    """Every check graded; the case passes when each passes, or, with `pass_score`, when the weighted score reaches
    it and no check errored (an error is never a pass)."""
    outcomes = tuple(c.grade(evidence, graders) for c in checks)
    total = sum(o.weight for o in outcomes)
    score = sum(o.weight * o.score for o in outcomes) / total if total else 0.0
    failing = [o for o in outcomes if not o.passed]
    if pass_score is None:
        passed = not failing
    else:
        passed = score >= pass_score and not any(o.error for o in outcomes)
    reason = ""
    if not passed:
        reason = failing[0].reason if failing else f"score {score:.2f} below pass_score {pass_score:g}"
        if pass_score is not None and failing and not any(o.error for o in outcomes):
            reason = f"score {score:.2f} below pass_score {pass_score:g} ({reason})"
    return Grade(passed, score, reason, outcomes)


# --- parsing ---------------------------------------------------------------------------------------------------------


def parse_check(raw: Any, where: str, *, online: bool = False) -> Check:
    """A check from a cases file (or an evaluator: `online`, where checks needing an expected answer are refused);
    CaseError naming `where` and the field (agents/evals/check_specs.py)."""
    kind, weight, spec = parse_spec(raw, where, online=online)
    return Check(kind, weight, spec)


# --- grading ----------------------------------------------------------------------------------------------------------

# What a grader returns: (score, reason ("" when passed), what it cost, errored).
_Graded = tuple[float, str, int, bool]
NO_ANSWER = "no final answer"


def _pass_fail(reason: str) -> _Graded:
    return (0.0 if reason else 1.0), reason, 0, False


def _exact(spec: Mapping[str, Any], ev: Evidence, _: Graders) -> _Graded:
    if ev.output is None:
        return _pass_fail(NO_ANSWER)
    expected, got = str(spec["value"]).strip(), ev.output.strip()
    return _pass_fail("" if got == expected else f"expected exactly {_differing(expected, got)}")


def _contains(spec: Mapping[str, Any], ev: Evidence, _: Graders) -> _Graded:
    if ev.output is None:
        return _pass_fail(NO_ANSWER)
    values = spec["value"] if isinstance(spec["value"], list) else [spec["value"]]
    fold = str.lower if spec["ignore_case"] else str
    missing = [v for v in values if fold(str(v)) not in fold(ev.output)]
    score = 1 - len(missing) / len(values) if values else 1.0
    return score, (f"missing {missing[0]!r}" if missing else ""), 0, False


def _regex(spec: Mapping[str, Any], ev: Evidence, _: Graders) -> _Graded:
    if ev.output is None:
        return _pass_fail(NO_ANSWER)
    return _pass_fail("" if spec["pattern"].search(ev.output) else f"does not match /{spec['value']}/")


def _numeric(spec: Mapping[str, Any], ev: Evidence, _: Graders) -> _Graded:
    if ev.output is None:
        return _pass_fail(NO_ANSWER)
    number = first_number(ev.output)
    value, tolerance = spec["value"], spec["tolerance"]
    if number is None or not math.isclose(number, value, rel_tol=0, abs_tol=tolerance):
        return _pass_fail(f"expected a number within {tolerance:g} of {spec['shown']}, got {_short(ev.output)}")
    return _pass_fail("")


def _json(spec: Mapping[str, Any], ev: Evidence, _: Graders) -> _Graded:
    value = ev.output_json
    if value is None:
        if ev.output is None:
            return _pass_fail(NO_ANSWER)
        try:
            value = json.loads(react.unfence(ev.output))
        except json.JSONDecodeError as exc:
            return _pass_fail(f"the answer is not JSON ({exc.msg} at position {exc.pos})")
    parts, problems = 0, []
    if spec["schema"] is not None:
        parts += 1
        problem = first_error(spec["schema"], value)
        if problem:
            problems.append(f"schema: {problem}")
    for path, expected in spec["fields"].items():
        parts += 1
        found, got = _at(value, path)
        if not found:
            problems.append(f"no field {path!r}")
        elif got != expected:
            problems.append(f"{path} is {_short(json.dumps(got), 60)}, expected {_short(json.dumps(expected), 60)}")
    return 1 - len(problems) / parts, "; ".join(problems), 0, False


def _at(value: Any, path: str) -> tuple[bool, Any]:
    """The value at a dotted path ("a.b", "items.0.name"): (found, value)."""
    for key in path.split("."):
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.lstrip("-").isdigit() and -len(value) <= int(key) < len(value):
            value = value[int(key)]
        else:
            return False, None
    return True, value


def _similar(spec: Mapping[str, Any], ev: Evidence, graders: Graders) -> _Graded:
    if ev.output is None:
        return _pass_fail(NO_ANSWER)
    if graders.similarity is None:
        return 0.0, "no embedding model to compare with", 0, True
    cosine = graders.similarity(spec["value"], ev.output)
    if cosine >= spec["threshold"]:
        return cosine, "", 0, False
    return cosine, f"similarity {cosine:.2f} below {spec['threshold']:g}", 0, False


def _judge(spec: Mapping[str, Any], ev: Evidence, graders: Graders) -> _Graded:
    if ev.output is None:
        return _pass_fail(NO_ANSWER)
    if graders.judge is None:
        return 0.0, "no judge model", 0, True
    try:
        verdict = graders.judge(spec["rubric"], ev.input, ev.output, spec["model"])
    except JudgeError as exc:
        return 0.0, f"judge error: {exc}", exc.cost_nanos, True
    if verdict.score >= spec["threshold"]:
        return verdict.score, "", verdict.cost_nanos, False
    reason = f"judged {verdict.score:.2f} (below {spec['threshold']:g}): {verdict.reason}"
    return verdict.score, reason, verdict.cost_nanos, False


def _tools(spec: Mapping[str, Any], ev: Evidence, _: Graders) -> _Graded:
    expected: tuple[ToolUse, ...] = spec["calls"]
    made = ev.tool_calls
    matched, problem = _matched_calls(expected, made, spec["order"])
    problems = [problem] if problem else []
    forbidden = sorted({c.name for c in made} & set(spec["forbid"]))
    if forbidden:
        problems.append(f"called forbidden {', '.join(forbidden)}")
    if spec["max_calls"] is not None and len(made) > spec["max_calls"]:
        problems.append(f"{len(made)} calls (at most {spec['max_calls']})")
    out_of = max(len(expected), len(made)) if spec["order"] == "exact" else len(expected)  # exact: extra calls too
    score = matched / out_of if out_of else 1.0
    if forbidden or (spec["max_calls"] is not None and len(made) > spec["max_calls"]):
        score = 0.0
    return score, "; ".join(problems), 0, False


def _matched_calls(expected: Sequence[ToolUse], made: Sequence[ToolUse], order: str) -> tuple[int, str]:
    """How many expected calls the run's calls match, in `order`, and what is wrong ("" when all match)."""
    if order == "exact":
        matched = sum(1 for want, got in zip(expected, made, strict=False) if _matches(want, got))
        if matched == len(expected) == len(made):
            return matched, ""
        return matched, f"calls were {_names(made)}, expected exactly {_names(expected)}"
    if order == "any":
        left, missing = list(made), []
        for want in expected:
            hit = next((got for got in left if _matches(want, got)), None)
            if hit is None:
                missing.append(want)
            else:
                left.remove(hit)
        return len(expected) - len(missing), (f"no call {_names(missing)} among {_names(made)}" if missing else "")
    position, matched = 0, 0
    for want in expected:  # in_order: the expected calls as a subsequence of those made
        at = next((i for i in range(position, len(made)) if _matches(want, made[i])), None)
        if at is None:
            return matched, f"no call {_names([want])} in order after {_names(made[:position])} among {_names(made)}"
        position, matched = at + 1, matched + 1
    return matched, ""


def _matches(want: ToolUse, got: ToolUse) -> bool:
    """The call's name, and the expected arguments as a subset of the call's (nested mappings too)."""
    return want.name == got.name and _subset(want.arguments, got.arguments)


def _subset(want: Any, got: Any) -> bool:
    if isinstance(want, Mapping):
        return isinstance(got, Mapping) and all(k in got and _subset(v, got[k]) for k, v in want.items())
    return bool(want == got)


def _names(calls: Sequence[ToolUse]) -> str:
    return "[" + ", ".join(c.name for c in calls) + "]"


def _cost(spec: Mapping[str, Any], ev: Evidence, _: Graders) -> _Graded:
    if ev.cost_nanos is None:
        return _pass_fail("its cost is unknown (no price for its model: AGENT_PRICES)")
    if ev.cost_nanos > spec["max_nanos"]:
        return _pass_fail(f"cost {Decimal(ev.cost_nanos).scaleb(-9).normalize():f} above {spec['max']}")
    return _pass_fail("")


def _latency(spec: Mapping[str, Any], ev: Evidence, _: Graders) -> _Graded:
    over = ev.latency_ms > spec["max_ms"]
    return _pass_fail(f"took {ev.latency_ms:.0f} ms (at most {spec['max_ms']:g})" if over else "")


def _turns(spec: Mapping[str, Any], ev: Evidence, _: Graders) -> _Graded:
    over = ev.turns > spec["max"]
    return _pass_fail(f"{ev.turns} turns (at most {spec['max']})" if over else "")


_GRADERS: dict[str, Callable[[Mapping[str, Any], Evidence, Graders], _Graded]] = {
    "exact": _exact,
    "contains": _contains,
    "regex": _regex,
    "numeric": _numeric,
    "json": _json,
    "similar": _similar,
    "judge": _judge,
    "tools": _tools,
    "cost": _cost,
    "latency": _latency,
    "turns": _turns,
}


# --- text -------------------------------------------------------------------------------------------------------------


def first_number(text: str) -> float | None:
    match = _NUMBER.search(text.replace("\u2212", "-"))
    if match is None:
        return None
    try:
        return float(match.group(0).replace(",", ""))
    except ValueError:
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
