"""A safe arithmetic calculator tool: a whitelisted AST walk with bounds checked before any work."""

from __future__ import annotations

import ast
import math
import operator
import unicodedata
import warnings
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

from agents.tools.registry import Tool, ToolContext, ToolError, registry

Number = int | float

MAX_LENGTH = 500  # characters, checked before normalising and again after
MAX_DEPTH = 100  # AST nesting depth (parentheses alone add no depth)
MAX_EXPONENT = 1000  # largest allowed |b| in a ** b, and |ndigits| in round()
MAX_DIGITS = 1000  # largest integer result, in decimal digits
MAX_FLOAT = 1e300  # largest float magnitude

_INT_LIMIT = 10**MAX_DIGITS
_WHITESPACE = frozenset("\t\n\r")

_BINOPS: MappingProxyType[type[ast.operator], Callable[[Any, Any], Any]] = MappingProxyType(
    {
        ast.Add: operator.add,
        ast.Sub: operator.sub,
        ast.Mult: operator.mul,
        ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod,
        ast.Pow: operator.pow,
    }
)

CONSTANTS: MappingProxyType[str, float] = MappingProxyType({"pi": math.pi, "e": math.e, "tau": math.tau})

_DESCRIPTIONS: MappingProxyType[type[ast.AST], str] = MappingProxyType(
    {
        ast.Attribute: "attribute access",
        ast.Subscript: "indexing/subscripts",
        ast.Slice: "slices",
        ast.Lambda: "lambda expressions",
        ast.ListComp: "comprehensions",
        ast.SetComp: "comprehensions",
        ast.DictComp: "comprehensions",
        ast.GeneratorExp: "generator expressions",
        ast.List: "lists",
        ast.Tuple: "tuples",
        ast.Dict: "dicts",
        ast.Set: "sets",
        ast.NamedExpr: "assignment expressions (:=)",
        ast.JoinedStr: "f-strings",
        ast.FormattedValue: "f-strings",
        ast.IfExp: "conditional expressions",
        ast.Compare: "comparisons",
        ast.BoolOp: "boolean operators (and/or)",
        ast.Starred: "argument unpacking (*)",
        ast.Await: "await",
        ast.Yield: "yield",
        ast.YieldFrom: "yield",
        ast.LShift: "the operator '<<'",
        ast.RShift: "the operator '>>'",
        ast.BitOr: "the operator '|'",
        ast.BitAnd: "the operator '&'",
        ast.MatMult: "the operator '@'",
        ast.Invert: "the operator '~'",
        ast.Not: "the operator 'not'",
    }
)


class CalculatorError(ToolError):
    """The expression is invalid, not allowed, or its result is out of bounds."""


def _round(value: Number, ndigits: Number | None = None) -> Number:
    """Built-in round() with ndigits bounded (round(1, -10**100) would build a huge power of ten)."""
    if ndigits is None:
        return round(value)
    if type(ndigits) is not int:
        raise CalculatorError("round(): the number of digits must be an integer")
    if abs(ndigits) > MAX_EXPONENT:
        raise CalculatorError(f"round(): the number of digits must be between -{MAX_EXPONENT} and {MAX_EXPONENT}")
    return round(value, ndigits)


def _min(*args: Number) -> Number:
    """min() over positional arguments."""
    return min(args)


def _max(*args: Number) -> Number:
    """max() over positional arguments."""
    return max(args)


FUNCTIONS: MappingProxyType[str, Callable[..., Number]] = MappingProxyType(
    {
        "sqrt": math.sqrt,
        "sin": math.sin,
        "cos": math.cos,
        "tan": math.tan,
        "log": math.log,
        "log10": math.log10,
        "exp": math.exp,
        "abs": abs,
        "round": _round,
        "floor": math.floor,
        "ceil": math.ceil,
        "min": _min,
        "max": _max,
    }
)

# (minimum, maximum) positional arguments; None means unbounded.
_ARITY: MappingProxyType[str, tuple[int, int | None]] = MappingProxyType(
    {"log": (1, 2), "round": (1, 2), "min": (1, None), "max": (1, None)}
)

_ALLOWED_NODES: tuple[type[ast.AST], ...] = (
    ast.Expression,
    ast.BinOp,
    ast.UnaryOp,
    ast.Call,
    ast.Name,
    ast.Constant,
    ast.Load,
    ast.UAdd,
    ast.USub,
    *_BINOPS,
)


def _describe(node: ast.AST) -> str:
    """A human-readable name for a disallowed AST node."""
    return _DESCRIPTIONS.get(type(node), f"'{type(node).__name__}' expressions")


