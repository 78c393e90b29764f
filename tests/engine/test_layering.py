"""The engine imports no Django, DB, HTTP or SDK code, nor the layers above and beside it."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ENGINE_DIR = Path(__file__).resolve().parents[2] / "agents" / "engine"
FORBIDDEN = (
    "django",
    "rest_framework",
    "requests",
    "httpx",
    "httpx2",
    "openai",
    "anthropic",
    "agents.models",
    "agents.runs",
    "agents.api",
    "agents.providers",
    "agents.tools",
)


def imported_modules(path: Path) -> list[str]:
    """Every module an `import` or `from … import` statement names (relative imports resolved in agents.engine)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = "agents.engine".rsplit(".", node.level - 1)[0] if node.level > 1 else "agents.engine"
                base = f"{package}.{base}" if base else package
            names.append(base)
            names.extend(f"{base}.{alias.name}" for alias in node.names)
    return names


def is_forbidden(module: str) -> bool:
    return any(module == bad or module.startswith(bad + ".") for bad in FORBIDDEN)


def test_the_checker_would_catch_a_forbidden_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import django.conf\nfrom agents import providers\nfrom agents.tools.registry import Tool\n"
        "def f():\n    import httpx\n"
    )
    found = [m for m in imported_modules(bad) if is_forbidden(m)]
    assert found == ["django.conf", "agents.providers", "agents.tools.registry", "agents.tools.registry.Tool", "httpx"]


def test_engine_sources_exist():
    names = sorted(p.name for p in ENGINE_DIR.glob("*.py"))
    assert {"__init__.py", "loop.py", "dispatch.py", "react.py", "state.py", "wrapping.py"} <= set(names)


@pytest.mark.parametrize("path", sorted(ENGINE_DIR.glob("*.py")), ids=lambda p: p.name)
def test_engine_module_imports_nothing_forbidden(path):
    assert [m for m in imported_modules(path) if is_forbidden(m)] == []


def test_importing_the_engine_loads_no_framework_or_sdk():
    code = (
        "import json, sys\n"
        "import agents.engine\n"
        "bad = ('django', 'openai', 'anthropic', 'requests', 'httpx', 'rest_framework')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in bad)\n"
        "print(json.dumps({'engine': 'agents.engine.loop' in sys.modules, 'loaded': loaded}))\n"
    )
    root = ENGINE_DIR.parents[1]
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == {"engine": True, "loaded": []}
