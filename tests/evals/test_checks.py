"""Every check type graded on `Evidence` (pure Python, no database): a pass, a fail with its reason, and a bad
configuration refused when the cases file is read; weights and pass_score; the graders (`similar`, `judge`) faked."""

from __future__ import annotations

import json
import re

import pytest

from agents.evals.cases import load_cases
from agents.evals.checks import (
    CHECK_TYPES,
    CaseError,
    Check,
    Evidence,
    Graders,
    JudgeError,
    Outcome,
    ToolUse,
    Verdict,
    grade,
    parse_check,
)

NO_GRADERS = Graders()


def check(raw: dict, where: str = "case 'c': check") -> Check:
    return parse_check(raw, where)


def graded(raw: dict, graders: Graders = NO_GRADERS, **evidence) -> Outcome:
    """The outcome of one check on a run with `evidence` (an answer "x" unless given)."""
    return check(raw).grade(Evidence(**{"output": "x", **evidence}), graders)


def write(tmp_path, items: list[dict]):
    path = tmp_path / "cases.yaml"
    path.write_text(json.dumps(items), encoding="utf-8")
    return path


def refused(tmp_path, raw_check, **fields) -> str:
    """The CaseError message of a one-case file (id `bad`) whose check is `raw_check`."""
    with pytest.raises(CaseError) as exc:
        load_cases(write(tmp_path, [{"id": "bad", "input": "q", "check": raw_check, **fields}]))
    return str(exc.value)


def assert_passed(outcome: Outcome, score: float = 1.0) -> None:
    assert (outcome.passed, outcome.reason, outcome.error) == (True, "", False)
    assert outcome.score == pytest.approx(score)


def assert_failed(outcome: Outcome, reason: str, score: float = 0.0, *, error: bool = False) -> None:
    assert (outcome.passed, outcome.reason, outcome.error) == (False, reason, error)
    assert outcome.score == pytest.approx(score)


# --- bad configurations: each type's, refused with the case and the field named -----------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"type": "exact"}, "case 'bad': check (exact): 'value' is required."),
        ({"type": "contains"}, "case 'bad': check (contains): 'value' is required."),
        ({"type": "regex"}, "case 'bad': check (regex): 'value' is required."),
        (
            {"type": "numeric", "value": "eighty"},
            "case 'bad': check (numeric): 'value' and 'tolerance' must be numbers.",
        ),
        ({"type": "json"}, "case 'bad': check (json): give a 'schema', 'fields' or both."),
        ({"type": "similar", "value": ""}, "case 'bad': check (similar): 'value' must be a non-empty string."),
        (
            {"type": "similar", "value": "x", "threshold": 2},
            "case 'bad': check (similar): 'threshold' must be a number from 0 to 1, not 2.",
        ),
        ({"type": "judge"}, "case 'bad': check (judge): 'rubric' is required."),
        (
            {"type": "judge", "rubric": "r", "threshold": "high"},
            "case 'bad': check (judge): 'threshold' must be a number, not 'high'.",
        ),
        (
            {"type": "tools", "calls": [{"name": "calculator"}], "order": "random"},
            "case 'bad': check (tools): 'order' must be one of in_order, exact, any, not 'random'.",
        ),
        ({"type": "cost"}, "case 'bad': check (cost): 'max' is required."),
        (
            {"type": "cost", "max": "lots"},
            "case 'bad': check (cost): 'max' must be an amount from 0 (a decimal string, e.g. \"0.01\"), not 'lots'.",
        ),
        ({"type": "latency"}, "case 'bad': check (latency): 'max_ms' is required."),
        (
            {"type": "latency", "max_ms": "fast"},
            "case 'bad': check (latency): 'max_ms' must be a number, not 'fast'.",
        ),
        ({"type": "turns"}, "case 'bad': check (turns): 'max' is required."),
        ({"type": "turns", "max": 2.5}, "case 'bad': check (turns): 'max' must be a whole number from 0, not 2.5."),
    ],
    ids=lambda v: v["type"] + ":" + ",".join(sorted(set(v) - {"type"})) if isinstance(v, dict) else None,
)
def test_a_bad_configuration_names_the_case_the_check_and_the_field(tmp_path, raw, message):
    assert refused(tmp_path, raw) == message


