"""`manage.py agent`: the trace it prints, its exit codes, approvals; in-process and as a real process."""

from __future__ import annotations

import io
import json
import subprocess

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from agents.models import Run
from tests.integration._support import app_env, clean_env, manage, quick_user
from tests.providers.stub_llm import OPENAI_PATH, fake_key, openai_text, openai_tool_calls

QUESTION = "What is 12*7, plus 1?"
RUN_KEYS = {
    "id", "status", "stop_reason", "ok", "output", "turns", "input", "thread_id", "mode", "protocol", "provider",
    "model", "max_turns", "timeout_s", "tools", "sensitive_tools", "pending_action", "pending_actions", "error",
    "usage", "created_at", "updated_at",
}  # fmt: skip
STEP_KEYS = {
    "model": {"thought", "text", "tool_calls", "final_answer", "usage"},
    "tool": {"call_id", "name", "arguments", "output", "is_error"},
    "approval": {"call_id", "name", "original_arguments", "arguments", "approved", "reviewer", "reason"},
    "error": {"message"},
}
DDG_ANSWER = {"Heading": "X", "AbstractText": "X is the 24th letter.", "AbstractURL": "https://example.org/x"}


def agent(*args: str) -> tuple[int, str, str]:
    """call_command('agent', …): (exit code, stdout, stderr). CommandError propagates (its returncode is checked)."""
    out, err = io.StringIO(), io.StringIO()
    try:
        call_command("agent", *args, stdout=out, stderr=err)
        code = 0
    except SystemExit as exc:
        code = exc.code
    return code, out.getvalue(), err.getvalue()


def in_order(text: str, *parts: str) -> bool:
    """Every part occurs in text, in this order."""
    position = 0
    for part in parts:
        position = text.find(part, position)
        if position < 0:
            return False
        position += len(part)
    return True


def script_85(stub) -> None:
    stub.add("POST", OPENAI_PATH, json=openai_tool_calls([("call_1", "calculator", {"expression": "12*7"})]))
    stub.add("POST", OPENAI_PATH, json=openai_tool_calls([("call_2", "calculator", {"expression": "84+1"})]))
    stub.add("POST", OPENAI_PATH, json=openai_text("85"))


# --- the trace ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_demo_trace(admin, protocol):
    code, out, _ = agent(QUESTION, "--protocol", protocol)

    assert code == 0, out
    assert in_order(
        out,
        "Thought: ",
        "Action: calculator",
        'Action Input: {"expression": "12*7"}',
        "Observation: 84",
        "Action: calculator",
        'Action Input: {"expression": "84+1"}',
        "Observation: 85",
        "Final Answer: 85",
        "Stop reason: final_answer",
        "turns: 3",
    ), out
    run = Run.objects.get()
    assert (run.owner, run.protocol, run.provider, run.status, run.output) == (admin, protocol, "demo", "done", "85")
    assert str(run.pk) in out
    assert run.steps.count() == 5


def test_default_protocol_and_owner(admin, settings):
    settings.AGENT_DEFAULT_PROTOCOL = "react"
    other = quick_user("olga")

    code, out, _ = agent(QUESTION, "--user", "olga")

    assert code == 0, out
    run = Run.objects.get()
    assert (run.owner, run.protocol, run.mode) == (other, "react", "step")


def test_json_prints_the_run_with_its_steps(admin):
    code, out, _ = agent(QUESTION, "--json")

    assert code == 0
    run = json.loads(out)  # nothing but the JSON document
    assert RUN_KEYS | {"steps"} <= set(run)  # API.md's fields (an added field is backward compatible)
    assert (run["status"], run["stop_reason"], run["ok"], run["output"], run["turns"]) == (
        "done",
        "final_answer",
        True,
        "85",
        3,
    )
    assert run["id"] == str(Run.objects.get().pk)
    assert [(s["index"], s["kind"]) for s in run["steps"]] == [
        (0, "model"),
        (1, "tool"),
        (2, "model"),
        (3, "tool"),
        (4, "model"),
    ]
    for step in run["steps"]:
        assert {"index", "kind", "created_at", "latency_ms"} | STEP_KEYS[step["kind"]] <= set(step), step
    assert run["steps"][-1]["final_answer"] == "85"


