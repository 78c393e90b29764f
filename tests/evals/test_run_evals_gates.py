"""`manage.py run_evals`'s repeats, gates and reports on the offline demo model: --repeat, --baseline with --max-drop,
--min-pass-rate, --junit, --report, --concurrency's default, the progress line, and what an eval run stores
(cases_sha256, each result's attempt, score, checks and cost). The gates themselves (agents.evals.gates) on rows
made with the ORM: the demo model is deterministic, so a flaky case is made, not found."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.utils import timezone

from agents.evals import gates, runner
from agents.evals.cases import DEFAULT_CASES
from agents.evals.gates import Gate, summarise_cases
from agents.management.commands import run_evals as run_evals_command
from agents.models import EvalResult, EvalRun, Run
from agents.usage.prices import cost_text, money_text
from tests.evals.conftest import command


# Cases the demo model answers the same way every time: the first three pass, PARIS fails ("missing 'Paris'").
# One protocol each keeps the runs few.
def case(case_id: str, question: str, check: dict, **fields) -> dict:
    return {"id": case_id, "input": question, "check": check, "protocols": ["tools"], **fields}


PLUS = case("plus", "What is 12*7, plus 1?", {"type": "numeric", "value": 85})
TIMES = case("times", "What is 17*23, then times 2?", {"type": "numeric", "value": 782})
COLOUR = case("colour", "what do you remember about my favourite colour?", {"type": "contains", "value": "teal"},
              setup=["remember that my favourite colour is teal"])  # fmt: skip
PARIS = case("paris", "What is the capital of France?", {"type": "contains", "value": "Paris"})


def write_cases(tmp_path: Path, *cases: dict, name: str = "cases.yaml") -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(list(cases)), encoding="utf-8")
    return str(path)


def run(*args: str) -> tuple[int, str]:
    """run_evals in-process: its exit status (0 when it returns) and its stdout."""
    out = io.StringIO()
    try:
        call_command("run_evals", *args, stdout=out, stderr=io.StringIO())
    except SystemExit as exc:
        return exc.code, out.getvalue()
    return 0, out.getvalue()


def bad(*args: str) -> str:
    """run_evals refusing its arguments: exit 2 (a CommandError in-process); its message."""
    with pytest.raises(CommandError) as exc:
        command("run_evals", *args)
    assert exc.value.returncode == 2
    return str(exc.value)


def sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def stored(eval_run: EvalRun) -> list[tuple[str, str, int, bool]]:
    return list(eval_run.results.order_by("case_id", "protocol", "attempt").values_list(
        "case_id", "protocol", "attempt", "passed"))  # fmt: skip


def nothing_stored() -> bool:
    return not (EvalRun.objects.exists() or EvalResult.objects.exists() or Run.objects.exists())


def eval_run_of(rows: list[tuple[str, str, int, bool, float]], **fields) -> EvalRun:
    """A finished eval run with a result per (case, protocol, attempt, passed, score), made with the ORM."""
    passed = sum(row[3] for row in rows)
    eval_run = EvalRun.objects.create(
        provider="demo",
        model="demo-1",
        protocol="per case",
        cases_file="agents/evals/cases.yaml",
        repeat=max((row[2] for row in rows), default=1),
        total=len(rows),
        passed=passed,
        pass_rate=passed / len(rows) if rows else 0.0,
        finished_at=timezone.now(),
        **fields,
    )
    for case_id, protocol, attempt, ok, score in rows:
        EvalResult.objects.create(eval_run=eval_run, case_id=case_id, protocol=protocol, attempt=attempt, passed=ok,
                                  score=score, reason="" if ok else "missing 'x'")  # fmt: skip
    return eval_run


def attempts(case_id: str, outcomes: str, protocol: str = "tools") -> list[tuple[str, str, int, bool, float]]:
    """Rows of one case's attempts: "pfp" is passed, failed, passed (a pass scores 1, a failure 0.25)."""
    return [(case_id, protocol, n, o == "p", 1.0 if o == "p" else 0.25) for n, o in enumerate(outcomes, 1)]


# --- the gates and the summaries, on stored rows ----------------------------------------------------------------------