def test_every_check_type_has_a_bad_configuration_above():
    marks = test_a_bad_configuration_names_the_case_the_check_and_the_field.pytestmark
    (parametrize,) = [m for m in marks if m.name == "parametrize"]
    assert {raw["type"] for raw, _ in parametrize.args[1]} == set(CHECK_TYPES)


def test_an_invalid_regex_names_the_case_and_the_check(tmp_path):
    assert refused(tmp_path, {"type": "regex", "value": "(unclosed"}).startswith(
        "case 'bad': check (regex): invalid regex: missing ), unterminated subpattern"
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"type": "turns", "max": 3, "min": 1}, "check (turns): unknown field(s) min; known: max."),
        (
            {"type": "contains", "value": "x", "tolerance": 1, "case": True},
            "check (contains): unknown field(s) case, tolerance; known: ignore_case, value.",
        ),
        (
            {"type": "judge", "rubric": "r", "value": "x"},
            "check (judge): unknown field(s) value; known: model, rubric, threshold.",
        ),
        (
            {"type": "tools", "max_calls": 1, "arguments": {}},
            "check (tools): unknown field(s) arguments; known: calls, forbid, max_calls, order.",
        ),
    ],
    ids=lambda v: v["type"] if isinstance(v, dict) else None,
)
def test_an_unknown_field_in_a_check(tmp_path, raw, message):
    assert refused(tmp_path, raw) == "case 'bad': " + message


@pytest.mark.parametrize(
    ("weight", "message"),
    [
        (0, "'weight' must be above 0."),
        (-1, "'weight' must be a number from 0, not -1."),
        ("heavy", "'weight' must be a number, not 'heavy'."),
        (True, "'weight' must be a number, not True."),
    ],
    ids=str,
)
def test_a_bad_weight(tmp_path, weight, message):
    assert refused(tmp_path, {"type": "turns", "max": 1, "weight": weight}) == f"case 'bad': check (turns): {message}"


def test_in_a_list_of_checks_the_check_is_named_by_its_position(tmp_path):
    message = refused(tmp_path, None, checks=[{"type": "turns", "max": 1}, {"type": "turns", "max": -1}])
    assert message == "case 'bad': check #2 (turns): 'max' must be a whole number from 0, not -1."


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"checks": {"type": "turns", "max": 1}}, "case 'bad': 'checks' must be a list of checks."),
        ({"checks": [], "check": None}, "case 'bad' has no 'check' (or 'checks')"),
        ({"pass_score": 1.5}, "case 'bad': 'pass_score' must be a number from 0 to 1, not 1.5."),
        ({"pass_score": True}, "case 'bad': 'pass_score' must be a number from 0 to 1, not True."),
    ],
    ids=str,
)
def test_a_bad_list_of_checks_or_pass_score(tmp_path, fields, message):
    item = {"id": "bad", "input": "q", "check": {"type": "turns", "max": 1}, **fields}
    with pytest.raises(CaseError) as exc:
        load_cases(write(tmp_path, [item]))
    assert str(exc.value).startswith(message)


def test_check_and_checks_together_are_all_graded(tmp_path):
    item = {
        "id": "both",
        "input": "q",
        "check": {"type": "turns", "max": 1},
        "checks": [{"type": "latency", "max_ms": 5}],
    }
    (case,) = load_cases(write(tmp_path, [item]))
    assert [c.type for c in case.checks] == ["turns", "latency"]


def test_an_online_evaluator_cannot_use_a_check_needing_an_expected_answer():
    with pytest.raises(CaseError, match=r"^evaluator 'e': check \(similar\): needs an expected answer"):
        parse_check({"type": "similar", "value": "x"}, "evaluator 'e': check", online=True)
    assert parse_check({"type": "turns", "max": 1}, "evaluator 'e': check", online=True).type == "turns"


