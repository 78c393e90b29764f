"""Tests for the calculator tool: results, escape payloads, bounds, properties and registration."""

import builtins
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.tools.calculator import MAX_DIGITS, CalculatorError, evaluate, format_result, run_calculator
from agents.tools.registry import ToolContext, ToolError, registry


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("-3 + 5", 2),
        ("-(2 + 3) * +2", -10),
        ("2^10", 1024),
        ("1 + 2^2", 5),
        ("2 * 3^2", 18),
        ("2^3^2", 512),
        ("-2^2", -4),
        ("2**-1", 0.5),
        ("7 // 2", 3),
        ("-7 // 2", -4),
        ("7 % 3", 1),
        ("7 / 2", 3.5),
        ("sqrt(16) + abs(-3)", 7.0),
        ("max(1, 5, 3) - min(4, 2)", 3),
        ("floor(2.7) + ceil(2.1)", 5),
        ("round(2.567, 2)", 2.57),
        ("log10(1000)", 3.0),
        ("log(8, 2)", 3.0),
        ("exp(0) + cos(0) + sin(0) + tan(0)", 2.0),
        ("2 * pi", math.tau),
        ("e", math.e),
        ("１２＊７", 84),
        ("10**300 * 10**300 * 10**300", 10**900),
        ("(((((((((1)))))))))", 1),
    ],
)
def test_correct_results(expression: str, expected: float) -> None:
    result = evaluate(expression)
    assert result == pytest.approx(expected)
    assert type(result) in (int, float)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("12*7", "84"),
        ("1/2", "0.5"),
        ("85.0", "85"),
        ("170/2", "85"),
        ("0.1+0.2", "0.30000000000000004"),
        ("-0.0", "0"),
    ],
)
def test_tool_output_formatting(expression: str, expected: str) -> None:
    assert run_calculator({"expression": expression}, ToolContext()) == expected


def test_format_result() -> None:
    assert format_result(84) == "84"
    assert format_result(85.0) == "85"
    assert format_result(0.5) == "0.5"
    assert format_result(1e20) == "1e+20"


PAYLOADS = [
    "().__class__.__base__.__subclasses__()",
    "__import__('os').system('echo hi')",
    "lambda: 1",
    "(lambda: 1)()",
    "[x for x in range(3)]",
    "{1: 2}",
    "{1, 2}",
    "(1, 2)",
    "x",
    "__builtins__",
    "'abc'",
    "f'{1}'",
    "'{}'.format(1)",
    "(y := 3)",
    "ｅｖａｌ('1')",
    "ｅｖａｌ（'1'）",
    "1<<10**9",
    "1 >> 1",
    "1 | 2",
    "1 & 2",
    "~1",
    "not 1",
    "1 and 2",
    "'a'*10**9",
    '"-"*100000+"1"',
    "-" * 100000 + "1",
    '"1+"*1000000+"1"',
    "1+" * 1000000 + "1",
    "1" * 501,
    "1\x00+1",
    "1\x07",
    "1\u200b000",
    "1\ufeff+1",
    "2\u00b2",
    "1 \\\n+ 1",
    "9**9**9**9",
    "10**10**10",
    "2**1001",
    "10**999 * 10",
    "10**300*10**300*10**300*10**300",
    "(" * 500 + "1" + ")" * 500,
    "(" * 240 + "1" + ")" * 240,
    "-" * 400 + "1",
    "-(" * 120 + "1" + ")" * 120,
    "1e999",
    "1e301",
    "exp(1000)",
    "10.0**400",
    "(-8)**0.5",
    "sqrt(-1)",
    "log(0)",
    "1/0",
    "1//0",
    "1%0",
    "0**-1",
    "True+1",
    "None",
    "open('x')",
    "exec('1')",
    "eval('1')",
    "getattr(1,'real')",
    "globals()",
    "1 if 1 else 2",
    "1 < 2",
    "[1][0]",
    "(1)[0:1]",
    "*a",
    "abs(*[1])",
    "1j",
    "b'1'",
    "...",
    "abs(x=1)",
    "round(1.5, ndigits=1)",
    "max(1, 2, key=abs)",
    "abs(**{})",
    "round(1, -10**100)",
    "round(1, 0.5)",
    "sqrt",
    "sqrt(1, 2)",
    "min()",
    "sqrt.__self__",
    "1 @ 2",
    "await 1",
    "",
    "   ",
    "1 +",
    "0x",
    "1if 1 else 2",
    12,
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: repr(p)[:40])
def test_payload_is_rejected(payload: str) -> None:
    with pytest.raises(CalculatorError) as info:
        evaluate(payload)
    assert str(info.value).strip()
    assert isinstance(info.value, ToolError)