def test_json_of_a_run_that_did_not_finish_exits_1(admin):
    code, out, _ = agent(QUESTION, "--json", "--max-turns", "1")

    assert code == 1
    run = json.loads(out)
    assert (run["stop_reason"], run["ok"], run["output"]) == ("max_turns", False, None)


# --- exit codes -----------------------------------------------------------------------------------------------


def test_a_run_that_stops_before_a_final_answer_exits_1(admin):
    code, out, _ = agent(QUESTION, "--max-turns", "1")

    assert code == 1
    assert "Observation: 84" in out
    assert "Final Answer" not in out
    assert "Stop reason: max_turns · turns: 1" in out
    assert Run.objects.get().stop_reason == "max_turns"


def test_a_model_error_exits_1_and_says_why(admin, settings, stub):
    settings.OPENAI_API_KEY = fake_key()
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    settings.AGENT_LLM_MAX_RETRIES = 0
    stub.add("POST", OPENAI_PATH, status=401, json={"error": {"message": "bad key", "type": "auth", "code": None}})

    code, out, _ = agent(QUESTION, "--provider", "openai")

    assert code == 1
    assert "Stop reason: model_error" in out
    assert "Error: openai: authentication failed (HTTP 401)" in out
    assert fake_key() not in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((QUESTION, "--max-turns", "0"), "--max-turns must be between 1 and 50"),
        ((QUESTION, "--max-turns", "51"), "--max-turns must be between 1 and 50"),
        ((QUESTION, "--timeout", "0"), "--timeout must be between 1 and 600 seconds"),
        ((QUESTION, "--timeout", "601"), "--timeout must be between 1 and 600 seconds"),
        ((QUESTION, "--provider", "nope"), "Provider 'nope' is not allowed"),
        ((QUESTION, "--provider", "openai"), "OPENAI_API_KEY is not set"),
        (
            (QUESTION, "--user", "ghost"),
            "No user 'ghost'.",
        ),
        (("   ",), "The input must have 1 to 8000 characters"),
        (("",), "The input must have 1 to 8000 characters"),
        ((QUESTION, "--model", "gpt-x"), "Model 'gpt-x' is not allowed for provider 'demo'"),
    ],
    ids=[
        "max-turns-0",
        "max-turns-51",
        "timeout-0",
        "timeout-601",
        "unknown-provider",
        "openai-without-key",
        "unknown-user",
        "blank-input",
        "empty-input",
        "model-not-allowed",
    ],
)
def test_bad_arguments_are_exit_code_2(admin, settings, args, message):
    settings.OPENAI_API_KEY = ""
    settings.AGENT_MODELS = {**settings.AGENT_MODELS, "demo": ["demo-1"]}

    with pytest.raises(CommandError) as excinfo:
        agent(*args)

    assert excinfo.value.returncode == 2
    assert message in str(excinfo.value)
    assert not Run.objects.exists()  # nothing half-started


def test_too_long_input_is_exit_code_2(admin, settings):
    settings.AGENT_MAX_INPUT_CHARS = 20
    with pytest.raises(CommandError) as excinfo:
        agent("x" * 21)
    assert excinfo.value.returncode == 2
    assert "1 to 20 characters" in str(excinfo.value)


# --- sensitive tools --------------------------------------------------------------------------------------------