# --- exact, contains, regex, numeric --------------------------------------------------------------------------------


def test_exact():
    assert_passed(graded({"type": "exact", "value": "85"}, output=" 85\n"))
    assert_failed(graded({"type": "exact", "value": "85"}, output="86"), "expected exactly '85', got '86'")
    assert_failed(graded({"type": "exact", "value": "85"}, output=None), "no final answer")


def test_exact_shows_long_texts_from_near_where_they_differ():
    expected, got = "a" * 70 + "X", "a" * 70 + "Y"
    outcome = graded({"type": "exact", "value": expected}, output=got)
    assert outcome.reason == f"expected exactly '…{'a' * 20}X', got '…{'a' * 20}Y'"


def test_contains():
    assert_passed(graded({"type": "contains", "value": "Paris"}, output="It is Paris."))
    assert_failed(graded({"type": "contains", "value": "Paris"}, output="It is paris."), "missing 'Paris'")
    assert_passed(graded({"type": "contains", "value": "Paris", "ignore_case": True}, output="It is PARIS."))


def test_contains_a_list_gives_a_partial_score():
    raw = {"type": "contains", "value": ["Rex", "Tom", "Max", "Leo"]}
    assert_failed(graded(raw, output="Rex and Tom"), "missing 'Max'", score=0.5)
    assert_failed(graded(raw, output="Leo"), "missing 'Rex'", score=0.25)
    assert_failed(graded(raw, output="nobody"), "missing 'Rex'", score=0.0)
    assert_passed(graded(raw, output="Rex, Tom, Max and Leo"))


def test_regex():
    assert_passed(graded({"type": "regex", "value": r"\bRex\b"}, output="Your dog is Rex."))
    assert_failed(graded({"type": "regex", "value": r"\bRex\b"}, output="Rexy"), r"does not match /\bRex\b/")


def test_numeric():
    raw = {"type": "numeric", "value": 85, "tolerance": 0.5}
    assert_passed(graded(raw, output="It is 85.4."))
    assert_failed(graded(raw, output="It is 86."), "expected a number within 0.5 of 85, got 'It is 86.'")
    assert_failed(graded(raw, output="no number"), "expected a number within 0.5 of 85, got 'no number'")


# --- json -----------------------------------------------------------------------------------------------------------

SCHEMA = {"type": "object", "properties": {"total": {"type": "integer"}}, "required": ["total"]}
DOC = {"total": 3, "a": {"b": 2}, "items": [{"name": "x"}, {"name": "y", "tags": ["t1", "t2"]}]}


def test_json_with_a_schema():
    raw = {"type": "json", "schema": SCHEMA}
    assert_passed(graded(raw, output='{"total": 3}'))
    assert_passed(graded(raw, output='```json\n{"total": 3}\n```'))  # as models fence it
    assert_failed(graded(raw, output='{"total": "3"}'), "schema: total: '3' is not of type 'integer'")
    assert_failed(graded(raw, output="{}"), "schema: 'total' is a required property")


def test_json_that_is_no_json():
    assert_failed(
        graded({"type": "json", "schema": SCHEMA}, output="three"),
        "the answer is not JSON (Expecting value at position 0)",
    )
    assert_failed(graded({"type": "json", "schema": SCHEMA}, output=None), "no final answer")


def test_json_reads_a_structured_answer_before_the_text():
    assert_passed(graded({"type": "json", "schema": SCHEMA}, output="not json", output_json={"total": 1}))


def test_json_dotted_fields_with_list_indexes():
    fields = {"total": 3, "a.b": 2, "items.0.name": "x", "items.1.tags.1": "t2", "items.-1.name": "y", "a": {"b": 2}}
    assert_passed(graded({"type": "json", "fields": fields}, output=json.dumps(DOC)))


