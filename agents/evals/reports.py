"""An eval run written for machines: JUnit XML for CI (`run_evals --junit`) and a JSON report (`--report`)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from agents.evals.gates import Verdict, summarise_cases
from agents.models import EvalResult, EvalRun
from agents.usage.prices import cost_text


def junit(eval_run: EvalRun, results: list[EvalResult], verdict: Verdict) -> bytes:
    """One test case per case × protocol × attempt (its failure the reason), and one for the gate."""
    suite = ET.Element(
        "testsuite",
        name=f"evals {eval_run.provider}/{eval_run.model}",
        tests=str(len(results) + 1),
        failures=str(sum(not r.passed for r in results) + (not verdict.passed)),
        errors="0",
        time=f"{sum(r.latency_ms for r in results) / 1000:.3f}",
        timestamp=eval_run.created_at.isoformat(timespec="seconds"),
    )
    for r in results:
        name = f"{r.case_id} #{r.attempt}" if eval_run.repeat > 1 else r.case_id
        case = ET.SubElement(suite, "testcase", classname=f"evals.{r.protocol}", name=name,
                             time=f"{r.latency_ms / 1000:.3f}")  # fmt: skip
        ET.SubElement(case, "properties").extend(
            [ET.Element("property", name=k, value=str(v)) for k, v in _properties(r).items()]
        )
        if not r.passed:
            ET.SubElement(case, "failure", message=r.reason[:500] or "failed").text = _checks_text(r)
    gate = ET.SubElement(suite, "testcase", classname="evals.gate", name="gate", time="0")
    if not verdict.passed:
        text = "\n".join(verdict.failures + [f"regressed: {k}" for k in verdict.regressions])
        ET.SubElement(gate, "failure", message="; ".join(verdict.failures)).text = text
    root = ET.Element("testsuites", name=f"eval run {eval_run.pk}")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)


def _properties(r: EvalResult) -> dict[str, Any]:
    props: dict[str, Any] = {"score": round(r.score, 4), "turns": r.turns, "run": r.run_id or ""}
    if r.cost_nanos:
        props["cost"] = cost_text(r.cost_nanos)
    return props


def _checks_text(r: EvalResult) -> str:
    lines = [f"{c['type']}: {'pass' if c['passed'] else 'FAIL'} {c['score']:.2f} {c.get('reason', '')}".rstrip()
             for c in r.checks]  # fmt: skip
    return "\n".join(lines) or r.reason


def report(eval_run: EvalRun, results: list[EvalResult], verdict: Verdict) -> dict[str, Any]:
    """The eval run, its gate, each case's attempts summed up, and every result."""
    return {
        "id": eval_run.pk,
        "provider": eval_run.provider,
        "model": eval_run.model,
        "cases_sha256": eval_run.cases_sha256,
        "repeat": eval_run.repeat,
        "baseline": eval_run.baseline_id,
        "total": eval_run.total,
        "passed": eval_run.passed,
        "pass_rate": round(eval_run.pass_rate, 4),
        "score": round(eval_run.score, 4),
        "cost": cost_text(eval_run.cost_nanos),
        "gate": verdict.as_dict(),
        "cases": [s.as_dict() for s in summarise_cases(results)],
        "results": [
            {
                "case_id": r.case_id,
                "protocol": r.protocol,
                "attempt": r.attempt,
                "passed": r.passed,
                "score": round(r.score, 4),
                "reason": r.reason,
                "checks": r.checks,
                "run": str(r.run_id or "") or None,
                "turns": r.turns,
                "latency_ms": round(r.latency_ms, 1),
                "tokens": r.tokens,
                "cost": cost_text(r.cost_nanos),
            }  # fmt: skip
            for r in results
        ],
    }


def write(path: str, content: bytes | str) -> None:
    """Write a report file whole or not at all (a temporary file beside it, renamed); OSError as it comes."""
    target = Path(path)
    data = content.encode("utf-8") if isinstance(content, str) else content
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def json_text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, default=str) + "\n"
