"""Every `manage.py` command the README shows is written so that it works as written from a plain shell after
`make run`: through the virtualenv's interpreter (`.venv/bin/python manage.py …`). A bare `python manage.py …` fails
there: pyenv's shim picks Python 3.12 through `.python-version`, which has no Django (the virtualenv has it).

The README is read as a newcomer reads it: its shell blocks and its inline code. Each subcommand it names is then run
as written (`--help`) in a shell that has nothing of ours exported, so a renamed or missing command fails here too.
"""

from __future__ import annotations

import re
import subprocess

import pytest

from tests.cli.test_plain_shell import plain_shell
from tests.integration._support import ROOT

README = ROOT / "README.md"
VENV_PYTHON = ".venv/bin/python"


def shell_lines(text: str) -> list[str]:
    """The README's commands: the lines of its shell blocks (a `\\` continuation joined) and its inline code (a
    span may wrap onto the next line)."""
    lines: list[str] = []
    prose: list[str] = []
    block: list[str] | None = None
    shell = False
    for line in text.splitlines():
        if line.startswith("```"):
            if block is None:
                block, shell = [], line[3:].strip() in ("", "bash", "sh", "shell", "console")
            else:
                if shell:
                    lines += "\n".join(block).replace("\\\n", " ").splitlines()
                block = None
        elif block is not None:
            block.append(line)
        else:
            prose.append(line)
    lines += [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", "\n".join(prose))]
    return lines


def manage_calls(lines: list[str]) -> list[tuple[str, str]]:
    """(what runs manage.py, its subcommand) for each call in the lines; a span that *starts* with `manage.py` is the
    command's name in prose, not a command line, and is left out."""
    calls = []
    for line in lines:
        for match in re.finditer(r"([^\s(`]*)\s+manage\.py\s+([a-z_]+)", line):
            calls.append((match.group(1), match.group(2)))
    return calls


def test_the_parser_finds_bare_and_venv_calls():
    text = (
        "Run it:\n\n```bash\n.venv/bin/python manage.py agent \\\n  'hi'\npython manage.py bench  # no\n```\n\n"
        "Prose with `python3 manage.py prune` and the name `manage.py check` and `.venv/bin/python manage.py check`.\n"
    )
    calls = manage_calls(shell_lines(text))
    assert calls == [(VENV_PYTHON, "agent"), ("python", "bench"), ("python3", "prune"), (VENV_PYTHON, "check")]


def test_every_manage_py_command_in_the_readme_runs_through_the_virtualenv():
    calls = manage_calls(shell_lines(README.read_text(encoding="utf-8")))
    assert len(calls) >= 10, "the README shows its commands: the parser found too few"
    wrong = sorted({f"{runner} manage.py {sub}" for runner, sub in calls if runner != VENV_PYTHON})
    assert not wrong, f"these fail in a plain shell (no Django outside the virtualenv): {wrong}"


@pytest.fixture(scope="module")
def shell(tmp_path_factory) -> dict[str, str]:
    made = subprocess.run(["make", "-s", ".env"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    assert (ROOT / VENV_PYTHON).exists(), "run the suite through `make test`, which creates the virtualenv"
    return plain_shell(DATABASE_URL=f"sqlite:///{tmp_path_factory.mktemp('readme') / 'db.sqlite3'}")


def test_every_subcommand_the_readme_names_runs_as_written(shell):
    subcommands = sorted({sub for _, sub in manage_calls(shell_lines(README.read_text(encoding="utf-8")))})
    assert {"agent", "bench", "run_worker", "run_evals", "export_cases", "ensure_admin"} <= set(subcommands)
    failed = {}
    for sub in subcommands:
        proc = subprocess.run(
            ["bash", "-c", f"{VENV_PYTHON} manage.py {sub} --help"],
            cwd=ROOT, env=shell, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        if proc.returncode != 0 or "usage:" not in proc.stdout:
            failed[sub] = (proc.stdout + proc.stderr)[-500:]
    assert not failed, failed