@pytest.mark.parametrize(
    ("path", "expected", "reason"),
    [
        ("a.b", 3, "a.b is '2', expected '3'"),  # the JSON texts, quoted
        ("items.0.name", "z", "items.0.name is '\"x\"', expected '\"z\"'"),
        ("a.c", 1, "no field 'a.c'"),
        ("items.5.name", "x", "no field 'items.5.name'"),
        ("items.-3", "x", "no field 'items.-3'"),
        ("items.first", "x", "no field 'items.first'"),
        ("total.0", 3, "no field 'total.0'"),
    ],
    ids=lambda v: str(v),
)
def test_json_a_field_that_differs_or_is_missing(path, expected, reason):
    outcome = graded({"type": "json", "fields": {path: expected}}, output_json=DOC)
    assert_failed(outcome, reason)


def test_json_schema_and_fields_each_count_for_the_score():
    raw = {"type": "json", "schema": SCHEMA, "fields": {"a.b": 2, "items.0.name": "z", "missing": 1}}
    outcome = graded(raw, output_json=DOC)
    assert_failed(outcome, "items.0.name is '\"x\"', expected '\"z\"'; no field 'missing'", score=0.5)  # 2 of 4 parts


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"type": "json", "schema": {"type": "nope"}}, "case 'bad': check (json): 'schema': Not a valid JSON Schema"),
        ({"type": "json", "schema": [1]}, "case 'bad': check (json): 'schema': A JSON Schema is a JSON object."),
        ({"type": "json", "fields": ["a.b"]}, "case 'bad': check (json): 'fields' must map dotted paths"),
        ({"type": "json", "fields": {"": 1}}, "case 'bad': check (json): 'fields' must map dotted paths"),
    ],
    ids=str,
)
def test_json_bad_schema_or_fields(tmp_path, raw, message):
    assert refused(tmp_path, raw).startswith(message)


# --- similar ----------------------------------------------------------------------------------------------------------


def fixed_similarity(value: float, seen: list | None = None):
    def similarity(a: str, b: str) -> float:
        if seen is not None:
            seen.append((a, b))
        return value

    return similarity


def test_similar_with_a_similarity_above_the_threshold():
    seen: list = []
    outcome = graded(
        {"type": "similar", "value": "Teal.", "threshold": 0.6},
        Graders(similarity=fixed_similarity(0.75, seen)),
        output="It is teal.",
    )
    assert_passed(outcome, score=0.75)
    assert seen == [("Teal.", "It is teal.")]


def test_similar_below_the_threshold_fails_with_its_similarity():
    outcome = graded({"type": "similar", "value": "Teal."}, Graders(similarity=fixed_similarity(0.5)))
    assert_failed(outcome, "similarity 0.50 below 0.8", score=0.5)  # the default threshold


def test_similar_a_negative_cosine_scores_0():
    outcome = graded({"type": "similar", "value": "Teal.", "threshold": 0}, Graders(similarity=fixed_similarity(-0.3)))
    assert_failed(outcome, "similarity -0.30 below 0", score=0.0)


def test_similar_without_an_embedding_model_is_an_error():
    outcome = graded({"type": "similar", "value": "Teal."}, NO_GRADERS)
    assert_failed(outcome, "no embedding model to compare with", error=True)
    assert outcome.as_dict()["error"] is True


def test_similar_without_an_answer():
    called: list = []
    outcome = graded(
        {"type": "similar", "value": "Teal."}, Graders(similarity=fixed_similarity(1, called)), output=None
    )
    assert_failed(outcome, "no final answer")
    assert called == []


# --- judge ------------------------------------------------------------------------------------------------------------


def fake_judge(result: Verdict | Exception, calls: list | None = None):
    def judge(rubric: str, task: str, answer: str, model: str | None) -> Verdict:
        if calls is not None:
            calls.append((rubric, task, answer, model))
        if isinstance(result, Exception):
            raise result
        return result

    return judge


