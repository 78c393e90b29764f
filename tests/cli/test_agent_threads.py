"""`manage.py agent --new-thread / --thread ID`: a conversation over several runs (API.md v1.1, "Threads")."""

from __future__ import annotations

import io
import json
import re
import uuid

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.models import Run, Thread
from agents.runs import drive, submit
from tests.integration._support import clean_env, manage, quick_user

QUESTION = "What is 12*7, plus 1?"
DIVIDE = "now divide that by 5"
ADD = "and add 2"
CONTINUE = re.compile(r"^Continue this conversation with: --thread (\S+)$", re.MULTILINE)


def agent(*args: str, **options) -> tuple[int, str, str]:
    """call_command('agent', …): (exit code, stdout, stderr). CommandError propagates (its returncode is checked)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("agent", *args, stdout=out, stderr=err, **options)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, out.getvalue(), err.getvalue()


def summary(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("Stop reason: "))


def turn(input: str, output: str) -> dict:
    return {"input": input, "output": output, "stop_reason": "final_answer"}


def refused(*args: str, **options) -> str:
    """The command's error message, after checking it is exit code 2."""
    with pytest.raises(CommandError) as excinfo:
        agent(*args, **options)
    assert excinfo.value.returncode == 2, excinfo.value
    return str(excinfo.value)


# --- a conversation -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_a_three_run_conversation_with_the_demo_model(admin, protocol):
    code, out, _ = agent(QUESTION, "--new-thread", "--protocol", protocol)

    assert code == 0, out
    assert "Final Answer: 85" in out
    thread = Thread.objects.get()
    assert (thread.owner, thread.title) == (admin, QUESTION)  # titled from the input
    first = Run.objects.get()
    assert (first.thread_id, first.history, first.output) == (thread.pk, [], "85")
    assert summary(out).endswith(f"· run {first.pk} · thread {thread.pk}"), out
    assert CONTINUE.findall(out) == [str(thread.pk)]

    code, out, _ = agent(DIVIDE, "--thread", str(thread.pk), "--protocol", protocol)

    assert code == 0, out
    assert "Final Answer: 17" in out
    assert f"· thread {thread.pk}" in summary(out)
    second = Run.objects.latest("created_at")
    assert (second.thread_id, second.output) == (thread.pk, "17")
    assert second.history == [turn(QUESTION, "85")]

    code, out, _ = agent(ADD, "--thread", str(thread.pk), "--protocol", protocol)

    assert code == 0, out
    assert "Final Answer: 19" in out
    third = Run.objects.latest("created_at")
    assert (third.thread_id, third.output) == (thread.pk, "19")
    assert third.history == [turn(QUESTION, "85"), turn(DIVIDE, "17")]
    assert list(thread.runs.order_by("created_at").values_list("pk", flat=True)) == [first.pk, second.pk, third.pk]
    assert Thread.objects.count() == 1  # --thread adds to the thread, never makes another


def test_without_the_thread_a_follow_up_has_nothing_to_refer_to(admin):
    """The control of the test above: the same follow-up outside the thread does not reach 17."""
    agent(QUESTION, "--new-thread")

    code, out, _ = agent(DIVIDE)

    assert "Final Answer: 17" not in out
    run = Run.objects.get(input=DIVIDE)
    assert (run.thread_id, run.history) == (None, [])
    assert "thread" not in summary(out)
    assert not CONTINUE.search(out)


def test_json_shows_the_thread_id(admin):
    code, out, _ = agent(QUESTION, "--new-thread", "--json")

    assert code == 0
    first = json.loads(out)  # nothing but the JSON document
    thread = Thread.objects.get()
    assert (first["thread_id"], first["output"]) == (str(thread.pk), "85")

    code, out, _ = agent(DIVIDE, "--thread", first["thread_id"], "--json")

    assert code == 0
    second = json.loads(out)
    assert (second["thread_id"], second["output"], second["ok"]) == (str(thread.pk), "17", True)
    assert second["id"] != first["id"]


def test_json_without_a_thread_shows_null(admin):
    code, out, _ = agent(QUESTION, "--json")

    assert code == 0
    assert json.loads(out)["thread_id"] is None


def test_the_thread_of_a_run_that_did_not_finish_can_still_be_continued(admin):
    """A run that stopped without an answer (max_turns) is done: the thread goes on, and says how it stopped."""
    code, out, _ = agent(QUESTION, "--new-thread", "--max-turns", "1")
    assert code == 1
    thread_id = CONTINUE.findall(out)[0]

    code, out, _ = agent(QUESTION, "--thread", thread_id)

    assert code == 0, out
    run = Run.objects.latest("created_at")
    assert run.history == [{"input": QUESTION, "output": None, "stop_reason": "max_turns"}]
    assert run.output == "85"


# --- refusals -------------------------------------------------------------------------------------------------


def test_another_users_thread_is_refused(admin):
    olga = quick_user("olga")
    thread = submit.create_thread(owner=olga, title="olga's")
    agent(QUESTION, "--user", "olga", "--thread", str(thread.pk))
    runs = Run.objects.count()

    message = refused(DIVIDE, "--thread", str(thread.pk))

    assert f"User 'admin' has no thread {thread.pk}" in message
    assert Run.objects.count() == runs == 1  # nothing stored
    assert Thread.objects.count() == 1
    assert Run.objects.get().owner == olga