def _check_characters(raw: str, text: str) -> None:
    """Reject super/subscripts in the raw input and anything but printable ASCII after normalising."""
    if raw.isascii() and raw.isprintable() and "\\" not in raw:
        return  # the common case: plain printable ASCII (NFKC leaves it unchanged)
    for ch in raw:
        if not ch.isascii() and unicodedata.decomposition(ch).startswith(("<super>", "<sub>")):
            raise CalculatorError(f"superscript/subscript character U+{ord(ch):04X} is not allowed; use ^ or **")
    for ch in text:
        if ch in _WHITESPACE or (" " <= ch <= "~" and ch != "\\"):
            continue
        category = unicodedata.category(ch)
        if category == "Cc":
            raise CalculatorError(f"control character U+{ord(ch):04X} is not allowed")
        if category == "Cf":
            raise CalculatorError(f"invisible formatting character U+{ord(ch):04X} (e.g. zero-width) is not allowed")
        raise CalculatorError(f"character U+{ord(ch):04X} ({ch!r}) is not allowed")


def _normalise(expression: object) -> str:
    """Check type and length, NFKC-normalise, check characters, and turn ^ into **."""
    if not isinstance(expression, str):
        raise CalculatorError("the expression must be a string")
    if len(expression) > MAX_LENGTH:
        raise CalculatorError(f"the expression is too long ({len(expression)} characters; max {MAX_LENGTH})")
    text = unicodedata.normalize("NFKC", expression)
    if len(text) > MAX_LENGTH:
        raise CalculatorError(f"the expression is too long after normalisation (max {MAX_LENGTH} characters)")
    _check_characters(expression, text)
    if not text.strip():
        raise CalculatorError("the expression is empty")
    # Textual replacement keeps ** precedence: 1+2^2 == 5, 2^3^2 == 512, -2^2 == -4.
    return text.replace("^", "**")


# The parser warns about things like "1if" (invalid decimal literal); silence it for our source name only
# (a process-wide filter keyed on the pseudo-file, so no thread-unsafe catch_warnings around each call).
_SOURCE = "<calculator>"
warnings.filterwarnings("ignore", category=SyntaxWarning, module=_SOURCE)


