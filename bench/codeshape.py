"""The code's shape in figures: functions over 30 and 50 lines, modules over 400, `*_problem(s)` validators, the mypy
share of production lines, and how many production modules name each run option.

    python bench/codeshape.py [-v]

Production code is agents/, memory/, reactsite/ and bench/ without migrations (docs/performance.md, "The code's shape").
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("agents", "memory", "reactsite", "bench")
OPTIONS = (
    "max_turns", "timeout_s", "instructions", "temperature", "max_output_tokens", "output_schema", "max_total_tokens",
    "max_tool_calls", "tool_limits", "guardrails", "fallback_models", "max_reflections", "approval_ttl_s",
    "sensitive_tools",
)  # fmt: skip


def production_files() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "migrations" not in p.parts)


def functions(tree: ast.AST) -> list[tuple[str, int]]:
    """(name, lines) of every function and method."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append((node.name, (node.end_lineno or node.lineno) - node.lineno + 1))
    return found


def mypy_lines(files: list[Path]) -> int:
    """Production lines in the modules `mypy` reads (pyproject.toml's `files`, less its `exclude`)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    roots = [(ROOT / f).resolve() for f in config.get("files", [])]
    excluded = [re.compile(pattern) for pattern in config.get("exclude", [])]
    checked = [p for p in files if any(p.resolve().is_relative_to(r) for r in roots)]
    checked = [p for p in checked if not any(x.search(p.as_posix()) for x in excluded)]
    return sum(len(p.read_text().splitlines()) for p in checked)


class Shape:
    """What the figures are read from, gathered module by module."""

    def __init__(self) -> None:
        self.total, self.modules = 0, 0
        self.long30: list[str] = []
        self.long50: list[str] = []
        self.big: list[str] = []
        self.validators: list[str] = []
        self.naming: dict[str, int] = dict.fromkeys(OPTIONS, 0)

    def add(self, path: Path) -> None:
        text, name = path.read_text(), path.relative_to(ROOT).as_posix()
        lines = len(text.splitlines())
        self.total, self.modules = self.total + lines, self.modules + 1
        self.big += [f"{name} ({lines})"] if lines > 400 else []
        for function, length in functions(ast.parse(text)):
            self.long30 += [f"{name}:{function} ({length})"] if length > 30 else []
            self.long50 += [f"{name}:{function} ({length})"] if length > 50 else []
            self.validators += [f"{name}:{function}"] if re.search(r"_problems?$", function) else []
        for option in OPTIONS:
            self.naming[option] += bool(re.search(rf"\b{option}\b", text))


def main(verbose: bool) -> None:
    files, shape = production_files(), Shape()
    for path in files:
        shape.add(path)
    share = mypy_lines(files)
    print(f"production lines {shape.total} in {shape.modules} modules")
    print(f"functions > 30 lines: {len(shape.long30)}, > 50: {len(shape.long50)}; modules > 400: {len(shape.big)}")
    print(f"validators (*_problem, *_problems): {len(shape.validators)}")
    print(f"mypy reads {share} lines, {100 * share / shape.total:.0f} %")
    print("modules naming each option: " + ", ".join(f"{option} {n}" for option, n in shape.naming.items()))
    if verbose:
        for line in [*shape.long30, *shape.big, *shape.validators]:
            print("  " + line)


if __name__ == "__main__":
    main("-v" in sys.argv)
