"""The README's 30-second tour and its approval round trip work on a fresh clone exactly as written (issue 31).

A fresh database is set up the way `make run` sets it up (migrate, the cache table, `ensure_admin`), gunicorn
serves it on a port of its own given as `PORT`, and the README's shell blocks of those two sections run in bash
from a plain shell, as a newcomer pastes them into a second terminal, with only the `make run` line left out.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time

import pytest
import requests

from tests.cli.test_plain_shell import manage, plain_shell
from tests.cli.test_readme_commands import README, shell_lines
from tests.integration._support import ROOT

SECTIONS = ("30-second tour", "An approval round trip", "Agents that work together", "Brakes and spend")
MAKE_RUN = re.compile(r"^\s*(\w+=\S*\s+)*make run\b")


def section_blocks(text: str, title: str) -> list[str]:
    """The shell blocks of the section `## <title>`, as written."""
    body = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```(bash|sh|shell)?\n(.*?)```", body, flags=re.S)
    return [code for lang, code in blocks if lang]


def tour_script(text: str) -> str:
    lines = [line for title in SECTIONS for block in section_blocks(text, title) for line in block.splitlines()]
    return "set -eo pipefail\n" + "\n".join(line for line in lines if not MAKE_RUN.match(line)) + "\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """What `make run` leaves running: a set-up database and gunicorn on $PORT (the tour needs no worker)."""
    made = subprocess.run(["make", "-s", ".env"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert made.returncode == 0, made.stderr
    port = free_port()
    env = plain_shell(DATABASE_URL=f"sqlite:///{tmp_path_factory.mktemp('tour') / 'db.sqlite3'}", PORT=str(port))
    for args in (("migrate", "--noinput", "-v", "0"), ("createcachetable",), ("ensure_admin",)):
        proc = manage(*args, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
    log = tmp_path_factory.mktemp("tour-log") / "gunicorn.log"
    with log.open("w") as out:
        gunicorn = [str(ROOT / ".venv/bin/gunicorn"), "-c", "gunicorn.conf.py", "--bind", f"127.0.0.1:{port}"]
        server = subprocess.Popen(
            [*gunicorn, "reactsite.wsgi"], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=5).status_code == 200:
                    break
            except requests.RequestException:  # not listening yet, or still warming up
                pass
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        yield env
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_tour_script_is_the_readmes_blocks():
    script = tour_script(README.read_text(encoding="utf-8"))
    assert "make run" not in script
    assert "manage.py agent" in script and "api runs" in script and "/advance" in script, script


def test_every_address_the_readme_shows_uses_the_chosen_port():
    lines = [line for line in shell_lines(README.read_text(encoding="utf-8")) if "127.0.0.1:" in line]
    assert lines, "the README shows where the server answers"
    fixed = [line for line in lines if "127.0.0.1:${PORT:-8000}" not in line]
    assert not fixed, f"these ignore PORT: {fixed}"


def test_the_tour_and_the_approval_round_trip_work_as_written(served):
    proc = subprocess.run(
        ["bash", "-c", tour_script(README.read_text(encoding="utf-8"))],
        cwd=ROOT, env=served, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip

    out = proc.stdout
    assert proc.returncode == 0, out[-3000:] + proc.stderr[-3000:]
    assert out.count("Final Answer: 85") == 3, out  # demo, react, and the demo agent
    assert out.count('"output":"85"') >= 2, out  # over HTTP, with and without the agent
    assert '"agent":"support"' in out
    assert '"status":"awaiting_approval"' in out and '"tool":"remember"' in out
    assert '"approved": true' in out and "event: done" in out  # the event stream's trace of the decision
    assert '"text":"my favourite colour is teal"' in out
    assert '"agent":"triage"' in out and '"output":"84"' in out  # the sub-agent's answer, through its child run
    assert '"forked_from":{"run":' in out and out.count('"status":"awaiting_approval"') >= 2  # the fork waits again
    assert '"stop_reason":"usage_limit"' in out and "max_tool_calls (1)" in out  # the limit stopped it
    assert '"input":"Remember that my e-mail is [email]"' in out and "ann@example.com" not in out  # redacted
    assert '"currency":"USD"' in out and '"cost":' in out  # the usage of the day
    assert "Authentication credentials" not in out and '"detail"' not in out, out