def test_deny_records_the_denial_and_the_run_goes_on(admin, no_tty, stub, settings):
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"

    code, out, _ = agent("search x", "--deny")

    run = Run.objects.get()
    assert code == (0 if run.ok else 1)
    assert (run.status, run.stop_reason) == ("done", "final_answer")
    assert in_order(out, "Action: search", "Approval: search denied by admin", "Final Answer: ")
    approval = run.steps.get(kind="approval")
    assert (approval.data["approved"], approval.data["reviewer"], approval.data["name"]) == (False, "admin", "search")
    assert approval.data["reason"] == "decided on the CLI"
    assert not run.steps.filter(kind="tool").exists()  # the tool never ran
    assert stub.requests == []  # nothing was searched


def test_approve_runs_the_tool_and_finishes(admin, no_tty, stub, settings):
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"
    stub.add("GET", "/", json=DDG_ANSWER)

    code, out, _ = agent("search x", "--approve")

    assert code == 0, out
    assert in_order(out, "Action: search", "Approval: search approved by admin", "Observation: X: X is the 24th")
    assert "Final Answer: " in out
    run = Run.objects.get()
    assert (run.status, run.stop_reason, run.ok) == ("done", "final_answer", True)
    assert "X is the 24th letter." in run.output
    assert run.steps.get(kind="approval").data["approved"] is True
    assert [r.path.split("?")[0] for r in stub.requests] == ["/"]
    assert "q=x" in stub.requests[0].path


def test_without_a_terminal_and_without_a_flag_the_run_waits(admin, no_tty):
    code, out, err = agent("search x")

    assert code == 1
    run = Run.objects.get()
    assert run.status == "awaiting_approval"
    assert f"Run {run.pk} is awaiting approval of search" in err
    assert "Pass --approve or --deny" in err
    assert "Stop reason: awaiting_approval" in out
    assert not run.steps.filter(kind__in=["approval", "tool"]).exists()


def test_a_user_who_may_not_decide_is_told_so_and_the_run_waits(admin, no_tty, stub, settings):
    settings.AGENT_SELF_APPROVAL = False
    quick_user("olga")

    code, out, err = agent("search x", "--user", "olga", "--approve")

    assert code == 1
    run = Run.objects.get()
    assert run.status == "awaiting_approval"
    assert f"Run {run.pk} is awaiting approval; 'olga' may not decide approvals" in err
    assert "Traceback" not in err
    assert not run.steps.filter(kind__in=["approval", "tool"]).exists()
    assert stub.requests == []


def test_with_self_approval_the_owner_may_approve(admin, no_tty, stub, settings):
    settings.AGENT_SELF_APPROVAL = True
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"
    stub.add("GET", "/", json=DDG_ANSWER)
    quick_user("olga")

    code, out, _ = agent("search x", "--user", "olga", "--approve")

    assert code == 0, out
    assert "Approval: search approved by olga" in out


@pytest.mark.parametrize(("answer", "approved"), [("y", True), ("n", False)])
def test_on_a_terminal_the_command_asks(admin, monkeypatch, stub, settings, answer, approved):
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"
    stub.add("GET", "/", json=DDG_ANSWER)
    prompts: list[str] = []
    monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)
    monkeypatch.setattr("builtins.input", lambda prompt="": prompts.append(prompt) or answer)

    code, out, _ = agent("search x")

    assert prompts == ['Allow search with {"query": "x"}? [y/n] ']
    run = Run.objects.get()
    assert run.steps.get(kind="approval").data["approved"] is approved
    assert code == (0 if run.ok else 1)
    assert (len(stub.requests) == 1) is approved


# --- real processes -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fresh_sqlite(tmp_path_factory) -> dict[str, str]:
    """A new SQLite database set up the way a user does: migrate, then ensure_admin (as subprocesses)."""
    path = tmp_path_factory.mktemp("cli") / "agent.sqlite3"
    env = clean_env(DEBUG="1", DATABASE_URL=f"sqlite:///{path}")
    for args in (("migrate", "--noinput", "-v", "0"), ("ensure_admin",)):
        proc = manage(*args, env=env)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return env