def test_judge_passes_on_its_verdict_and_counts_its_cost():
    calls: list = []
    raw = {"type": "judge", "rubric": "Polite.", "model": "openai/gpt-4o-mini"}
    graders = Graders(judge=fake_judge(Verdict(0.8, "polite enough", cost_nanos=1234), calls))
    outcome = graded(raw, graders, output="Thank you!", input="Say thanks.")
    assert_passed(outcome, score=0.8)
    assert outcome.cost_nanos == 1234
    assert calls == [("Polite.", "Say thanks.", "Thank you!", "openai/gpt-4o-mini")]
    assert outcome.as_dict() == {
        "type": "judge", "passed": True, "score": 0.8, "reason": "", "weight": 1.0, "cost_nanos": 1234,
    }  # fmt: skip


def test_judge_without_a_model_leaves_the_choice_to_the_judge():
    calls: list = []
    graded({"type": "judge", "rubric": "Polite."}, Graders(judge=fake_judge(Verdict(1, ""), calls)))
    assert calls[0][3] is None


def test_judge_below_its_threshold_fails_with_the_judges_reason():
    raw = {"type": "judge", "rubric": "Polite.", "threshold": 0.7}
    outcome = graded(raw, Graders(judge=fake_judge(Verdict(0.3, "curt", cost_nanos=5))))
    assert_failed(outcome, "judged 0.30 (below 0.7): curt", score=0.3)
    assert outcome.cost_nanos == 5


def test_judge_at_its_threshold_passes():
    assert_passed(graded({"type": "judge", "rubric": "r"}, Graders(judge=fake_judge(Verdict(0.5, "")))), score=0.5)


def test_a_judge_error_is_an_error_never_a_pass():
    graders = Graders(judge=fake_judge(JudgeError("the judge run 7 answered no JSON verdict", cost_nanos=99)))
    outcome = graded({"type": "judge", "rubric": "r", "threshold": 0}, graders)
    assert_failed(outcome, "judge error: the judge run 7 answered no JSON verdict", error=True)
    assert outcome.cost_nanos == 99  # what the failed judging cost still counts
    assert outcome.as_dict()["error"] is True and outcome.as_dict()["cost_nanos"] == 99


def test_judge_without_a_judge_is_an_error():
    assert_failed(graded({"type": "judge", "rubric": "r"}), "no judge model", error=True)


def test_judge_without_an_answer_calls_no_judge():
    calls: list = []
    outcome = graded({"type": "judge", "rubric": "r"}, Graders(judge=fake_judge(Verdict(1, ""), calls)), output=None)
    assert_failed(outcome, "no final answer")
    assert calls == []


@pytest.mark.parametrize("model", ["gpt-4o-mini", "openai/", "/gpt", "open ai/gpt", 3])
def test_judge_model_must_be_provider_slash_model(tmp_path, model):
    message = refused(tmp_path, {"type": "judge", "rubric": "r", "model": model})
    assert message.startswith("case 'bad': check (judge): 'model' must be \"provider/model\"")


# --- tools ------------------------------------------------------------------------------------------------------------

MADE = (
    ToolUse("calculator", {"expression": "12*7"}),
    ToolUse("calculator", {"expression": "84+1"}),
    ToolUse("search", {"query": "teal", "options": {"lang": "en", "safe": True, "sites": ["a", "b"]}}),
)


def tools(**raw) -> Outcome:
    return graded({"type": "tools", **raw}, tool_calls=MADE)


def calc(expression: str | None = None) -> dict:
    return {"name": "calculator", **({"arguments": {"expression": expression}} if expression else {})}


def test_tools_in_order_is_the_default_and_a_subsequence_with_argument_subsets():
    assert_passed(tools(calls=[calc("12*7"), {"name": "search"}]))
    assert_passed(tools(calls=[calc(), calc()]))
    assert_passed(tools(calls=[calc("84+1")]))  # calls between and around are allowed