@pytest.mark.django_db
def test_summarise_cases_sums_each_case_and_protocol_over_its_attempts():
    eval_run = eval_run_of(attempts("b-flaky", "pfp") + attempts("a-solid", "ppp") + attempts("c-broken", "fff")
                           + attempts("a-solid", "ppf", protocol="react"))  # fmt: skip

    summaries = summarise_cases(eval_run.results.all())

    assert [(s.case_id, s.protocol) for s in summaries] == [
        ("a-solid", "react"),
        ("a-solid", "tools"),
        ("b-flaky", "tools"),
        ("c-broken", "tools"),
    ]
    react, solid, flaky, broken = summaries
    assert (solid.attempts, solid.passed, solid.pass_rate, solid.all_passed, solid.flaky) == (3, 3, 1.0, True, False)
    assert (solid.mean_score, solid.spread) == (1.0, 0.0)
    assert (flaky.passed, flaky.all_passed, flaky.flaky, flaky.key) == (2, False, True, "b-flaky [tools]")
    assert flaky.pass_rate == pytest.approx(2 / 3)
    assert (flaky.mean_score, flaky.min_score, flaky.max_score, flaky.spread) == (0.75, 0.25, 1.0, 0.75)
    assert (broken.passed, broken.pass_rate, broken.all_passed, broken.flaky) == (0, 0.0, False, False)
    assert react.flaky and react.key == "a-solid [react]"
    assert flaky.as_dict() == {
        "case_id": "b-flaky",
        "protocol": "tools",
        "attempts": 3,
        "passed": 2,
        "mean_score": 0.75,
        "min_score": 0.25,
        "max_score": 1.0,
        "pass_rate": 0.6667,
        "all_passed": False,
        "flaky": True,
        "spread": 0.75,
    }


def test_summarise_cases_of_nothing_is_nothing():
    assert summarise_cases([]) == []


@pytest.mark.django_db
def test_hold_without_a_baseline_is_the_pass_rate_against_the_minimum():
    results = list(eval_run_of(attempts("a", "ppp") + attempts("b", "pfp")).results.all())  # 5 of 6 passed

    strict = gates.hold(results, Gate(min_pass_rate=1.0))
    assert not strict.passed and strict.pass_rate == pytest.approx(5 / 6)
    assert strict.failures == ["pass rate 83.3% is below the minimum 100.0%"]
    assert strict.flaky == ["b [tools]"] and strict.regressions == []
    assert strict.as_dict() == {
        "passed": False,
        "pass_rate": 0.8333,
        "min_pass_rate": 1.0,
        "baseline": None,
        "baseline_pass_rate": None,
        "max_drop": None,  # only with a baseline
        "failures": ["pass rate 83.3% is below the minimum 100.0%"],
        "regressions": [],
        "flaky": ["b [tools]"],
    }

    lenient = gates.hold(results, Gate(min_pass_rate=0.8))
    assert lenient.passed and lenient.failures == [] and lenient.flaky == ["b [tools]"]  # flaky is said, not failed
    assert gates.hold(results, Gate(min_pass_rate=5 / 6)).passed  # reaching the minimum exactly passes

    empty = gates.hold([], Gate(min_pass_rate=0.5))
    assert not empty.passed and empty.pass_rate == 0.0


@pytest.mark.django_db
def test_hold_against_a_baseline_names_the_regressions():
    baseline = eval_run_of(attempts("steady", "pp") + attempts("broke", "pp") + attempts("was-flaky", "pf")
                           + attempts("gone", "pp"))  # fmt: skip
    now = eval_run_of(attempts("steady", "pp") + attempts("broke", "pf") + attempts("was-flaky", "ff")
                      + attempts("new", "ff"))  # fmt: skip
    gate = Gate(min_pass_rate=0.0, max_drop=0.0, baseline_id=baseline.pk, baseline_pass_rate=baseline.pass_rate)

    verdict = gates.hold(list(now.results.all()), gate, list(baseline.results.all()))

    # only a case that passed every attempt in the baseline, and is there and not all passing now
    assert verdict.regressions == ["broke [tools]"]
    assert verdict.flaky == ["broke [tools]"]
    assert not verdict.passed and verdict.pass_rate == 3 / 8
    assert verdict.failures == [
        f"pass rate 37.5% fell more than 0.0% below the baseline's 87.5% (eval run {baseline.pk})"
    ]
    assert verdict.as_dict()["baseline"] == baseline.pk and verdict.as_dict()["max_drop"] == 0.0

    allowed = gates.hold(list(now.results.all()), dataclasses.replace(gate, max_drop=0.5), list(baseline.results.all()))
    assert allowed.passed and allowed.failures == [] and allowed.regressions == ["broke [tools]"]

    both = gates.hold(list(now.results.all()), dataclasses.replace(gate, min_pass_rate=0.5, max_drop=0.5),
                      list(baseline.results.all()))  # fmt: skip
    assert not both.passed and both.failures == ["pass rate 37.5% is below the minimum 50.0%"]


@dataclasses.dataclass
class _Row:
    case_id: str
    protocol: str
    attempt: int
    passed: bool
    score: float