def test_issue_openai_against_a_stub_exits_0_with_the_trace(fresh_sqlite, stub):
    """OPENAI_BASE_URL=http://127.0.0.1:PORT/v1 OPENAI_API_KEY=x python manage.py agent --provider openai "…" """
    script_85(stub)
    env = {**fresh_sqlite, "OPENAI_BASE_URL": f"http://127.0.0.1:{stub.port}/v1", "OPENAI_API_KEY": "x"}

    proc = manage("agent", "--provider", "openai", QUESTION, env=env)

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert in_order(
        proc.stdout,
        "Action: calculator",
        'Action Input: {"expression": "12*7"}',
        "Observation: 84",
        "Action: calculator",
        'Action Input: {"expression": "84+1"}',
        "Observation: 85",
        "Final Answer: 85",
        "Stop reason: final_answer · turns: 3",
    ), proc.stdout
    assert stub.count("POST", OPENAI_PATH) == 3
    assert {r.headers.get("authorization") for r in stub.requests} == {"Bearer x"}


def test_real_process_bad_argument_exits_2(fresh_sqlite):
    proc = manage("agent", "--max-turns", "0", QUESTION, env=fresh_sqlite)

    assert proc.returncode == 2
    assert "--max-turns must be between 1 and 50" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_real_process_demo_run_is_stored_in_the_shared_database(transactional_db):
    owner = quick_user("admin", is_superuser=True, is_staff=True)

    proc = manage("agent", QUESTION, env=app_env())

    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Final Answer: 85" in proc.stdout
    run = Run.objects.get()
    assert (run.owner, run.output, run.turns) == (owner, "85", 3)


def test_real_process_waiting_for_approval_exits_1(transactional_db):
    quick_user("admin", is_superuser=True, is_staff=True)

    proc = subprocess.run(
        [*manage_cmd(), "agent", "search x"],
        env=app_env(),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no terminal to ask on" in proc.stderr
    assert Run.objects.get().status == "awaiting_approval"


def manage_cmd() -> list[str]:
    from tests.integration._support import MANAGE, PYTHON

    return [PYTHON, MANAGE]


def test_a_run_cancelled_between_units_ends_cleanly(admin, monkeypatch):
    """Someone cancels the run (admin, API) between two of the CLI's units: no traceback, exit 1, cancelled."""
    from agents.runs import drive

    real_execute = drive.execute
    calls = []

    def cancel_then_execute(*, run_id, units=None):
        calls.append(run_id)
        if len(calls) == 2:
            drive.cancel_run(run_id=run_id)
        return real_execute(run_id=run_id, units=units)

    monkeypatch.setattr(drive, "execute", cancel_then_execute)
    code, out, err = agent(QUESTION)

    assert code == 1
    assert "Stop reason: cancelled" in out
    run = Run.objects.get()
    assert (run.status, run.stop_reason) == ("done", "cancelled")
    assert "Traceback" not in err


def test_a_user_named_with_user_is_only_said_missing(admin):
    with pytest.raises(CommandError) as excinfo:
        call_command("agent", QUESTION, "--user", "ghost", stdout=io.StringIO(), stderr=io.StringIO())
    assert str(excinfo.value) == "No user 'ghost'."  # not "pass --user": it was passed
    assert excinfo.value.returncode == 2


def test_the_summary_says_what_the_run_cost_when_its_model_has_a_price(admin, settings):
    code, out, _ = agent(QUESTION)
    assert code == 0 and "cost:" not in out  # the demo model has no price by default
    settings.AGENT_PRICES = {"demo/demo-1": {"input": "1000", "output": "1000"}}
    settings.AGENT_CURRENCY = "EUR"
    code, out, _ = agent(QUESTION)
    run = Run.objects.order_by("-created_at").first()
    expected = run.total_tokens * 1000 / 1_000_000  # 1000 a million tokens: a thousandth each
    assert code == 0 and f"turns: 3 · cost: {expected:g} EUR · time:" in out