def _parse(text: str) -> ast.Expression:
    """Parse in eval mode, turning parser failures into CalculatorError."""
    try:
        tree = compile(text, _SOURCE, "eval", ast.PyCF_ONLY_AST)
    except SyntaxError as exc:
        raise CalculatorError(f"invalid syntax: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise CalculatorError("the expression is too deeply nested or too complex") from None
    except ValueError as exc:
        raise CalculatorError(f"invalid expression: {exc}") from None
    assert isinstance(tree, ast.Expression)  # eval mode always yields one
    return tree


def _check_call(node: ast.Call) -> None:
    """Allow only direct calls of a whitelisted function name with plain positional arguments."""
    if not isinstance(node.func, ast.Name):
        raise CalculatorError(f"not allowed: calling {_describe(node.func)}; only named functions, e.g. sqrt(2)")
    name = node.func.id
    if name not in FUNCTIONS:
        raise CalculatorError(f"function {name!r} is not allowed; available: {', '.join(FUNCTIONS)}")
    if node.keywords:
        raise CalculatorError(f"keyword arguments are not allowed in {name}()")
    if any(isinstance(arg, ast.Starred) for arg in node.args):
        raise CalculatorError(f"argument unpacking (*) is not allowed in {name}()")
    low, high = _ARITY.get(name, (1, 1))
    if len(node.args) < low or (high is not None and len(node.args) > high):
        expected = f"{low}" if low == high else f"at least {low}" if high is None else f"{low} to {high}"
        raise CalculatorError(f"{name}() takes {expected} argument(s), got {len(node.args)}")


def _check_node(node: ast.AST) -> None:
    """Raise CalculatorError unless the node is on the whitelist."""
    if isinstance(node, ast.Constant) and type(node.value) not in (int, float):
        raise CalculatorError(f"{type(node.value).__name__} constants are not allowed; only numbers")
    if isinstance(node, ast.Name) and node.id not in CONSTANTS and node.id not in FUNCTIONS:
        raise CalculatorError(f"name {node.id!r} is not allowed; constants: {', '.join(CONSTANTS)}")
    if isinstance(node, ast.Call):
        _check_call(node)
    if not isinstance(node, _ALLOWED_NODES):
        raise CalculatorError(f"not allowed: {_describe(node)}")


def _check_value(value: object) -> Number:
    """Return the value if it is a finite real number within bounds, else raise CalculatorError."""
    if type(value) is int:
        if abs(value) >= _INT_LIMIT:
            raise CalculatorError(f"the result has more than {MAX_DIGITS} digits")
        return value
    if type(value) is float:
        if not math.isfinite(value):
            raise CalculatorError("the result is not a finite number (overflow or undefined)")
        if abs(value) > MAX_FLOAT:
            raise CalculatorError(f"the result is too large (magnitude above {MAX_FLOAT:g})")
        return value
    raise CalculatorError("the result is not a real number")


def _check_power(base: Number, exponent: Number) -> None:
    """Refuse a ** b before computing it when b or the estimated result is too large."""
    if abs(exponent) > MAX_EXPONENT:
        raise CalculatorError(f"the exponent is too large (|exponent| must be at most {MAX_EXPONENT})")
    if exponent > 0 and abs(base) > 1 and exponent * math.log10(abs(base)) > MAX_DIGITS:
        raise CalculatorError(f"the power is too large (result would exceed {MAX_DIGITS} digits)")


def _eval(node: ast.AST, depth: int = 1) -> Number:
    """Validate and evaluate in one walk: only whitelisted nodes, bounded depth, every intermediate checked."""
    if depth > MAX_DEPTH:
        raise CalculatorError(f"the expression is nested too deeply (max depth {MAX_DEPTH})")
    match node:
        case ast.Expression(body=body):
            return _eval(body, depth + 1)
        case ast.Constant(value=value) if type(value) in (int, float):
            return _check_value(value)
        case ast.Name(id=name) if name in CONSTANTS:
            return CONSTANTS[name]
        case ast.UnaryOp(op=ast.USub(), operand=operand):
            return _check_value(-_eval(operand, depth + 1))
        case ast.UnaryOp(op=ast.UAdd(), operand=operand):
            return _check_value(+_eval(operand, depth + 1))
        case ast.BinOp(left=left, op=op, right=right) if type(op) in _BINOPS:
            a, b = _eval(left, depth + 1), _eval(right, depth + 1)
            if type(op) is ast.Pow:
                _check_power(a, b)
            return _check_value(_BINOPS[type(op)](a, b))
        case ast.Call(func=ast.Name(id=name), args=args) if name in FUNCTIONS:
            _check_call(node)
            return _check_value(FUNCTIONS[name](*[_eval(arg, depth + 1) for arg in args]))
        case ast.Name(id=name) if name in FUNCTIONS:
            raise CalculatorError(f"function {name!r} must be called, e.g. {name}(2)")
    _check_node(node)  # the specific reason (a name, a string constant, a call of something else) ...
    raise CalculatorError(f"not allowed: {_describe(node)}")  # ... or the generic one


def _compute(tree: ast.Expression) -> Number:
    """Evaluate the tree, turning arithmetic failures into CalculatorError."""
    try:
        return _eval(tree)
    except ZeroDivisionError:
        raise CalculatorError("division by zero") from None
    except OverflowError:
        raise CalculatorError("numeric overflow: the result is too large") from None
    except ValueError as exc:
        raise CalculatorError(f"math error: {exc}") from None
    except TypeError as exc:
        raise CalculatorError(f"invalid operands or arguments: {exc}") from None
    except RecursionError:
        raise CalculatorError("the expression is nested too deeply") from None
    except MemoryError:
        raise CalculatorError("the expression needs too much memory") from None


def evaluate(expression: str) -> int | float:
    """Safely evaluate an arithmetic expression; raise CalculatorError on anything not allowed."""
    return _compute(_parse(_normalise(expression)))  # _eval refuses any node off the whitelist before evaluating it


def format_result(value: int | float) -> str:
    """Render a result: integers and whole floats without '.0', other floats in short repr form."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def run_calculator(arguments: dict[str, Any], context: ToolContext) -> str:
    """Tool entry point: evaluate arguments['expression'] and return the result as text."""
    expression = arguments.get("expression") if isinstance(arguments, dict) else None
    if not isinstance(expression, str):
        raise CalculatorError("the 'expression' argument must be a string")
    return format_result(evaluate(expression))


CALCULATOR_TOOL = registry.register(
    Tool(
        name="calculator",
        description=(
            "Evaluate an arithmetic expression and return the numeric result. Supports + - * / // % and ** "
            "(or ^) for powers, parentheses, unary minus, the functions sqrt, sin, cos, tan (radians), log "
            "(natural, or log(x, base)), log10, exp, abs, round, floor, ceil, min, max, and the constants pi, "
            "e, tau. No variables, strings or other Python."
        ),
        parameters={
            "type": "object",
            "properties": {
                "expression": {
                    "type": "string",
                    "description": f"The expression, e.g. '12*7' or 'sqrt(2)^2 + log10(1000)'; at most {MAX_LENGTH} "
                    "characters.",
                }
            },
            "required": ["expression"],
            "additionalProperties": False,
        },
        func=run_calculator,
        sensitive=False,
        timeout_s=2.0,
        # Bounded by construction (length, depth, exponent and magnitude limits): microseconds, so it runs in the
        # caller's thread instead of paying for a worker thread per call.
        inline=True,
        instant=True,  # and pure: its calls are stored with the reply that asked for them
    )
)