def test_tools_in_order_fails_out_of_order_with_a_partial_score():
    outcome = tools(calls=[{"name": "search"}, calc("12*7")])
    reason = (
        "no call [calculator] in order after [calculator, calculator, search] among [calculator, calculator, search]"
    )
    assert_failed(outcome, reason, score=0.5)


def test_tools_in_order_a_wrong_argument_does_not_match():
    outcome = tools(calls=[calc("12*7"), calc("1+1")])
    assert_failed(
        outcome, "no call [calculator] in order after [calculator] among [calculator, calculator, search]", 0.5
    )


def test_tools_arguments_are_a_nested_subset():
    assert_passed(tools(calls=[{"name": "search", "arguments": {"options": {"lang": "en"}}}]))
    assert_passed(tools(calls=[{"name": "search", "arguments": {"options": {"sites": ["a", "b"]}, "query": "teal"}}]))
    for arguments in (
        {"options": {"lang": "fr"}},
        {"options": {"colour": "en"}},
        {"options": "en"},
        {"options": {"sites": ["a"]}},  # a list is compared whole
        {"query": {"text": "teal"}},
    ):
        outcome = tools(calls=[{"name": "search", "arguments": arguments}])
        assert not outcome.passed and outcome.score == 0, arguments


def test_tools_exact_needs_the_same_calls_in_the_same_order():
    assert_passed(tools(calls=[calc("12*7"), calc(), {"name": "search"}], order="exact"))
    outcome = tools(calls=[calc(), {"name": "search"}, calc()], order="exact")
    assert_failed(
        outcome, "calls were [calculator, calculator, search], expected exactly [calculator, search, calculator]", 1 / 3
    )


def test_tools_exact_fails_on_a_call_more_than_expected():
    outcome = tools(calls=[calc("12*7"), calc("84+1")], order="exact")
    assert not outcome.passed
    assert outcome.reason == "calls were [calculator, calculator, search], expected exactly [calculator, calculator]"
    assert outcome.score < 1  # a failing check never scores as a pass


def test_tools_exact_fails_on_a_call_fewer_than_expected():
    outcome = tools(calls=[calc(), calc(), {"name": "search"}, {"name": "recall"}], order="exact")
    assert not outcome.passed and outcome.score == pytest.approx(0.75)
    assert outcome.reason.endswith("expected exactly [calculator, calculator, search, recall]")


def test_tools_any_order_each_made_call_matching_one_expected():
    assert_passed(tools(calls=[{"name": "search"}, calc("84+1"), calc("12*7")], order="any"))
    outcome = tools(calls=[calc(), calc(), calc()], order="any")  # only two calculator calls were made
    assert_failed(outcome, "no call [calculator] among [calculator, calculator, search]", score=2 / 3)
    outcome = tools(calls=[{"name": "recall"}, calc("1+1")], order="any")
    assert_failed(outcome, "no call [recall, calculator] among [calculator, calculator, search]")


def test_tools_forbid():
    assert_passed(tools(forbid=["recall", "remember"]))
    assert_failed(tools(forbid=["search", "recall"]), "called forbidden search")
    assert_failed(tools(calls=[calc()], forbid=["search"]), "called forbidden search")  # the calls matched, yet 0


def test_tools_max_calls():
    assert_passed(tools(max_calls=3))
    assert_failed(tools(max_calls=2), "3 calls (at most 2)")
    assert_passed(graded({"type": "tools", "max_calls": 0}, tool_calls=()))


def test_tools_every_problem_in_the_reason():
    outcome = tools(calls=[{"name": "recall"}], forbid=["search"], max_calls=1)
    assert_failed(
        outcome,
        "no call [recall] in order after [] among [calculator, calculator, search]; called forbidden search; "
        "3 calls (at most 1)",
    )


