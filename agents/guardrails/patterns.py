"""The regex guardrail's deny patterns: compiled once (cached by pattern), bounded, and refused when they could
backtrack without end.

Python's `re` has no time limit, and a run's text is matched in the worker that drives it: one pattern such as
`(a+)+$` on a long text would hold that worker for hours. So a pattern that repeats something which itself repeats
a variable number of times is refused; a possessive quantifier or an atomic group (`(?:\\w+\\.)++`, `(?>…)`), which
never backtrack, is the way to write one.
"""

from __future__ import annotations

import re
import re._parser as sre  # the parser `re` itself uses (3.11+): the only way to see a pattern's structure
from functools import lru_cache
from typing import Any

MAX_PATTERNS = 50
MAX_PATTERN_CHARS = 500

_REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT)
_NO_BACKTRACKING = (sre.POSSESSIVE_REPEAT, sre.ATOMIC_GROUP)


class PatternProblem(ValueError):
    """A deny pattern that cannot be used (the message says why, without the pattern)."""


@lru_cache(maxsize=512)
def compiled(pattern: str, ignore_case: bool) -> re.Pattern[str]:
    """The compiled pattern; PatternProblem when it does not compile or could backtrack without end."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternProblem(f"is longer than {MAX_PATTERN_CHARS} characters")
    flags = re.IGNORECASE if ignore_case else 0
    try:
        result = re.compile(pattern, flags)
        tree = sre.parse(pattern, flags)
    except (re.error, OverflowError, RecursionError) as exc:
        raise PatternProblem(f"does not compile: {exc}") from None
    if _nested_repeat(tree, inside=False):
        raise PatternProblem(
            "repeats a part that itself repeats a variable number of times (such as (a+)+), which can take "
            "forever on some texts; write the inner or outer repeat possessive (a++ or (?:…)++)"
        )
    return result


def _nested_repeat(items: Any, inside: bool) -> bool:
    """Whether a variable repeat (a{m,n} with n > 1 and m != n) sits inside a repeat of more than once."""
    for op, arguments in items:
        if op in _NO_BACKTRACKING:
            continue
        if op in _REPEATS:
            low, high, sub = arguments
            if inside and low != high and high > 1:
                return True
            if _nested_repeat(sub, inside or high > 1):
                return True
            continue
        if any(_nested_repeat(sub, inside) for sub in _subpatterns(arguments)):
            return True
    return False


def _subpatterns(arguments: Any) -> list[Any]:
    """The sub-patterns among a node's arguments (a group's, each branch of an alternation, an assertion's)."""
    if isinstance(arguments, sre.SubPattern):
        return [arguments]
    if isinstance(arguments, tuple | list):
        return [sub for argument in arguments for sub in _subpatterns(argument)]
    return []
