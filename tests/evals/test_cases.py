"""Eval cases as data: loading, validation and the output checks (pure Python, no database)."""

from __future__ import annotations

import json

import pytest

from agents.evals.cases import CHECK_TYPES, Case, CaseError, check_output, first_number, load_cases


def case(check: dict, **fields) -> Case:
    return Case(id="c", input="q", check=check, **fields)


def write(tmp_path, content, name: str = "cases.yaml"):
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
    return path


def minimal(**fields) -> dict:
    return {"id": "one", "input": "What is 1+1?", "check": {"type": "numeric", "value": 2}, **fields}


# --- the repo's cases ------------------------------------------------------------------------------------------


def test_the_repo_cases_load_with_unique_ids_and_every_check_type():
    cases = load_cases()
    ids = [c.id for c in cases]
    assert len(cases) >= 25
    assert len(ids) == len(set(ids))
    assert {check.type for c in cases for check in c.checks} == set(CHECK_TYPES)
    assert any(len(c.checks) > 1 for c in cases) and any(c.pass_score is not None for c in cases)
    assert any(c.not_contains for c in cases)
    assert any(c.max_errors is not None for c in cases)
    assert any(c.setup for c in cases)
    assert any(c.protocols == ("react",) for c in cases)


def test_defaults_of_a_case(tmp_path):
    (loaded,) = load_cases(write(tmp_path, [minimal()]))
    assert loaded == Case(id="one", input="What is 1+1?", check={"type": "numeric", "value": 2})
    assert (loaded.protocols, loaded.max_turns, loaded.timeout_s, loaded.tools) == (("tools", "react"), 8, 60.0, None)


def test_only_is_a_glob():
    ids = [c.id for c in load_cases(only="arith-chain*")]
    assert ids == ["arith-chain-plus", "arith-chain-times"]
    assert all(c.id.startswith("arith-") for c in load_cases(only="arith-*"))
    assert [c.id for c in load_cases(only="memory-?ity")] == ["memory-city"]


def test_only_without_glob_characters_is_a_substring():
    ids = [c.id for c in load_cases(only="memory")]
    assert "memory-city" in ids and "react-format-memory" in ids
    assert all("memory" in i for i in ids)


def test_only_matching_nothing_gives_an_empty_list():
    assert load_cases(only="no-such-case*") == []


# --- malformed files -------------------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(CaseError, match="Cannot read cases file"):
        load_cases(tmp_path / "nope.yaml")


def test_invalid_yaml(tmp_path):
    with pytest.raises(CaseError, match="not valid YAML"):
        load_cases(write(tmp_path, "- id: [unclosed\n"))


@pytest.mark.parametrize("content", ['{"id": "x"}', "just text", "", "[]"])
def test_not_a_non_empty_list(tmp_path, content):
    with pytest.raises(CaseError, match="non-empty list"):
        load_cases(write(tmp_path, content))


def test_an_item_that_is_not_a_mapping(tmp_path):
    with pytest.raises(CaseError, match="case #2 must be a mapping"):
        load_cases(write(tmp_path, [minimal(), "oops"]))


@pytest.mark.parametrize("key", ["id", "input", "check"])
def test_a_required_key_missing(tmp_path, key):
    item = minimal()
    del item[key]
    with pytest.raises(CaseError, match=f"has no '{key}'"):
        load_cases(write(tmp_path, [item]))


@pytest.mark.parametrize(
    ("check", "message"),
    [
        ({"type": "fuzzy", "value": "x"}, "case 'one': check: check type must be one of exact, contains, regex"),
        ({"value": "x"}, "case 'one': check: check type must be one of .* not None"),
        ({"type": "exact"}, r"case 'one': check \(exact\): 'value' is required"),
        ("contains 2", "case 'one': check: a check must be a mapping with a type"),
        ({"type": "exact", "value": 1, "tolerance": 2}, r"check \(exact\): unknown field\(s\) tolerance; known: value"),
    ],
    ids=str,
)
def test_an_unknown_or_incomplete_check(tmp_path, check, message):
    with pytest.raises(CaseError, match=message):
        load_cases(write(tmp_path, [minimal(check=check)]))


def test_a_bad_protocol(tmp_path):
    with pytest.raises(CaseError, match="case 'one': protocols must be among tools, react"):
        load_cases(write(tmp_path, [minimal(protocols=["tools", "xml"])]))


def test_an_invalid_regex(tmp_path):
    with pytest.raises(CaseError, match="invalid regex"):
        load_cases(write(tmp_path, [minimal(check={"type": "regex", "value": "(unclosed"})]))