def test_tools_grades_a_run_without_an_answer_too():
    assert_passed(graded({"type": "tools", "calls": [calc()]}, output=None, tool_calls=MADE))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"calls": {"name": "calculator"}}, "'calls' must be a list of {name, arguments?}."),
        ({"calls": [{"arguments": {}}]}, "calls[1] needs a 'name'."),
        ({"calls": [calc(), {"name": ""}]}, "calls[2] needs a 'name'."),
        ({"calls": [{"name": "calculator", "args": {}}]}, "calls[1] takes a 'name' and an 'arguments' mapping"),
        ({"calls": [{"name": "calculator", "arguments": "12*7"}]}, "calls[1] takes a 'name' and an 'arguments'"),
        ({"forbid": "search"}, "'forbid' must be a list of tool names."),
        ({"max_calls": -1}, "'max_calls' must be a whole number from 0."),
        ({"max_calls": True}, "'max_calls' must be a whole number from 0."),
        ({}, "give 'calls', 'forbid' or 'max_calls'."),
        ({"calls": [], "order": "any"}, "give 'calls', 'forbid' or 'max_calls'."),
    ],
    ids=str,
)
def test_tools_bad_configurations(tmp_path, raw, message):
    assert refused(tmp_path, {"type": "tools", **raw}).startswith("case 'bad': check (tools): " + message)


# --- cost, latency, turns -------------------------------------------------------------------------------------------


def test_cost_within_and_over_its_max():
    raw = {"type": "cost", "max": "0.01"}
    assert_passed(graded(raw, cost_nanos=0))
    assert_passed(graded(raw, cost_nanos=10_000_000))  # exactly the max
    assert_failed(graded(raw, cost_nanos=10_000_001), "cost 0.010000001 above 0.01")
    assert_failed(graded(raw, cost_nanos=20_000_000), "cost 0.02 above 0.01")


def test_cost_unknown_fails():
    assert_failed(
        graded({"type": "cost", "max": "100"}, cost_nanos=None),
        "its cost is unknown (no price for its model: AGENT_PRICES)",
    )


def test_cost_max_as_a_yaml_number_or_zero():
    assert_passed(graded({"type": "cost", "max": 0.5}, cost_nanos=500_000_000))
    assert_failed(graded({"type": "cost", "max": 0}, cost_nanos=1), "cost 0.000000001 above 0")
    assert_passed(graded({"type": "cost", "max": 0}, cost_nanos=0))


@pytest.mark.parametrize("value", [-1, "-0.5", True, "NaN", "Infinity", [1]], ids=str)
def test_cost_bad_max(tmp_path, value):
    assert refused(tmp_path, {"type": "cost", "max": value}).startswith(
        "case 'bad': check (cost): 'max' must be an amount"
    )


def test_latency():
    raw = {"type": "latency", "max_ms": 1000}
    assert_passed(graded(raw, latency_ms=1000.0))
    assert_failed(graded(raw, latency_ms=1500.4), "took 1500 ms (at most 1000)")
    assert_passed(graded(raw, output=None, latency_ms=3.0))  # what the run did, answer or not


@pytest.mark.parametrize("value", [-1, True, "1s"], ids=str)
def test_latency_bad_max_ms(tmp_path, value):
    assert refused(tmp_path, {"type": "latency", "max_ms": value}).startswith("case 'bad': check (latency): 'max_ms'")


def test_turns():
    assert_passed(graded({"type": "turns", "max": 3}, turns=3))
    assert_failed(graded({"type": "turns", "max": 3}, turns=4), "4 turns (at most 3)")
    assert_passed(graded({"type": "turns", "max": 0}, turns=0))


@pytest.mark.parametrize("value", [-1, True, "3", 2.0], ids=str)
def test_turns_bad_max(tmp_path, value):
    assert refused(tmp_path, {"type": "turns", "max": value}).startswith("case 'bad': check (turns): 'max' must be")


# --- weights and pass_score -----------------------------------------------------------------------------------------

JUDGED = {"type": "judge", "rubric": 'The answer is "1000".', "weight": 3}
CONTAINS = {"type": "contains", "value": "thousand"}


