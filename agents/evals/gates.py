"""What an eval run's results add up to: each case's attempts (pass rate, all passed, score spread, flaky), and the
gates a release is held to (`--min-pass-rate`, `--baseline` with `--max-drop`). Pure Python over result rows."""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol


class ResultLike(Protocol):
    case_id: str
    protocol: str
    attempt: int
    passed: bool
    score: float


@dataclass(frozen=True)
class CaseSummary:
    """One case in one protocol over its attempts."""

    case_id: str
    protocol: str
    attempts: int
    passed: int
    mean_score: float
    min_score: float
    max_score: float

    @property
    def key(self) -> str:
        return f"{self.case_id} [{self.protocol}]"

    @property
    def pass_rate(self) -> float:
        return self.passed / self.attempts if self.attempts else 0.0

    @property
    def all_passed(self) -> bool:
        return self.attempts > 0 and self.passed == self.attempts

    @property
    def flaky(self) -> bool:
        """Passed some attempts and failed others."""
        return 0 < self.passed < self.attempts

    @property
    def spread(self) -> float:
        return self.max_score - self.min_score

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(pass_rate=self.pass_rate, all_passed=self.all_passed, flaky=self.flaky, spread=self.spread)
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in data.items()}


def summarise_cases(results: Iterable[ResultLike]) -> list[CaseSummary]:
    """Each case and protocol's attempts, in case order."""
    groups: dict[tuple[str, str], list[ResultLike]] = {}
    for r in results:
        groups.setdefault((r.case_id, r.protocol), []).append(r)
    out = []
    for (case_id, protocol), rows in sorted(groups.items()):
        scores = [r.score for r in rows]
        out.append(
            CaseSummary(
                case_id,
                protocol,
                len(rows),
                sum(r.passed for r in rows),
                statistics.fmean(scores),
                min(scores),
                max(scores),
            )  # fmt: skip
        )
    return out


@dataclass(frozen=True)
class Gate:
    """What the eval run must reach: a pass rate, and with a baseline no drop of more than `max_drop` below its."""

    min_pass_rate: float
    max_drop: float = 0.0
    baseline_id: int | None = None
    baseline_pass_rate: float | None = None


@dataclass
class Verdict:
    passed: bool
    pass_rate: float
    gate: Gate
    failures: list[str] = field(default_factory=list)  # why the gate failed, for people
    regressions: list[str] = field(default_factory=list)  # cases that passed in the baseline and fail now
    flaky: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "pass_rate": round(self.pass_rate, 4),
            "min_pass_rate": self.gate.min_pass_rate,
            "baseline": self.gate.baseline_id,
            "baseline_pass_rate": self.gate.baseline_pass_rate,
            "max_drop": self.gate.max_drop if self.gate.baseline_id is not None else None,
            "failures": self.failures,
            "regressions": self.regressions,
            "flaky": self.flaky,
        }


def hold(results: list[ResultLike], gate: Gate, baseline: list[ResultLike] | None = None) -> Verdict:
    """The verdict of the gate on `results` (every attempt of every case), against `baseline`'s results if any."""
    pass_rate = sum(r.passed for r in results) / len(results) if results else 0.0
    summaries = summarise_cases(results)
    verdict = Verdict(True, pass_rate, gate, flaky=[s.key for s in summaries if s.flaky])
    if pass_rate + 1e-9 < gate.min_pass_rate:
        verdict.failures.append(f"pass rate {pass_rate:.1%} is below the minimum {gate.min_pass_rate:.1%}")
    if baseline is not None and gate.baseline_pass_rate is not None:
        floor = gate.baseline_pass_rate - gate.max_drop
        if pass_rate + 1e-9 < floor:
            verdict.failures.append(
                f"pass rate {pass_rate:.1%} fell more than {gate.max_drop:.1%} below the baseline's "
                f"{gate.baseline_pass_rate:.1%} (eval run {gate.baseline_id})"
            )
        now = {s.key: s for s in summaries}
        verdict.regressions = [
            s.key for s in summarise_cases(baseline) if s.all_passed and s.key in now and not now[s.key].all_passed
        ]
    verdict.passed = not verdict.failures
    return verdict