def test_all_payloads_complete() -> None:
    """The whole list runs in one go; bounds, not a timer, keep it fast (it would hang otherwise)."""
    errors = []
    for payload in PAYLOADS * 3:
        with pytest.raises(CalculatorError) as info:
            evaluate(payload)
        errors.append(str(info.value))
    assert all(errors)


def test_payloads_have_no_side_effects(tmp_path) -> None:
    marker = tmp_path / "pwned"
    payloads = [
        f"__import__('os').system('touch {marker}')",
        f"open('{marker}', 'w').write('x')",
        f"ｏｐｅｎ('{marker}', 'w')",
        "__import__('builtins').__dict__.__setitem__('calc_pwned', 1)",
        "globals().__setitem__('calc_pwned', 1)",
        "(calc_pwned := 1)",
        "exec('import builtins; builtins.calc_pwned = 1')",
    ]
    for payload in payloads:
        with pytest.raises(CalculatorError):
            evaluate(payload)
    assert not marker.exists()
    assert not hasattr(builtins, "calc_pwned")
    assert "calc_pwned" not in globals()


@pytest.mark.parametrize(
    ("payload", "fragment"),
    [
        ("1/0", "division by zero"),
        ("x", "'x'"),
        ("open('x')", "'open'"),
        ("abs(x=1)", "keyword"),
        ("1 < 2", "comparison"),
        ("'abc'", "str"),
        ("9**9**9**9", "exponent"),
        ("1" * 501, "too long"),
        ("1\u200b000", "U+200B"),
        ("1\x00", "U+0000"),
        ("().__class__", "attribute"),
    ],
)
def test_error_messages_name_the_problem(payload: str, fragment: str) -> None:
    with pytest.raises(CalculatorError) as info:
        evaluate(payload)
    assert fragment in str(info.value)


def test_tool_rejects_non_string_argument() -> None:
    with pytest.raises(CalculatorError):
        run_calculator({"expression": 12}, ToolContext())
    with pytest.raises(CalculatorError):
        run_calculator({}, ToolContext())


def _assert_finite_or_calculator_error(expression: str) -> None:
    try:
        result = evaluate(expression)
    except CalculatorError as exc:
        assert str(exc)
    else:
        assert type(result) in (int, float)
        # ints are exact up to MAX_DIGITS digits (4^883 is fine, and too large for a float); floats must be finite
        assert len(str(abs(result))) <= MAX_DIGITS if type(result) is int else math.isfinite(result)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_property_arbitrary_text(expression: str) -> None:
    _assert_finite_or_calculator_error(expression)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="0123456789+-*/%^(). e", max_size=200))
def test_property_arithmetic_alphabet(expression: str) -> None:
    _assert_finite_or_calculator_error(expression)


def test_tool_is_registered() -> None:
    tool = registry.get("calculator")
    assert tool is not None
    assert tool.parameters["required"] == ["expression"]
    assert tool.parameters["properties"]["expression"]["type"] == "string"
    assert tool.parameters["additionalProperties"] is False
    assert tool.sensitive is False
    assert tool.timeout_s == 2.0
    assert tool({"expression": "12*7"}, ToolContext()) == "84"
    assert tool.describe()["name"] == "calculator"
