"""`manage.py run_evals` on the offline demo model: results stored and printed, exit status, bad arguments."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.evals.cases import DEFAULT_CASES
from agents.models import EvalResult, EvalRun
from tests.conftest import make_user
from tests.evals.conftest import command

README = Path(__file__).resolve().parents[2] / "docs" / "evals.md"  # the Evals page


def failing(eval_run: EvalRun) -> set[tuple[str, str]]:
    return {(r.case_id, r.protocol) for r in eval_run.results.filter(passed=False)}


def cases_file(tmp_path, *ids: str, extra: list[dict] | None = None) -> str:
    """A cases file with some of the repo's cases (by id) and extra ones."""
    repo = {c["id"]: c for c in yaml.safe_load(DEFAULT_CASES.read_text(encoding="utf-8"))}
    path = tmp_path / "cases.yaml"
    path.write_text(yaml.safe_dump([repo[i] for i in ids] + (extra or [])), encoding="utf-8")
    return str(path)


@pytest.mark.django_db
def test_all_passing_exits_normally_and_stores_the_eval_run():
    out = command("run_evals", "--only", "arith-chain*")

    eval_run = EvalRun.objects.get()
    assert (eval_run.total, eval_run.passed, eval_run.pass_rate) == (4, 4, 1.0)  # 2 cases × 2 protocols
    assert (eval_run.provider, eval_run.model, eval_run.protocol, eval_run.only) == (
        "demo",
        "demo-1",
        "per case",
        "arith-chain*",
    )
    assert eval_run.finished_at is not None and eval_run.created_by is None
    assert eval_run.mean_turns == 3.0 and eval_run.p95_latency_ms >= eval_run.p50_latency_ms > 0

    results = list(eval_run.results.select_related("run__owner"))
    pairs = {(r.case_id, r.protocol) for r in results}
    assert pairs == {(c, p) for c in ("arith-chain-plus", "arith-chain-times") for p in ("tools", "react")}
    owners = {r.run.owner_id for r in results}
    assert len(owners) == 4  # a fresh user per case
    for r in results:
        assert r.passed and r.reason == ""
        assert r.run.stop_reason == "final_answer" and r.run.output == r.output and r.run.protocol == r.protocol
        assert r.run.owner.username.startswith("eval-") and not r.run.owner.is_active
        assert r.turns == r.run.turns == 3
    assert {r.output for r in results} == {"85", "782"}

    lines = out.splitlines()
    assert lines[0].split() == ["case", "protocol", "result", "score", "turns", "ms", "why", "not"]
    assert set(lines[1]) <= {"-", " "}
    assert sum(" pass " in line for line in lines) == 4
    assert "4/4 passed (100%) · score 1.00 · provider demo · model demo-1 · mean turns 3.00" in out
    assert "gate passed (pass rate ≥ 100%)" in out
    assert f"eval run {eval_run.pk}" in out


@pytest.mark.django_db
def test_protocol_halves_the_pairs():
    command("run_evals", "--only", "arith-chain*", "--protocol", "react")
    eval_run = EvalRun.objects.get()
    assert (eval_run.total, eval_run.passed, eval_run.protocol) == (2, 2, "react")
    assert set(eval_run.results.values_list("protocol", flat=True)) == {"react"}


@pytest.mark.django_db
def test_react_only_cases_are_skipped_for_protocol_tools():
    command("run_evals", "--only", "react-format-*", "--protocol", "react")
    with pytest.raises(CommandError) as exc:
        command("run_evals", "--only", "react-format-*", "--protocol", "tools")
    assert exc.value.returncode == 2
    assert EvalRun.objects.count() == 1


@pytest.mark.django_db
def test_json_output():
    alice = make_user("alice")
    out = command("run_evals", "--only", "arith-chain-plus", "--json", "--user", "alice")

    data = json.loads(out)
    eval_run = EvalRun.objects.get()
    assert data["id"] == eval_run.pk and data["created_by"] == "alice" and eval_run.created_by == alice
    assert (data["total"], data["passed"], data["pass_rate"]) == (2, 2, 1.0)
    assert {(r["case_id"], r["protocol"], r["passed"], r["output"]) for r in data["results"]} == {
        ("arith-chain-plus", "tools", True, "85"),
        ("arith-chain-plus", "react", True, "85"),
    }
    assert all(r["run"] and r["reason"] == "" for r in data["results"])


@pytest.mark.django_db
def test_a_failing_case_exits_1_and_stores_why():
    with pytest.raises(SystemExit) as exc:
        command("run_evals", "--only", "general-knowledge", "--protocol", "tools")
    assert exc.value.code == 1

    result = EvalResult.objects.get()
    assert (result.case_id, result.passed, result.reason) == ("general-knowledge", False, "missing 'Paris'")
    assert result.run.stop_reason == "final_answer"
    assert (result.eval_run.total, result.eval_run.passed, result.eval_run.pass_rate) == (1, 0, 0.0)


@pytest.mark.django_db
def test_the_table_shows_why_a_case_failed(capsys):
    with pytest.raises(SystemExit):
        call_command("run_evals", "--only", "general-knowledge")  # stdout: captured by capsys
    out = capsys.readouterr().out
    assert sum("FAIL" in line and "missing 'Paris'" in line for line in out.splitlines()) == 2
    assert "0/2 passed (0%)" in out


