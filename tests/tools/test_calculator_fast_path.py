"""The calculator's fast path (tokens, no Python AST) answers as the AST walk would, or leaves it to the walk."""

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agents.tools.calculator import (
    CONSTANTS,
    FUNCTIONS,
    MAX_DEPTH,
    CalculatorError,
    _compute,
    _fast_value,
    _normalise,
    _parse,
    evaluate,
)


def walk(expression: str) -> int | float:
    """The AST walk alone: evaluate() as it was before the fast path."""
    return _compute(_parse(_normalise(expression)))


def outcome(evaluator: Callable[[str], int | float], expression: str) -> tuple[str, str]:
    try:
        value = evaluator(expression)
    except CalculatorError as exc:
        return ("error", str(exc))
    return (type(value).__name__, repr(value))


def assert_same_as_walk(expression: str) -> None:
    assert outcome(evaluate, expression) == outcome(walk, expression), expression


TRICKY = [
    # literals Python reads in its own ways
    "0",
    "00",
    "007",
    "0.5",
    "00.5",
    "01.5",
    "01e5",
    "0e5",
    ".5",
    "5.",
    "5.e3",
    "1e3",
    "1E-3",
    "2.5e+2",
    "1e999",
    "1e308*10",
    "1_000",
    "0x10",
    "0b1",
    "1j",
    "2e",
    "2 e",
    "2e+",
    "1..2",
    "1.5.5",
    "1 .5",
    "1.__class__",
    # precedence and associativity
    "-2**2",
    "2**-1",
    "2**3**2",
    "2^3^2",
    "2*-3**2",
    "(-2)**2",
    "-(2)**2",
    "2**-2**2",
    "-2*3",
    "2 * 3 ** -1 * 4",
    "+--+-3",
    "7//-2",
    "-7%3",
    "7.5//2",
    "1-2-3",
    "2/3/4",
    "2*7//2",
    "2*5%3",
    "7-2+3",
    "10*3/7*7",
    "0.1*3*7",
    "2**2*3",
    "2*3**2*2",
    "-2**2*3",
    "2**0.5",
    # names and calls
    "e**2",
    "e*e",
    "tau/2",
    "pi(2)",
    "sqrt",
    "sqrt (4)",
    "sqrt(4)(2)",
    "max(1,2,)",
    "max(1, 2, 3)",
    "min()",
    "log(8, 2)",
    "log(1, 2, 3)",
    "round(2.5)",
    "round(2.567, 2)",
    "round(1, 1001)",
    "round(1, 0.5)",
    "abs(-3) + floor(2.7) + ceil(2.1)",
    "2(3)",
    "(2)(3)",
    "x",
    "1if 1 else 2",
    # errors the walk words
    "1/0",
    "1%0.0",
    "0**-1",
    "0**0",
    "(-8)**(1/3)",
    "sqrt(-1)",
    "log(0)",
    "10**999*10",
    "2**1001",
    "9**9**9**9",
    "10.0**400",
    "exp(1000)",
    # whitespace and layout
    " 1",
    "1 ",
    "1\t+1",
    "(1\n+2)",
    "1 # comment",
    "1 +",
    "()",
    "(1",
    "1)",
    "2***3",
    "2///3",
    "2* *3",
    # the depth bound: 99 tokens are within it and take the fast path, 100 go to the walk
    "-" * (MAX_DEPTH - 2) + "1",
    "-" * (MAX_DEPTH - 1) + "1",
    "-" * MAX_DEPTH + "1",
    "(" * 49 + "1" + ")" * 49,
    "(" * 120 + "1" + ")" * 120,
    "1+" * 49 + "1",
    "1+" * 60 + "1",
]


@pytest.mark.parametrize("expression", TRICKY)
def test_tricky_expressions_match_the_ast_walk(expression: str) -> None:
    assert_same_as_walk(expression)


@pytest.mark.parametrize(
    "expression",
    [
        "(12*7+1)/5 - 2**3",
        "12*7",
        "84+1",
        "sqrt(16) + abs(-3)",
        "max(1, 5, 3) - min(4, 2)",
        "2 * pi",
        "-2^2",
        "1.5e3/7",
    ],
)
def test_plain_arithmetic_takes_the_fast_path(expression: str) -> None:
    value, expected = _fast_value(_normalise(expression)), walk(expression)
    assert (type(value), value) == (type(expected), expected)


@pytest.mark.parametrize(
    "expression",
    [" 1", "00", "1_000", "sqrt", "pi(2)", "max(1, 2,)", "1/0", "2**1001", "1\t+1", "-" * (MAX_DEPTH - 1) + "1"],
)
def test_anything_unusual_is_left_to_the_ast_walk(expression: str) -> None:
    assert _fast_value(_normalise(expression)) is None


NUMBERS = ["0", "1", "2", "3", "7", "12", "00", "007", "0.5", ".5", "5.", "1e3", "1E-3", "2.5e+2", "1e999", "999999999"]
OPERATORS = ["+", "-", "*", "/", "//", "%", "**", "^", " + ", " - ", " * ", " ** ", " // "]
SIGNS = ["-", "+", " -", "- "]


def _combine(children: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    calls = st.tuples(st.sampled_from(sorted(FUNCTIONS)), st.lists(children, max_size=3))
    return (
        st.tuples(children, st.sampled_from(OPERATORS), children).map("".join)
        | children.map(lambda inner: f"({inner})")
        | st.tuples(st.sampled_from(SIGNS), children).map("".join)
        | calls.map(lambda call: f"{call[0]}({', '.join(call[1])})")
    )


EXPRESSIONS = st.recursive(st.sampled_from(NUMBERS + sorted(CONSTANTS)), _combine, max_leaves=25)
TOKEN_SOUP = st.lists(
    st.sampled_from([*NUMBERS, *OPERATORS, *sorted(CONSTANTS), *sorted(FUNCTIONS), "(", ")", ",", " ", ".", "x", "j"]),
    max_size=30,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(EXPRESSIONS)
def test_property_generated_arithmetic_matches_the_ast_walk(expression: str) -> None:
    assert_same_as_walk(expression)


@settings(max_examples=400, deadline=None)
@given(TOKEN_SOUP)
def test_property_token_soup_matches_the_ast_walk(expression: str) -> None:
    assert_same_as_walk(expression)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789+-*/%^(). e,", max_size=60))
def test_property_arithmetic_alphabet_matches_the_ast_walk(expression: str) -> None:
    assert_same_as_walk(expression)