def test_a_drop_of_exactly_max_drop_passes_despite_floating_point():
    assert 1.0 - 0.7 > 0.3  # the floor 1.0 with a drop of 0.7 gives is a hair above 3/10
    results = [_Row(f"c{n}", "tools", 1, n < 3, 1.0) for n in range(10)]  # 3 of 10 passed
    gate = Gate(min_pass_rate=0.0, max_drop=0.7, baseline_id=1, baseline_pass_rate=1.0)
    assert gates.hold(results, gate, []).passed
    assert not gates.hold(results, dataclasses.replace(gate, max_drop=0.69), []).passed


@pytest.mark.django_db
def test_hold_gate_defaults_the_minimum_and_stores_the_verdict():
    alone = eval_run_of(attempts("a", "p") + attempts("b", "f"))
    verdict = runner.hold_gate(alone)
    assert verdict.gate.min_pass_rate == 1.0 and not verdict.passed  # no baseline: every case must pass
    alone.refresh_from_db()
    assert alone.gate == verdict.as_dict() and alone.gate["passed"] is False

    baseline = eval_run_of(attempts("a", "p") + attempts("b", "p"))
    compared = eval_run_of(attempts("a", "p") + attempts("b", "f"), baseline=baseline)
    verdict = runner.hold_gate(compared, max_drop=0.5)
    assert verdict.gate == Gate(min_pass_rate=0.0, max_drop=0.5, baseline_id=baseline.pk, baseline_pass_rate=1.0)
    assert verdict.passed and verdict.regressions == ["b [tools]"]  # with a baseline, its floor decides
    compared.refresh_from_db()
    assert compared.gate["regressions"] == ["b [tools]"] and compared.gate["baseline"] == baseline.pk

    assert not runner.hold_gate(compared).passed  # max_drop 0: 50% is below the baseline's 100%
    assert not runner.hold_gate(compared, min_pass_rate=0.6, max_drop=0.5).passed


# --- --repeat ---------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_repeat_runs_each_case_and_protocol_that_many_times(tmp_path):
    both = {**PLUS, "protocols": ["tools", "react"]}
    code, out = run("--cases", write_cases(tmp_path, both, TIMES), "--repeat", "3")
    assert code == 0

    eval_run = EvalRun.objects.get()
    assert (eval_run.repeat, eval_run.total, eval_run.passed) == (3, 9, 9)
    assert stored(eval_run) == [(c, p, n, True) for c, p in (("plus", "react"), ("plus", "tools"), ("times", "tools"))
                                for n in (1, 2, 3)]  # fmt: skip
    results = list(eval_run.results.select_related("run"))
    assert len({r.run_id for r in results}) == 9 and len({r.run.owner_id for r in results}) == 9  # a run, a user each
    assert eval_run.gate["passed"] is True and eval_run.gate["flaky"] == []

    lines = out.splitlines()
    assert lines[0].split() == ["case", "protocol", "try", "result", "score", "turns", "ms", "why", "not"]
    assert [line.split()[:4] for line in lines[2:11]] == [
        [c, p, str(n), "pass"] for c, p in (("plus", "react"), ("plus", "tools"), ("times", "tools")) for n in (1, 2, 3)
    ]
    second = lines.index("") + 1  # the repeat table, after a blank line
    assert lines[second].split() == ["case", "protocol", "passed", "all", "score", "spread"]
    assert [line.split() for line in lines[second + 2 : second + 5]] == [
        ["plus", "react", "3/3", "yes", "1.00", "0.00"],
        ["plus", "tools", "3/3", "yes", "1.00", "0.00"],
        ["times", "tools", "3/3", "yes", "1.00", "0.00"],
    ]
    assert "flaky" not in out
    assert "9/9 passed (100%)" in out and "gate passed (pass rate ≥ 100%)" in out


@pytest.mark.django_db
def test_without_repeat_there_is_one_attempt_and_one_table(tmp_path):
    code, out = run("--cases", write_cases(tmp_path, PLUS))
    assert code == 0
    eval_run = EvalRun.objects.get()
    assert eval_run.repeat == 1 and stored(eval_run) == [("plus", "tools", 1, True)]
    assert out.splitlines()[0].split() == ["case", "protocol", "result", "score", "turns", "ms", "why", "not"]
    assert "spread" not in out