@pytest.mark.django_db
def test_a_run_out_of_turns_is_stopped_max_turns_even_after_reflecting():
    with pytest.raises(SystemExit):
        command("run_evals", "--only", "budget-one-turn", "--protocol", "tools", "--max-reflections", "1")
    result = EvalResult.objects.select_related("run", "eval_run").get()
    assert result.eval_run.max_reflections == 1
    assert result.reason == "stopped: max_turns"
    run = result.run
    assert (run.max_reflections, run.reflections, run.turns) == (1, 1, 5)  # 2 turns, a critique, 2 turns
    assert [s.data.get("reflection", False) for s in run.steps.filter(kind="model").order_by("index")] == [
        False,
        False,
        True,
        False,
        False,
    ]


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "0"], "--concurrency must be between 1 and 16"),
        (["--concurrency", "17"], "--concurrency must be between 1 and 16"),
        (["--max-reflections", "9"], "--max-reflections must be between 0 and 5"),
        (["--max-reflections", "-1"], "--max-reflections must be between 0 and 5"),
        (["--cases", "/nonexistent/cases.yaml"], "Cannot read cases file"),
        (["--only", "no-such-case*"], "No case matches"),
        (["--provider", "nope"], "nope"),
        (["--provider", "openai"], "OPENAI_API_KEY"),
        (["--user", "nobody"], "No user 'nobody'"),
    ],
    ids=lambda v: v if isinstance(v, str) else " ".join(v),
)
def test_bad_arguments_exit_2_and_store_nothing(settings, args, message):
    settings.OPENAI_API_KEY = ""
    with pytest.raises(CommandError, match=re.escape(message)) as exc:
        command("run_evals", "--only", "arith-chain-plus", *args)
    assert exc.value.returncode == 2
    assert EvalRun.objects.count() == 0


@pytest.mark.django_db
def test_a_malformed_cases_file_exits_2(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("- id: x\n  input: y\n  check: {type: fuzzy, value: 1}\n", encoding="utf-8")
    with pytest.raises(CommandError, match="case 'x': check: check type must be one of exact, contains") as exc:
        command("run_evals", "--cases", str(path))
    assert exc.value.returncode == 2


@pytest.mark.django_db
def test_memory_cases_do_not_see_each_other(tmp_path):
    store = {"id": "a-store", "input": "remember that my car is blue", "check": {"type": "contains", "value": "blue"}}
    recall = {
        "id": "b-recall",
        "input": "what do you remember about my car?",
        "check": {"type": "regex", "value": "(?i)(no matching|nothing|don't (have|know))"},
        "not_contains": ["blue"],
    }
    command("run_evals", "--cases", cases_file(tmp_path, "memory-city", "memory-pet", extra=[store, recall]))

    eval_run = EvalRun.objects.get()
    assert (eval_run.total, eval_run.passed) == (8, 8)
    assert eval_run.cases_file.endswith("cases.yaml")
    results = {(r.case_id, r.protocol): r for r in eval_run.results.select_related("run")}
    assert len({r.run.owner_id for r in results.values()}) == 8
    city, pet = results["memory-city", "tools"].run.owner, results["memory-pet", "tools"].run.owner
    assert sorted(city.facts.values_list("text", flat=True)) == ["I live in Lisbon", "my dog is called Rex"]
    assert sorted(pet.facts.values_list("text", flat=True)) == ["my cat is called Tom", "my dog is called Rex"]
    # the setup goals ran as the case's user too: three runs (two remembers, the question)
    assert city.runs.count() == 3


@pytest.mark.django_db(transaction=True)
def test_concurrency_gives_the_same_results(tmp_path):
    path = cases_file(tmp_path, "arith-chain-plus", "arith-words", "memory-city", "memory-pet", "general-knowledge")
    outcomes = []
    for concurrency in ("1", "3"):
        with pytest.raises(SystemExit) as exc:
            command("run_evals", "--cases", path, "--concurrency", concurrency)
        assert exc.value.code == 1
        eval_run = EvalRun.objects.latest("created_at")
        outcomes.append({(r.case_id, r.protocol): (r.passed, r.reason, r.output) for r in eval_run.results.all()})
        assert (eval_run.total, eval_run.passed) == (10, 8)
        assert len({r.run.owner_id for r in eval_run.results.select_related("run")}) == 10
    assert outcomes[0] == outcomes[1]


@pytest.mark.django_db
def test_the_default_cases_fail_exactly_where_the_readme_says():
    readme = README.read_text(encoding="utf-8")
    cases = re.search(r"`agents/evals/cases\.yaml` \((\d+) cases", readme)
    passes = re.search(r"passes the (\d+) case/protocol pairs", readme)
    fails = re.search(r"fails the other (\d+) honestly:\s+`general-knowledge`[^`]*and `budget-one-turn`", readme)
    assert cases and passes and fails, "docs/evals.md changed: update this test"

    with pytest.raises(SystemExit) as exc:
        command("run_evals")
    assert exc.value.code == 1

    eval_run = EvalRun.objects.get()
    assert EvalResult.objects.values("case_id").distinct().count() == int(cases.group(1))
    assert (eval_run.passed, eval_run.total - eval_run.passed) == (int(passes.group(1)), int(fails.group(1)))
    assert failing(eval_run) == {(c, p) for c in ("general-knowledge", "budget-one-turn") for p in ("tools", "react")}
    reasons = dict(eval_run.results.filter(passed=False).values_list("case_id", "reason"))
    assert reasons == {"general-knowledge": "missing 'Paris'", "budget-one-turn": "stopped: max_turns"}


@pytest.mark.django_db
def test_a_case_naming_an_unknown_tool_is_refused_before_anything_is_stored(tmp_path):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    from agents.models import EvalRun

    cases = tmp_path / "cases.yaml"
    cases.write_text('- {id: w, input: "weather?", tools: [weather], check: {type: contains, value: sun}}\n')
    with pytest.raises(CommandError) as raised:
        call_command("run_evals", "--cases", str(cases))
    assert raised.value.returncode == 2
    assert "weather" in str(raised.value)
    assert EvalRun.objects.count() == 0
