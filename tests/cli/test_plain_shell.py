"""The README's commands work from a plain shell after set-up: nothing exported by hand (issue 10).

`make run` / `make test` write a git-ignored `.env` (DEBUG=1, a generated development key) that the settings read.
These tests run `manage.py` with an environment that has no setting of ours at all: only PATH, HOME and, so that the
developer's own database is never touched, a DATABASE_URL naming a fresh SQLite file.
"""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.integration._support import MANAGE, PYTHON, ROOT

QUESTION = "What is 12*7, plus 1?"


def plain_shell(**extra: str) -> dict[str, str]:
    """What a new terminal has: no DEBUG, no SECRET_KEY, no REACTSITE_* (loopback never through a proxy)."""
    keep = ("PATH", "HOME", "LANG", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    return env | {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"} | extra


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, MANAGE, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def shell(tmp_path_factory) -> dict[str, str]:
    """The set-up step wrote .env (make's own rule), and the database is migrated as `make run` does."""
    made = subprocess.run(["make", "-s", ".env"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    env = plain_shell(DATABASE_URL=f"sqlite:///{tmp_path_factory.mktemp('shell') / 'db.sqlite3'}")
    for args in (("migrate", "--noinput", "-v", "0"), ("ensure_admin",)):
        proc = manage(*args, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
    return env


def test_env_file_is_private_and_ignored_by_git():
    path = ROOT / ".env"
    subprocess.run(["make", "-s", ".env"], cwd=ROOT, capture_output=True, timeout=60, check=True)
    assert path.stat().st_mode & 0o077 == 0, "the .env file holds a secret: only its owner may read it"
    ignored = subprocess.run(["git", "check-ignore", "-q", ".env"], cwd=ROOT, timeout=30, check=False)
    assert ignored.returncode == 0, ".env must be git-ignored"
    text = path.read_text()
    assert "DEBUG=1" in text and "SECRET_KEY=dev-" in text


def test_agent_cli_works_from_a_plain_shell(shell):
    proc = manage("agent", QUESTION, env=shell)

    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "Final Answer: 85" in proc.stdout
    assert "Stop reason: final_answer" in proc.stdout


def test_a_conversation_on_the_cli_from_a_plain_shell(shell):
    """The README's thread commands: --new-thread prints the id that --thread continues."""
    first = manage("agent", QUESTION, "--new-thread", env=shell)
    assert first.returncode == 0, first.stdout + first.stderr[-3000:]
    thread = first.stdout.rsplit("--thread ", 1)[1].split()[0]
    second = manage("agent", "now divide that by 5", "--thread", thread, env=shell)
    assert second.returncode == 0, second.stdout + second.stderr[-3000:]
    assert "Final Answer: 17" in second.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("ensure_admin",),
        ("createcachetable",),
        ("run_evals", "--help"),
        ("bench", "--help"),
        ("db_worker", "--help"),
        ("prune", "--days", "30", "--dry-run"),
        ("prune", "--days", "30"),
        ("check",),
    ],
    ids=lambda a: a[0],
)
def test_readme_commands_start_from_a_plain_shell(shell, args):
    proc = manage(*args, env=shell)

    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "ImproperlyConfigured" not in proc.stderr


def test_environment_wins_over_the_env_file(shell):
    """DEBUG=0 from the environment beats the file's DEBUG=1, and then the file's dev key is refused."""
    proc = manage("check", env=shell | {"DEBUG": "0", "ALLOWED_HOSTS": "example.com"})

    assert proc.returncode != 0
    assert "SECRET_KEY must be set to a real secret" in proc.stderr