@pytest.mark.django_db
def test_a_case_passing_some_attempts_is_marked_flaky(tmp_path, monkeypatch):
    real = runner.evidence_of
    calls = {"n": 0}

    def every_second_answer_wrong(run, latency_ms=None):  # attempts run in order with concurrency 1
        calls["n"] += 1
        evidence = real(run, latency_ms)
        return dataclasses.replace(evidence, output="86") if calls["n"] % 2 == 0 else evidence

    monkeypatch.setattr(runner, "evidence_of", every_second_answer_wrong)
    path = write_cases(tmp_path, PLUS)
    code, out = run("--cases", path, "--repeat", "3", "--concurrency", "1")
    assert code == 1  # 2 of 3: below the default minimum of 100%

    eval_run = EvalRun.objects.order_by("pk").last()
    assert stored(eval_run) == [("plus", "tools", 1, True), ("plus", "tools", 2, False), ("plus", "tools", 3, True)]
    assert eval_run.gate["flaky"] == ["plus [tools]"]
    assert eval_run.gate["failures"] == ["pass rate 66.7% is below the minimum 100.0%"]
    rows = [line for line in out.splitlines() if line.startswith("plus ")]
    assert len(rows) == 4 and all(row.rstrip().endswith("(flaky)") for row in rows[:3])  # each attempt's row
    assert rows[1].split()[2:4] == ["2", "FAIL"] and "of 85, got '86' (flaky)" in rows[1]
    assert rows[3].split() == ["plus", "tools", "2/3", "no", "0.67", "1.00", "flaky"]
    assert "gate FAILED (pass rate ≥ 100%): pass rate 66.7% is below the minimum 100.0%" in out

    calls["n"] = 0
    code, _ = run("--cases", path, "--repeat", "3", "--concurrency", "1", "--min-pass-rate", "0.6")
    assert code == 0  # flaky is said, not a failure of the gate
    assert EvalRun.objects.order_by("pk").last().gate["flaky"] == ["plus [tools]"]


# --- --min-pass-rate --------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_min_pass_rate_is_every_case_by_default(tmp_path):
    path = write_cases(tmp_path, PLUS, PARIS)

    code, out = run("--cases", path)
    assert code == 1
    failed = EvalRun.objects.get()
    assert (failed.total, failed.passed, failed.pass_rate) == (2, 1, 0.5)
    assert failed.gate["passed"] is False and failed.gate["min_pass_rate"] == 1.0
    assert failed.gate["failures"] == ["pass rate 50.0% is below the minimum 100.0%"]
    assert "gate FAILED (pass rate ≥ 100%): pass rate 50.0% is below the minimum 100.0%" in out

    code, out = run("--cases", path, "--min-pass-rate", "0.5")
    assert code == 0
    passed = EvalRun.objects.exclude(pk=failed.pk).get()
    assert passed.gate["passed"] is True and passed.gate["min_pass_rate"] == 0.5 and passed.gate["failures"] == []
    assert "gate passed (pass rate ≥ 50%)" in out
    assert "passed in the baseline" not in out

    code, _ = run("--cases", path, "--min-pass-rate", "0.51")
    assert code == 1
    code, _ = run("--cases", path, "--min-pass-rate", "0")
    assert code == 0


# --- --baseline and --max-drop ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_case_failing_now_that_passed_in_the_baseline(tmp_path):
    code, _ = run("--cases", write_cases(tmp_path, PLUS, TIMES, name="before.yaml"))
    assert code == 0
    baseline = EvalRun.objects.get()
    assert baseline.pass_rate == 1.0 and baseline.baseline is None

    broken = {**TIMES, "check": {"type": "numeric", "value": 783}}  # the same case, its answer now wrong
    after = write_cases(tmp_path, PLUS, broken, name="after.yaml")
    report, junit = tmp_path / "report.json", tmp_path / "junit.xml"
    code, out = run("--cases", after, "--baseline", str(baseline.pk), "--max-drop", "0", "--report", str(report),
                    "--junit", str(junit))  # fmt: skip
    assert code == 1

    eval_run = EvalRun.objects.exclude(pk=baseline.pk).get()
    assert eval_run.baseline == baseline and eval_run.pass_rate == 0.5
    why = f"pass rate 50.0% fell more than 0.0% below the baseline's 100.0% (eval run {baseline.pk})"
    assert eval_run.gate == {
        "passed": False,
        "pass_rate": 0.5,
        "min_pass_rate": 0.0,  # the default with a baseline
        "baseline": baseline.pk,
        "baseline_pass_rate": 1.0,
        "max_drop": 0.0,
        "failures": [why],
        "regressions": ["times [tools]"],
        "flaky": [],
    }
    assert f"gate FAILED (pass rate ≥ 0%, at most 0% below eval run {baseline.pk} (100%)): {why}" in out
    assert out.rstrip().endswith("passed in the baseline, failing now: times [tools]")

    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["id"] == eval_run.pk and data["baseline"] == baseline.pk
    assert data["gate"] == eval_run.gate
    gate = next(c for c in ET.parse(junit).getroot().iter("testcase") if c.get("classname") == "evals.gate")
    assert gate.find("failure").get("message") == why
    assert gate.find("failure").text == f"{why}\nregressed: times [tools]"

    code, out = run("--cases", after, "--baseline", str(baseline.pk), "--max-drop", "0.5")
    assert code == 0  # half of the cases may go …
    allowed = EvalRun.objects.order_by("pk").last()
    assert allowed.gate["passed"] is True and allowed.gate["max_drop"] == 0.5 and allowed.gate["failures"] == []
    assert allowed.gate["regressions"] == ["times [tools]"]  # … but the one that did is still named
    assert f"gate passed (pass rate ≥ 0%, at most 50% below eval run {baseline.pk} (100%))" in out
    assert "passed in the baseline, failing now: times [tools]" in out

    code, out = run("--cases", after, "--baseline", str(baseline.pk), "--max-drop", "0.5", "--min-pass-rate", "1")
    assert code == 1  # the minimum still holds with a baseline
    assert "pass rate 50.0% is below the minimum 100.0%" in out


