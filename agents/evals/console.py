"""What the operator console's eval pages show, in pure Python over result rows (no database, no HTML).

- `case_changes`: two eval runs case by case (each case and protocol's attempts summarised by
  `agents.evals.gates.summarise_cases`): pass or fail in each, the mean score a → b and its delta, fixed or regressed.
- `trajectory_diff`: the tool calls of two runs of one case side by side, aligned, each pair marked the same or not
  (calls are equal when their names are and their arguments are equal as JSON: the replay's matching rule).
- `trend_points`: an SVG polyline's points for a series of rates (the trend page's sparkline).
- `gate_summary`: a stored gate verdict (`Verdict.as_dict`) in words.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any, Protocol

from agents.evals.fixtures import canonical, label
from agents.evals.gates import CaseSummary, summarise_cases


class Result(Protocol):
    case_id: str
    protocol: str
    attempt: int
    passed: bool
    score: float
    reason: str
    run_id: Any


def outcome(summary: CaseSummary | None) -> str:
    """A case's attempts in a word: pass (every attempt), FAIL (none), "2/3" (some: flaky), "—" (not run)."""
    if summary is None:
        return "—"
    if summary.all_passed:
        return "pass"
    if summary.passed == 0:
        return "FAIL"
    return f"{summary.passed}/{summary.attempts}"


@dataclass
class CaseChange:
    """One case and protocol in eval runs a and b."""

    case_id: str
    protocol: str
    a: CaseSummary | None
    b: CaseSummary | None
    a_reason: str = ""  # the first failing attempt's reason
    b_reason: str = ""
    a_run: Any = None  # the first attempt's run id (its trajectory), None without one
    b_run: Any = None

    @property
    def changed(self) -> bool:
        """Passed every attempt in one and not in the other (a case in only one of them cannot change)."""
        return bool(self.a and self.b and self.a.all_passed != self.b.all_passed)

    @property
    def pass_change(self) -> str:
        if not self.changed:
            return ""
        return "fixed" if self.b and self.b.all_passed else "regressed"

    @property
    def delta(self) -> float | None:
        return self.b.mean_score - self.a.mean_score if self.a and self.b else None

    @property
    def a_outcome(self) -> str:
        return outcome(self.a)

    @property
    def b_outcome(self) -> str:
        return outcome(self.b)

    @property
    def scores(self) -> str:
        """The mean scores, "0.50 → 1.00" ("—" for a side without the case)."""
        return f"{_score(self.a)} → {_score(self.b)}"

    @property
    def delta_text(self) -> str:
        delta = self.delta
        if delta is None:
            return "—"
        return "±0.00" if abs(delta) < 0.005 else f"{delta:+.2f}"


def _score(summary: CaseSummary | None) -> str:
    return f"{summary.mean_score:.2f}" if summary else "—"


def case_changes(a: Iterable[Result], b: Iterable[Result]) -> list[CaseChange]:
    """Every case and protocol of a and b, in case order."""
    a_rows, b_rows = _grouped(a), _grouped(b)
    a_summaries = {(s.case_id, s.protocol): s for s in summarise_cases(r for rows in a_rows.values() for r in rows)}
    b_summaries = {(s.case_id, s.protocol): s for s in summarise_cases(r for rows in b_rows.values() for r in rows)}
    changes = []
    for key in sorted(set(a_rows) | set(b_rows)):
        change = CaseChange(key[0], key[1], a_summaries.get(key), b_summaries.get(key))
        change.a_reason, change.a_run = _first_reason(a_rows.get(key, [])), _first_run(a_rows.get(key, []))
        change.b_reason, change.b_run = _first_reason(b_rows.get(key, [])), _first_run(b_rows.get(key, []))
        changes.append(change)
    return changes


def _grouped(results: Iterable[Result]) -> dict[tuple[str, str], list[Result]]:
    groups: dict[tuple[str, str], list[Result]] = {}
    for r in results:
        groups.setdefault((r.case_id, r.protocol), []).append(r)
    for rows in groups.values():
        rows.sort(key=lambda r: r.attempt)
    return groups


def _first_reason(rows: Sequence[Result]) -> str:
    return next((r.reason for r in rows if not r.passed), "")


def _first_run(rows: Sequence[Result]) -> Any:
    return rows[0].run_id if rows else None