def test_an_unknown_thread_is_refused(admin):
    unknown = uuid.uuid4()

    message = refused(QUESTION, "--thread", str(unknown))

    assert f"User 'admin' has no thread {unknown}" in message
    assert not Run.objects.exists()
    assert not Thread.objects.exists()


@pytest.mark.parametrize("value", ["not-a-uuid", "12", "", "'; DROP TABLE agents_run; --"])
def test_a_malformed_thread_id_is_refused(admin, value):
    message = refused(QUESTION, "--thread", value)

    assert f"--thread takes a thread id (a UUID), not {value!r}" in message
    assert not Run.objects.exists()


def test_a_busy_thread_is_refused_until_its_run_is_done(admin, no_tty):
    code, out, _ = agent("search x", "--new-thread")  # a sensitive tool: the run waits for a decision
    assert code == 1
    waiting = Run.objects.get()
    assert waiting.status == "awaiting_approval"
    thread_id = CONTINUE.findall(out)[0]

    message = refused(ADD, "--thread", thread_id)

    assert f"Thread {thread_id}: " in message and "awaiting_approval" in message
    assert Run.objects.count() == 1  # nothing stored
    drive.cancel_run(run_id=waiting.pk)

    agent(ADD, "--thread", thread_id)

    latest = Run.objects.latest("created_at")  # done now: the thread takes the next run
    assert (str(latest.thread_id), latest.input) == (thread_id, ADD)
    assert latest.history == [{"input": "search x", "output": None, "stop_reason": "cancelled"}]


def test_a_thread_whose_run_is_still_running_is_refused(admin):
    thread = submit.create_thread(owner=admin)
    options = submit.RunOptions(input=QUESTION, mode="step", thread_id=thread.pk)
    submit.start_run(owner=admin, options=options)  # stored running, never advanced

    message = refused(DIVIDE, "--thread", str(thread.pk))

    assert "running" in message
    assert Run.objects.count() == 1


def test_thread_and_new_thread_together_are_refused(admin):
    thread = submit.create_thread(owner=admin)

    with pytest.raises(CommandError) as excinfo:  # argparse's own refusal (exit code 2 from a shell, below)
        agent(QUESTION, "--thread", str(thread.pk), "--new-thread")

    assert "not allowed with argument" in str(excinfo.value)
    assert not Run.objects.exists()
    assert Thread.objects.count() == 1


def test_thread_and_new_thread_as_options_are_refused(admin):
    """call_command(thread=…, new_thread=True) gets past argparse's group: the command refuses the pair itself."""
    thread = submit.create_thread(owner=admin)

    message = refused(QUESTION, thread=str(thread.pk), new_thread=True)

    assert "Use either --thread or --new-thread, not both" in message
    assert not Run.objects.exists()
    assert Thread.objects.count() == 1


def test_a_new_thread_whose_run_cannot_start_is_not_kept(admin):
    message = refused(QUESTION, "--new-thread", "--provider", "nope")

    assert "Provider 'nope' is not allowed" in message
    assert not Thread.objects.exists()
    assert not Run.objects.exists()


# --- real processes -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fresh_sqlite(tmp_path_factory) -> dict[str, str]:
    """A new SQLite database set up the way a user does: migrate, then ensure_admin (as subprocesses)."""
    path = tmp_path_factory.mktemp("cli-threads") / "agent.sqlite3"
    env = clean_env(DEBUG="1", DATABASE_URL=f"sqlite:///{path}")
    for args in (("migrate", "--noinput", "-v", "0"), ("ensure_admin",)):
        proc = manage(*args, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return env


def test_real_process_conversation_continued_from_the_printed_thread_id(fresh_sqlite):
    """What a user types: --new-thread, then --thread with the id it printed."""
    proc = manage("agent", "--new-thread", QUESTION, env=fresh_sqlite)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Final Answer: 85" in proc.stdout
    (thread_id,) = CONTINUE.findall(proc.stdout)
    assert f"· thread {thread_id}" in summary(proc.stdout)

    answers = []
    for follow_up in (DIVIDE, ADD):
        proc = manage("agent", "--thread", thread_id, follow_up, env=fresh_sqlite)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert CONTINUE.findall(proc.stdout) == [thread_id]
        answers.append(re.findall(r"^Final Answer: (.*)$", proc.stdout, re.MULTILINE))

    assert answers == [["17"], ["19"]]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--thread", "not-a-uuid"), "--thread takes a thread id (a UUID), not 'not-a-uuid'"),
        (("--thread", "00000000-0000-4000-8000-000000000000"), "User 'admin' has no thread"),
        (("--thread", "00000000-0000-4000-8000-000000000000", "--new-thread"), "not allowed with argument"),
    ],
    ids=["malformed", "unknown", "both-flags"],
)
def test_real_process_thread_errors_exit_2(fresh_sqlite, args, message):
    proc = manage("agent", *args, QUESTION, env=fresh_sqlite)

    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Final Answer" not in proc.stdout