@pytest.mark.django_db
def test_the_same_cases_against_their_baseline_pass(tmp_path):
    path = write_cases(tmp_path, PLUS, PARIS)
    code, _ = run("--cases", path, "--min-pass-rate", "0.5")
    assert code == 0
    baseline = EvalRun.objects.get()

    code, out = run("--cases", path, "--baseline", str(baseline.pk))
    assert code == 0  # 50% again: no drop; the case that failed then is no regression
    eval_run = EvalRun.objects.order_by("pk").last()
    assert eval_run.gate["passed"] is True and eval_run.gate["regressions"] == []
    assert eval_run.cases_sha256 == baseline.cases_sha256 == sha256(path)
    assert "passed in the baseline" not in out


@pytest.mark.django_db
def test_an_unknown_baseline_exits_2_and_stores_nothing(tmp_path):
    message = bad("--cases", write_cases(tmp_path, PLUS), "--baseline", "999999")
    assert message == "No eval run 999999 to compare with (--baseline)."
    assert nothing_stored()


@pytest.mark.django_db
def test_an_unfinished_baseline_exits_2_and_stores_nothing(tmp_path):
    unfinished = EvalRun.objects.create(provider="demo", model="demo-1", protocol="tools", cases_file="x")
    message = bad("--cases", write_cases(tmp_path, PLUS), "--baseline", str(unfinished.pk), "--max-drop", "0.1")
    assert message == f"Eval run {unfinished.pk} has not finished: it cannot be a baseline."
    assert list(EvalRun.objects.all()) == [unfinished]
    assert not EvalResult.objects.exists() and not Run.objects.exists()