def case_with(tmp_path, checks: list[dict], **fields):
    (case,) = load_cases(write(tmp_path, [{"id": "w", "input": "What is 2^10, minus 24?", "checks": checks, **fields}]))
    return case


def test_a_case_passes_on_its_weighted_score_though_one_check_fails(tmp_path):
    case = case_with(tmp_path, [JUDGED, CONTAINS], pass_score=0.75)
    assert case.pass_score == 0.75 and [c.weight for c in case.checks] == [3.0, 1.0]
    result = case.grade(Evidence(output="1000"), Graders(judge=fake_judge(Verdict(1.0, "right", cost_nanos=40))))
    assert (result.passed, result.score, result.reason) == (True, 0.75, "")
    assert [(o.type, o.passed) for o in result.outcomes] == [("judge", True), ("contains", False)]
    assert result.cost_nanos == 40


def test_below_pass_score_the_reason_gives_the_score_and_the_first_failure(tmp_path):
    case = case_with(tmp_path, [JUDGED, CONTAINS], pass_score=0.8)
    result = case.grade(Evidence(output="1000"), Graders(judge=fake_judge(Verdict(1.0, "right"))))
    assert (result.passed, result.reason) == (False, "score 0.75 below pass_score 0.8 (missing 'thousand')")
    assert result.score == pytest.approx(0.75)


def test_without_pass_score_every_check_must_pass(tmp_path):
    case = case_with(tmp_path, [JUDGED, CONTAINS])
    result = case.grade(Evidence(output="1000"), Graders(judge=fake_judge(Verdict(1.0, "right"))))
    assert (result.passed, result.reason) == (False, "missing 'thousand'")
    assert result.score == pytest.approx(0.75)


def test_passing_checks_with_partial_scores_can_still_miss_pass_score(tmp_path):
    case = case_with(tmp_path, [{"type": "judge", "rubric": "r", "threshold": 0.5}], pass_score=0.9)
    result = case.grade(Evidence(output="x"), Graders(judge=fake_judge(Verdict(0.6, "so so"))))
    assert (result.passed, result.reason) == (False, "score 0.60 below pass_score 0.9")


def test_a_judge_error_never_counts_as_a_pass_even_above_pass_score(tmp_path):
    checks = [{"type": "contains", "value": "1000", "weight": 10}, {"type": "judge", "rubric": "r"}]
    case = case_with(tmp_path, checks, pass_score=0.5)
    graders = Graders(judge=fake_judge(JudgeError("the judge run 9 stopped: max_turns", cost_nanos=3)))
    result = case.grade(Evidence(output="1000"), graders)
    assert result.score == pytest.approx(10 / 11) and result.score > 0.5
    assert (result.passed, result.reason) == (False, "judge error: the judge run 9 stopped: max_turns")
    assert result.outcomes[1].error and result.cost_nanos == 3

    case_with_zero = case_with(tmp_path, checks, pass_score=0)
    assert not case_with_zero.grade(Evidence(output="1000"), graders).passed


def test_an_error_of_the_similarity_is_never_a_pass_either():
    checks = [check({"type": "turns", "max": 5, "weight": 100}), check({"type": "similar", "value": "x"})]
    result = grade(checks, Evidence(output="x", turns=1), NO_GRADERS, pass_score=0.1)
    assert (result.passed, result.reason) == (False, "no embedding model to compare with")


def test_the_score_of_an_outcome_is_rounded_in_its_dict():
    outcome = graded({"type": "similar", "value": "v", "threshold": 0}, Graders(similarity=fixed_similarity(1 / 3)))
    assert outcome.as_dict() == {"type": "similar", "passed": True, "score": 0.3333, "reason": "", "weight": 1.0}


def test_the_reasons_are_single_lines():
    outcome = graded({"type": "numeric", "value": 1}, output="line one\nline two\n" + "z" * 300)
    assert "\n" not in outcome.reason and len(outcome.reason) < 200
    assert re.fullmatch(r"expected a number within 1e-09 of 1, got '.*…'", outcome.reason)
