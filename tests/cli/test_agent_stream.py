"""`manage.py agent` on a terminal prints the model's words as they come, then the stored steps in their place
(issue 32, item 5); `--no-stream`, `--json` and a pipe print the stored steps only. Real processes on a pty."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time

import pytest

from tests.integration._support import MANAGE, PYTHON, ROOT, clean_env, manage

QUESTION = "What is 12*7, plus 1?"
ERASE = "\x1b[J"


@pytest.fixture(scope="module")
def fresh_sqlite(tmp_path_factory) -> dict[str, str]:
    path = tmp_path_factory.mktemp("cli-stream") / "agent.sqlite3"
    env = clean_env(DEBUG="1", DATABASE_URL=f"sqlite:///{path}")
    for args in (("migrate", "--noinput", "-v", "0"), ("ensure_admin",)):
        proc = manage(*args, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return env


def on_a_terminal(env: dict[str, str], *args: str, limit_s: float = 60) -> tuple[int, list[tuple[float, str]]]:
    """Run `manage.py agent` with a pseudo-terminal as its stdout: its exit code and what it wrote, when."""
    main, child = pty.openpty()
    proc = subprocess.Popen([PYTHON, MANAGE, "agent", *args], cwd=ROOT, env=env, stdout=child, stderr=subprocess.PIPE)
    os.close(child)
    started, chunks = time.monotonic(), []
    try:
        while time.monotonic() - started < limit_s:
            ready, _, _ = select.select([main], [], [], 0.5)
            if ready:
                try:
                    data = os.read(main, 65536)
                except OSError:  # the child closed its end
                    break
                if not data:
                    break
                chunks.append((time.monotonic() - started, data.decode(errors="replace")))
            elif proc.poll() is not None:
                break
        return proc.wait(10), chunks
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()


def test_the_words_show_as_they_are_written_then_the_stored_steps_replace_them(fresh_sqlite):
    env = fresh_sqlite | {"AGENT_DEMO_WORD_PAUSE_S": "0.15"}
    code, chunks = on_a_terminal(env, "--protocol", "react", QUESTION)
    screen = "".join(text for _, text in chunks)

    assert code == 0, screen
    # The first reply, "Thought: I'll use the calculator ...", arrives a word at a time, before its step is printed.
    first_word = next(t for t, text in chunks if "Thought:" in text)
    stored = next(t for t, text in chunks if ERASE in text)  # the first unit's steps replace its live text
    assert stored - first_word >= 0.3, chunks[:6]
    live = screen[: screen.index(ERASE)]
    assert live.startswith("Thought: I need to compute 12*7.") and "… calculator is running" in live
    assert sum(1 for t, _ in chunks if t < stored) >= 5  # written a word at a time, not at once
    # Each unit's live text is erased before its steps are printed: the final trace reads as without streaming.
    assert screen.count(ERASE) >= 3
    after_last_erase = screen[screen.rindex(ERASE) + len(ERASE) :]
    assert "Final Answer: 85" in after_last_erase and after_last_erase.count("Final Answer: 85") == 1


def test_a_running_tool_shows_while_it_runs(fresh_sqlite):
    env = fresh_sqlite | {"AGENT_DEMO_WORD_PAUSE_S": "0"}
    code, chunks = on_a_terminal(env, QUESTION)
    screen = "".join(text for _, text in chunks)

    assert code == 0, screen
    assert "… calculator is running" in screen
    assert screen.index("… calculator is running") < screen.index("Observation: 84")


@pytest.mark.parametrize("flag", ["--no-stream", "--json"])
def test_no_stream_and_json_print_the_stored_steps_only(fresh_sqlite, flag):
    env = fresh_sqlite | {"AGENT_DEMO_WORD_PAUSE_S": "0.05"}
    code, chunks = on_a_terminal(env, flag, "--protocol", "react", QUESTION)
    screen = "".join(text for _, text in chunks)

    assert code == 0, screen
    assert ERASE not in screen and "is running" not in screen
    if flag == "--json":
        assert json.loads(screen)["output"] == "85"
    else:
        assert screen.count("Final Answer: 85") == 1


def test_a_pipe_gets_no_terminal_codes(fresh_sqlite):
    proc = manage("agent", "--protocol", "react", QUESTION, env=fresh_sqlite | {"AGENT_DEMO_WORD_PAUSE_S": "0.01"})

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "\x1b[" not in proc.stdout and "is running" not in proc.stdout
    assert proc.stdout.count("Final Answer: 85") == 1