@pytest.mark.django_db
def test_max_drop_needs_a_baseline(tmp_path):
    assert bad("--cases", write_cases(tmp_path, PLUS), "--max-drop", "0.2") == "--max-drop needs --baseline."
    assert nothing_stored()


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repeat", "0"], "--repeat must be between 1 and 20."),
        (["--repeat", "21"], "--repeat must be between 1 and 20."),
        (["--repeat", "-1"], "--repeat must be between 1 and 20."),
        (["--max-drop", "-0.1"], "--max-drop must be between 0 and 1."),
        (["--max-drop", "1.5"], "--max-drop must be between 0 and 1."),
        (["--max-drop", "nan"], "--max-drop must be between 0 and 1."),
        (["--min-pass-rate", "-0.01"], "--min-pass-rate must be between 0 and 1."),
        (["--min-pass-rate", "1.01"], "--min-pass-rate must be between 0 and 1."),
        (["--min-pass-rate", "50"], "--min-pass-rate must be between 0 and 1."),  # a percentage is not a rate
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(v),
)
def test_values_out_of_range_exit_2_and_store_nothing(tmp_path, args, message):
    assert bad("--cases", write_cases(tmp_path, PLUS), *args) == message
    assert nothing_stored()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repeat", "0"], "CommandError: --repeat must be between 1 and 20."),
        (["--max-drop", "0.3"], "CommandError: --max-drop needs --baseline."),
        (["--repeat", "x"], "argument --repeat: invalid int value: 'x'"),  # argparse's own refusal
        (["--min-pass-rate", "high"], "argument --min-pass-rate: invalid float value: 'high'"),
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(v),
)
def test_bad_arguments_exit_2_from_the_command_line(capsys, args, message):
    with pytest.raises(SystemExit) as exc:
        run_evals_command.Command().run_from_argv(["manage.py", "run_evals", "--skip-checks", *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.django_db
@pytest.mark.parametrize("flag", ["--junit", "--report"])
def test_a_report_path_that_cannot_be_written_exits_2_before_anything_runs(tmp_path, flag):
    cases = write_cases(tmp_path, PLUS)
    missing = tmp_path / "no-such-folder" / "out.xml"
    assert bad("--cases", cases, flag, str(missing)) == (
        f"{flag} {missing}: cannot write there (no such folder, or not writable)."
    )
    assert "cannot write there" in bad("--cases", cases, flag, str(tmp_path))  # a folder, not a file
    assert nothing_stored()
    assert not missing.parent.exists()


# --- --junit and --report ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_junit_has_a_testcase_per_attempt_and_one_for_the_gate(tmp_path):
    junit = tmp_path / "evals.xml"
    code, _ = run("--cases", write_cases(tmp_path, PLUS, PARIS), "--repeat", "2", "--junit", str(junit))
    assert code == 1
    eval_run = EvalRun.objects.get()

    root = ET.parse(junit).getroot()  # valid XML
    assert junit.read_bytes().startswith(b"<?xml")
    assert root.tag == "testsuites" and root.get("name") == f"eval run {eval_run.pk}"
    (suite,) = list(root)
    assert suite.tag == "testsuite" and suite.get("name") == "evals demo/demo-1"
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("5", "3", "0")  # 2 of 4, and the gate
    testcases = list(suite.iter("testcase"))
    cases = {(c.get("classname"), c.get("name")): c for c in testcases}
    assert len(testcases) == len(cases) == 5
    assert set(cases) == {("evals.tools", f"{c} #{n}") for c in ("plus", "paris") for n in (1, 2)} | {
        ("evals.gate", "gate")
    }

    runs = {(r.case_id, r.attempt): str(r.run_id) for r in eval_run.results.all()}
    for n in (1, 2):
        ok = cases["evals.tools", f"plus #{n}"]
        assert ok.find("failure") is None
        props = {p.get("name"): p.get("value") for p in ok.iter("property")}
        assert props == {"score": "1.0", "turns": "3", "run": runs["plus", n]}  # no price: no cost
        failure = cases["evals.tools", f"paris #{n}"].find("failure")
        assert failure.get("message") == "missing 'Paris'"
        assert failure.text == "contains: FAIL 0.00 missing 'Paris'"
    gate = cases["evals.gate", "gate"].find("failure")
    assert gate.get("message") == "pass rate 50.0% is below the minimum 100.0%"
    assert gate.text == "pass rate 50.0% is below the minimum 100.0%"


@pytest.mark.django_db
def test_junit_of_a_passing_run_without_repeat(tmp_path):
    junit = tmp_path / "evals.xml"
    code, _ = run("--cases", write_cases(tmp_path, {**PLUS, "protocols": ["tools", "react"]}), "--junit", str(junit))
    assert code == 0
    suite = ET.parse(junit).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures")) == ("3", "0")
    assert sorted((c.get("classname"), c.get("name")) for c in suite.iter("testcase")) == [
        ("evals.gate", "gate"),
        ("evals.react", "plus"),  # one attempt: the case's id alone
        ("evals.tools", "plus"),
    ]
    assert not list(suite.iter("failure"))


@pytest.mark.django_db
def test_report_is_the_stored_eval_run_with_its_cases_and_results(tmp_path):
    path = write_cases(tmp_path, PLUS, PARIS)
    report = tmp_path / "report.json"
    code, out = run("--cases", path, "--repeat", "2", "--min-pass-rate", "0.5", "--report", str(report))
    assert code == 0

    eval_run = EvalRun.objects.get()
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["id"] == eval_run.pk and f"eval run {eval_run.pk}" in out
    assert (data["provider"], data["model"], data["repeat"], data["baseline"]) == ("demo", "demo-1", 2, None)
    assert (data["total"], data["passed"], data["pass_rate"], data["score"]) == (4, 2, 0.5, 0.5)
    assert data["cost"] == cost_text(eval_run.cost_nanos) == "0"  # the demo model bills nothing by default
    assert data["cases_sha256"] == eval_run.cases_sha256 == sha256(path)
    assert data["gate"] == eval_run.gate and data["gate"]["passed"] is True and data["gate"]["min_pass_rate"] == 0.5
    assert [(c["case_id"], c["attempts"], c["passed"], c["all_passed"], c["flaky"]) for c in data["cases"]] == [
        ("paris", 2, 0, False, False),
        ("plus", 2, 2, True, False),
    ]

    results = {(r.case_id, r.attempt): r for r in eval_run.results.all()}
    assert [(r["case_id"], r["protocol"], r["attempt"], r["passed"], r["score"]) for r in data["results"]] == [
        ("paris", "tools", 1, False, 0.0),
        ("paris", "tools", 2, False, 0.0),
        ("plus", "tools", 1, True, 1.0),
        ("plus", "tools", 2, True, 1.0),
    ]
    for item in data["results"]:
        result = results[item["case_id"], item["attempt"]]
        assert item["checks"] == result.checks and len(item["checks"]) == 1
        assert item["run"] == str(result.run_id) and item["reason"] == result.reason
        assert (item["turns"], item["tokens"], item["cost"]) == (result.turns, result.tokens, "0")
    assert data["results"][0]["checks"] == [
        {"type": "contains", "passed": False, "score": 0.0, "reason": "missing 'Paris'", "weight": 1.0}
    ]
    assert data["results"][2]["checks"] == [
        {"type": "numeric", "passed": True, "score": 1.0, "reason": "", "weight": 1.0}
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report.json.")]  # no temporary file left


@pytest.mark.django_db
def test_cost_is_stored_per_result_and_summed_when_the_model_has_a_price(tmp_path, settings):
    settings.AGENT_PRICES = {"demo/demo-1": {"input": "1000", "output": "1000"}}
    report = tmp_path / "report.json"
    code, out = run("--cases", write_cases(tmp_path, PLUS, COLOUR), "--report", str(report))
    assert code == 0

    eval_run = EvalRun.objects.get()
    results = {r.case_id: r for r in eval_run.results.select_related("run__owner")}
    assert results["plus"].cost_nanos == results["plus"].run.cost_nanos > 0
    setup_and_question = [r.cost_nanos for r in results["colour"].run.owner.runs.all()]
    assert len(setup_and_question) == 2 and results["colour"].cost_nanos == sum(setup_and_question)  # setup included
    assert eval_run.cost_nanos == sum(r.cost_nanos for r in results.values())
    assert f" · cost {money_text(eval_run.cost_nanos)} · eval run {eval_run.pk}" in out
    data = json.loads(report.read_text(encoding="utf-8"))
    assert data["cost"] == cost_text(eval_run.cost_nanos)
    assert {r["case_id"]: r["cost"] for r in data["results"]} == {
        k: cost_text(r.cost_nanos) for k, r in results.items()
    }


# --- what an eval run stores ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_cases_sha256_is_the_hash_of_the_cases_file_bytes(tmp_path):
    path = write_cases(tmp_path, PLUS)
    Path(path).write_text(Path(path).read_text(encoding="utf-8") + "# a comment changes the hash\n", encoding="utf-8")
    run("--cases", path)
    eval_run = EvalRun.objects.get()
    assert eval_run.cases_sha256 == hashlib.sha256(Path(path).read_bytes()).hexdigest()
    assert re.fullmatch(r"[0-9a-f]{64}", eval_run.cases_sha256)
    assert eval_run.cases_sha256 != sha256(write_cases(tmp_path, PLUS, name="other.yaml"))


@pytest.mark.django_db
def test_cases_sha256_of_a_cases_file_given_relative_to_the_working_folder(tmp_path, monkeypatch):
    write_cases(tmp_path, PLUS, name="mine.yaml")
    monkeypatch.chdir(tmp_path)  # not the project's folder
    run("--cases", "mine.yaml")
    eval_run = EvalRun.objects.get()
    assert eval_run.total == 1
    assert eval_run.cases_sha256 == sha256(tmp_path / "mine.yaml")  # the file that ran, not one of the project's
    assert eval_run.cases_file == str(tmp_path / "mine.yaml")  # stored as the file it is, wherever read from


@pytest.mark.django_db
def test_each_check_of_the_repo_trajectory_case_is_stored():
    code, _ = run("--only", "checks-arith-trajectory")
    assert code == 0

    eval_run = EvalRun.objects.get()
    assert eval_run.cases_sha256 == sha256(DEFAULT_CASES)
    results = list(eval_run.results.all())
    assert sorted(r.protocol for r in results) == ["react", "tools"]
    for r in results:
        assert r.passed and r.score == 1.0 and r.attempt == 1
        assert [c["type"] for c in r.checks] == ["numeric", "json", "tools", "turns", "latency", "cost"]
        assert all(c["passed"] is True and c["score"] == 1.0 and c["reason"] == "" for c in r.checks), r.checks
        assert all(c["weight"] == 1.0 for c in r.checks)
    assert eval_run.score == 1.0


@pytest.mark.django_db
def test_each_check_of_a_case_with_several_is_stored_and_weighted(tmp_path):
    checks = [
        {"type": "numeric", "value": 85, "weight": 2},
        {"type": "contains", "value": "eighty-five"},
        {"type": "turns", "max": 1},
    ]
    strict = {"id": "mixed", "input": "What is 12*7, plus 1?", "protocols": ["tools"], "checks": checks}
    lenient = {**strict, "id": "mixed-lenient", "pass_score": 0.5}
    junit = tmp_path / "evals.xml"
    code, out = run("--cases", write_cases(tmp_path, strict, lenient), "--junit", str(junit))
    assert code == 1  # one of the two

    eval_run = EvalRun.objects.get()
    results = {r.case_id: r for r in eval_run.results.all()}
    outcomes = [
        {"type": "numeric", "passed": True, "score": 1.0, "reason": "", "weight": 2.0},
        {"type": "contains", "passed": False, "score": 0.0, "reason": "missing 'eighty-five'", "weight": 1.0},
        {"type": "turns", "passed": False, "score": 0.0, "reason": "3 turns (at most 1)", "weight": 1.0},
    ]
    assert results["mixed"].checks == results["mixed-lenient"].checks == outcomes
    assert (results["mixed"].passed, results["mixed"].score, results["mixed"].reason) == (
        False,
        0.5,
        "missing 'eighty-five'",  # the first failing check's
    )
    assert (results["mixed-lenient"].passed, results["mixed-lenient"].score, results["mixed-lenient"].reason) == (
        True,
        0.5,
        "",  # the weighted score reaches its pass_score
    )
    assert eval_run.score == 0.5 and eval_run.pass_rate == 0.5
    assert any(line.split()[:4] == ["mixed", "tools", "FAIL", "0.50"] for line in out.splitlines())

    failure = next(c for c in ET.parse(junit).getroot().iter("testcase") if c.get("name") == "mixed").find("failure")
    assert failure.get("message") == "missing 'eighty-five'"
    assert failure.text.splitlines() == [
        "numeric: pass 1.00",
        "contains: FAIL 0.00 missing 'eighty-five'",
        "turns: FAIL 0.00 3 turns (at most 1)",
    ]


# --- --concurrency's default and the progress line --------------------------------------------------------------------


class _Stop(Exception):
    pass


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("setting", "args", "expected"),
    [(0, [], None), (3, [], 3), (3, ["--concurrency", "2"], 2)],
    ids=["no setting", "AGENT_EVAL_CONCURRENCY", "--concurrency over the setting"],
)
def test_concurrency_defaults_to_the_setting_else_1_on_sqlite(tmp_path, settings, monkeypatch, setting, args, expected):
    settings.AGENT_EVAL_CONCURRENCY = setting
    seen = []

    def stop(*, cases, config, created_by=None, progress=None):
        seen.append(config.concurrency)
        raise _Stop

    monkeypatch.setattr(run_evals_command, "run_evals", stop)
    with pytest.raises(_Stop):
        command("run_evals", "--cases", write_cases(tmp_path, PLUS), *args)
    assert seen == [expected if expected is not None else (1 if connection.vendor == "sqlite" else 4)]


@pytest.mark.django_db
def test_a_concurrency_setting_out_of_range_exits_2(tmp_path, settings):
    settings.AGENT_EVAL_CONCURRENCY = 17
    assert bad("--cases", write_cases(tmp_path, PLUS)) == "--concurrency must be between 1 and 16."
    assert nothing_stored()


@pytest.mark.django_db
def test_the_progress_line_counts_passed_and_failed_on_stderr(tmp_path, capsys):
    out = io.StringIO()
    with pytest.raises(SystemExit):
        call_command("run_evals", "--cases", write_cases(tmp_path, PLUS, PARIS), "--repeat", "2", stdout=out)
    err = capsys.readouterr().err
    final = [line for line in err.replace("\r", "\n").splitlines() if line.startswith("evals:")][-1]
    assert final.startswith("evals: 100%") and " 4/4 " in final
    assert final.endswith("passed=2, failed=2]")
    assert "passed=" not in out.getvalue()  # the table alone on stdout


@pytest.mark.django_db
def test_json_output_has_no_progress_line_and_carries_the_gate(tmp_path, capsys):
    out = io.StringIO()
    call_command("run_evals", "--cases", write_cases(tmp_path, PLUS), "--repeat", "2", "--json", stdout=out)
    assert "evals:" not in capsys.readouterr().err  # stderr is no terminal here
    data = json.loads(out.getvalue())
    eval_run = EvalRun.objects.get()
    assert data["id"] == eval_run.pk and data["repeat"] == 2 and data["gate"] == eval_run.gate
    assert data["gate"]["passed"] is True
    assert [(r["case_id"], r["attempt"]) for r in data["results"]] == [("plus", 1), ("plus", 2)]