# --- trajectories -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One tool call of a run: its name and arguments."""

    name: str
    arguments: Any

    @property
    def key(self) -> str:
        return f"{self.name} {canonical(self.arguments)}"

    @property
    def text(self) -> str:
        """`calculator {"expression": "12*7"}`, cut short."""
        return label(self.name, self.arguments)


def calls_of(tool_steps: Iterable[Mapping[str, Any]]) -> list[Call]:
    """The calls of a run's tool steps' data (in step order)."""
    return [Call(str(data.get("name", "")), data.get("arguments")) for data in tool_steps]


@dataclass(frozen=True)
class DiffRow:
    a: Call | None
    b: Call | None

    @property
    def same(self) -> bool:
        return self.a is not None and self.b is not None and self.a.key == self.b.key

    @property
    def note(self) -> str:
        """How the pair differs, for people ("" when it does not)."""
        if self.same:
            return ""
        if self.a is None:
            return "only in B"
        if self.b is None:
            return "only in A"
        return "arguments differ" if self.a.name == self.b.name else "another tool"


@dataclass
class Trajectory:
    """Two runs' calls, aligned."""

    rows: list[DiffRow] = field(default_factory=list)

    @property
    def differs(self) -> bool:
        return any(not row.same for row in self.rows)

    @property
    def differing(self) -> int:
        return sum(not row.same for row in self.rows)


def trajectory_diff(a: Sequence[Call], b: Sequence[Call]) -> Trajectory:
    """The calls of a and b aligned on their longest common runs of equal calls; the rest paired in order, a call
    without a counterpart on its own."""
    matcher = difflib.SequenceMatcher(a=[c.key for c in a], b=[c.key for c in b], autojunk=False)
    rows: list[DiffRow] = []
    for _, a_start, a_end, b_start, b_end in matcher.get_opcodes():
        rows.extend(DiffRow(x, y) for x, y in zip_longest(a[a_start:a_end], b[b_start:b_end]))
    return Trajectory(rows)


# --- the trend and the gate -------------------------------------------------------------------------------------------


def trend_points(values: Sequence[float], width: int = 160, height: int = 32, pad: int = 2) -> str:
    """The points of an SVG polyline of `values` (rates from 0 to 1) over `width` × `height`: 1 at the top."""
    if not values:
        return ""
    step = (width - 2 * pad) / (len(values) - 1) if len(values) > 1 else 0.0
    span = height - 2 * pad
    points = []
    for n, value in enumerate(values):
        x = pad + n * step if len(values) > 1 else width / 2
        y = pad + (1 - max(0.0, min(1.0, value))) * span
        points.append(f"{x:.1f},{y:.1f}")
    return " ".join(points)


def cases_changed(before: str, now: str) -> bool:
    """Two eval runs' cases hashes differ (the rates compare different cases); an unknown hash (older eval runs
    stored none) is no change."""
    return bool(before and now and before != now)


@dataclass(frozen=True)
class GateSummary:
    passed: bool
    held_to: str  # what the gate asked, in words
    failures: tuple[str, ...] = ()
    regressions: tuple[str, ...] = ()
    flaky: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        return "passed" if self.passed else "FAILED"

    @property
    def css(self) -> str:
        return "gate-pass" if self.passed else "gate-fail"


def gate_summary(gate: Mapping[str, Any] | None) -> GateSummary | None:
    """A stored verdict (agents.evals.gates.Verdict.as_dict) for people; None when no gate was asked."""
    if not gate:
        return None
    held = [f"pass rate at least {_pct(gate.get('min_pass_rate'))}"]
    if gate.get("baseline") is not None:
        held.append(
            f"at most {_pct(gate.get('max_drop'))} below eval run {gate['baseline']}'s "
            f"{_pct(gate.get('baseline_pass_rate'))}"
        )
    return GateSummary(
        passed=bool(gate.get("passed")),
        held_to=f"{'; '.join(held)} (it had {_pct(gate.get('pass_rate'))})",
        failures=tuple(str(f) for f in gate.get("failures") or ()),
        regressions=tuple(str(r) for r in gate.get("regressions") or ()),
        flaky=tuple(str(f) for f in gate.get("flaky") or ()),
    )


def _pct(rate: Any) -> str:
    return f"{float(rate) * 100:.1f} %" if isinstance(rate, int | float) else "—"