def test_a_regex_that_is_not_text(tmp_path):
    with pytest.raises(CaseError, match="invalid regex"):
        load_cases(write(tmp_path, [minimal(check={"type": "regex", "value": 42})]))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_turns": "two"}, "case 'one': max_turns and timeout_s must be numbers"),
        ({"timeout_s": [1]}, "case 'one': max_turns and timeout_s must be numbers"),
        ({"check": {"type": "numeric", "value": "eighty-five"}}, r"check \(numeric\): 'value' and 'tolerance' must"),
        ({"check": {"type": "numeric", "value": 85, "tolerance": "a bit"}}, r"\(numeric\): 'value' and 'tolerance'"),
    ],
    ids=str,
)
def test_numbers_that_are_not_numbers(tmp_path, fields, message):
    with pytest.raises(CaseError, match=message):
        load_cases(write(tmp_path, [minimal(**fields)]))


def test_duplicate_ids(tmp_path):
    items = [minimal(), minimal(id="two"), minimal(), minimal(id="two"), minimal(id="three")]
    with pytest.raises(CaseError, match="Duplicate case ids: one, two"):
        load_cases(write(tmp_path, items))


def test_json_files_work_too(tmp_path):
    items = [minimal(), minimal(id="two", protocols=["react"], max_turns=3, not_contains=["x"], max_errors=0)]
    loaded = load_cases(write(tmp_path, items, "cases.json"))
    assert [c.id for c in loaded] == ["one", "two"]
    assert (loaded[1].protocols, loaded[1].max_turns, loaded[1].not_contains, loaded[1].max_errors) == (
        ("react",),
        3,
        ("x",),
        0,
    )


# --- checks ----------------------------------------------------------------------------------------------------


def test_exact():
    check = {"type": "exact", "value": "2"}
    assert check_output(case(check), " 2\n") is None
    assert check_output(case(check), "2.0") == "expected exactly '2', got '2.0'"
    assert check_output(case({"type": "exact", "value": 2}), "2") is None  # YAML numbers compare as text


def test_contains():
    check = {"type": "contains", "value": "Paris"}
    assert check_output(case(check), "It is Paris.") is None
    assert check_output(case(check), "It is paris.") == "missing 'Paris'"
    assert check_output(case({**check, "ignore_case": True}), "It is PARIS.") is None


def test_contains_a_list_needs_every_value():
    check = {"type": "contains", "value": ["Rex", "Tom"]}
    assert check_output(case(check), "Rex and Tom") is None
    assert check_output(case(check), "only Rex") == "missing 'Tom'"


def test_regex():
    check = {"type": "regex", "value": r"\bRex\b"}
    assert check_output(case(check), "Your dog is Rex.") is None
    assert check_output(case(check), "Your dog is Rexy.") == r"does not match /\bRex\b/"


def test_numeric():
    check = {"type": "numeric", "value": 85}
    assert check_output(case(check), "85") is None
    assert check_output(case(check), "The answer is 85.0.") is None
    assert check_output(case(check), "86") == "expected a number within 1e-09 of 85, got '86'"
    assert check_output(case(check), "no number here") == "expected a number within 1e-09 of 85, got 'no number here'"


def test_numeric_with_tolerance():
    check = {"type": "numeric", "value": 3.142857, "tolerance": 0.001}
    assert check_output(case(check), "about 3.1428571428571428") is None
    assert check_output(case(check), "3.1425") is None
    assert check_output(case(check), "3.14") == "expected a number within 0.001 of 3.142857, got '3.14'"


def test_numeric_with_thousands_separators():
    assert check_output(case({"type": "numeric", "value": 1234567}), "It is 1,234,567.") is None
    assert first_number("-1,000.5 left") == -1000.5


def test_numeric_negative():
    check = {"type": "numeric", "value": -3.5}
    assert check_output(case(check), "-3.5") is None
    assert check_output(case(check), "\u22123.5") is None  # a typographic minus
    assert check_output(case(check), "3.5") is not None


def test_first_number():
    assert first_number("12*7 is 84") == 12  # the first number in the text
    assert first_number("about 1.5e3 things") == 1500.0
    assert first_number("x") is None


def test_not_contains_is_case_insensitive():
    c = case({"type": "regex", "value": "cannot"}, not_contains=("infinity",))
    assert check_output(c, "I cannot divide by zero.") is None
    assert check_output(c, "I cannot: it is Infinity.") == "output contains 'infinity'"


def test_not_contains_is_checked_after_the_check():
    c = case({"type": "contains", "value": "4321"}, not_contains=("PWNED",))
    assert check_output(c, "PWNED") == "missing '4321'"


def test_max_errors():
    c = case({"type": "numeric", "value": 150}, max_errors=0)
    assert check_output(c, "150") is None
    assert check_output(c, "150", error_steps=0) is None
    assert check_output(c, "150", error_steps=1) == "1 unusable replies (at most 0 allowed)"
    assert check_output(case({"type": "numeric", "value": 150}), "150", error_steps=5) is None  # no limit set


def test_no_final_answer():
    assert check_output(case({"type": "contains", "value": "x"}), None) == "no final answer"
