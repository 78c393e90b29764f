"""No run dies with its worker (issue 11): kill -9 the process driving a run in the middle of a model call, and a
`run_worker` takes it over from its last committed step within seconds. Bounded in time; real processes."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time

import pytest

from agents.models import Run
from tests.integration._support import MANAGE, PYTHON, ROOT, app_env, quick_user
from tests.providers.stub_llm import OPENAI_PATH, fake_key, openai_text, openai_tool_calls

pytestmark = pytest.mark.django_db(transaction=True)
LEASE_S = "1"  # the processes' AGENT_LEASE_S: a dead worker's run is taken over within a few seconds

DRIVE = """
import django, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reactsite.settings")
django.setup()
from agents import services
from agents.models import Run
services.execute(run_id=sys.argv[1])
"""


class Script:
    """The stub model: calculator(12*7), calculator(84+1), then "85"; the call at `hang_at` hangs the first time."""

    def __init__(self, stub, hang_at: int) -> None:
        self.calls, self.lock, self.hanging = 0, threading.Lock(), threading.Event()
        replies = [
            openai_tool_calls([("c1", "calculator", {"expression": "12*7"})]),
            openai_tool_calls([("c2", "calculator", {"expression": "84+1"})]),
            openai_text("85"),
        ]

        def handler(request):
            turn = sum(1 for m in json.loads(request.body)["messages"] if m["role"] == "tool")
            with self.lock:
                self.calls += 1
                hang = turn == hang_at and not self.hanging.is_set()
                if hang:
                    self.hanging.set()
            if hang:
                time.sleep(30)  # the process that asked is killed meanwhile
            return 200, {"Content-Type": "application/json"}, json.dumps(replies[turn]).encode()

        stub.add("POST", OPENAI_PATH, handler=handler, repeat=True)


def env(stub) -> dict[str, str]:
    return app_env(
        OPENAI_API_KEY=fake_key(), OPENAI_BASE_URL=stub.url + "/v1", LOG_LEVEL="WARNING", AGENT_LEASE_S=LEASE_S
    )


def new_run(mode: str, tools: tuple[str, ...] = ("calculator",)) -> Run:
    from agents import services

    options = services.RunOptions(input="What is 12*7, plus 1?", mode=mode, provider="openai", tools=list(tools))
    return services.start_run(owner=quick_user(f"k{time.monotonic_ns()}"), options=options)


def wait_done(run_id, limit_s: float) -> Run:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        run = Run.objects.get(pk=run_id)
        if run.status == "done":
            return run
        time.sleep(0.2)
    raise AssertionError(f"run still {Run.objects.get(pk=run_id).status} after {limit_s} s")


def kill_and_take_over(driver: subprocess.Popen, busy: threading.Event, run: Run, environ: dict[str, str]) -> Run:
    """Once the driver is busy (inside a model or tool call), kill -9 it; a fresh run_worker must finish the run."""
    worker = None
    try:
        assert busy.wait(30), "the driver never got busy"
        driver.send_signal(signal.SIGKILL)
        driver.wait(10)
        worker = subprocess.Popen([PYTHON, MANAGE, "run_worker", "--interval", "0.1"], cwd=ROOT, env=environ)
        return wait_done(run.pk, 60)
    finally:
        for proc in (driver, worker):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)


@pytest.mark.parametrize("mode", ["sync", "background"])
@pytest.mark.parametrize("hang_at", [0, 1], ids=["first-model-call", "after-a-committed-reply"])
def test_kill_9_during_a_model_call_and_the_run_still_finishes(settings, stub, mode, hang_at):
    settings.OPENAI_API_KEY = fake_key()
    script = Script(stub, hang_at)
    run = new_run(mode)
    if mode == "background":
        Run.objects.filter(pk=run.pk).update(status="running")  # as a web request would hand it to a worker
    driver = subprocess.Popen([PYTHON, "-c", DRIVE, str(run.pk)], cwd=ROOT, env=env(stub))
    done = kill_and_take_over(driver, script.hanging, run, env(stub))

    assert (done.stop_reason, done.output) == ("final_answer", "85")
    steps = list(done.steps.order_by("index").values_list("index", "kind"))
    assert steps == list(enumerate(["model", "tool", "model", "tool", "model"]))  # contiguous, nothing doubled
    assert script.calls == 4  # three replies, plus the one call the dead process never got: none asked twice


def test_sigterm_to_gunicorn_hands_a_sync_run_in_flight_back_at_once(settings, stub):
    """A deploy stops gunicorn while a sync run waits on its model: the run goes back to the queue right away (not
    after its lease runs out), and a worker finishes it."""
    from django_tasks_db.models import DBTaskResult

    from tests.integration.conftest import free_port

    settings.OPENAI_API_KEY = fake_key()
    script = Script(stub, hang_at=1)
    owner = quick_user("deploy")
    from tests.integration._support import token_key

    port, token = free_port(), token_key(owner)
    cmd = [str(ROOT / ".venv" / "bin" / "gunicorn"), "-c", "gunicorn.conf.py", "--workers", "1"]
    cmd += ["--graceful-timeout", "1", "--bind", f"127.0.0.1:{port}", "--no-control-socket", "reactsite.wsgi"]
    server = subprocess.Popen(cmd, cwd=ROOT, env=env(stub) | {"AGENT_LEASE_S": "600"})
    client = None
    try:
        import requests

        for _ in range(100):
            try:
                requests.get(f"http://127.0.0.1:{port}/api/v1/health", timeout=1)
                break
            except requests.RequestException:
                time.sleep(0.1)
        body = {"input": "What is 12*7, plus 1?", "provider": "openai", "tools": ["calculator"]}
        headers = {"Authorization": f"Token {token}"}

        def post() -> None:
            try:
                requests.post(f"http://127.0.0.1:{port}/api/v1/runs", json=body, headers=headers, timeout=30)
            except requests.ConnectionError:
                pass  # expected: the server stopped mid-request; the run goes on in the background

        client = threading.Thread(target=post)
        client.start()
        assert script.hanging.wait(30), "the run never reached its second model call"
        stopped = time.monotonic()
        server.send_signal(signal.SIGTERM)
        server.wait(20)
        assert time.monotonic() - stopped < 10
    finally:
        if server.poll() is None:
            server.kill()
    run = Run.objects.get(owner=owner)
    assert (run.status, run.mode, run.lease_owner) == ("running", "background", "")  # handed on, not left held
    assert DBTaskResult.objects.filter(status="READY").count() == 1  # queued at once: no 600 s lease to wait out

    worker = subprocess.Popen([PYTHON, MANAGE, "run_worker", "--batch"], cwd=ROOT, env=env(stub))
    worker.wait(60)
    done = Run.objects.get(pk=run.pk)
    assert (done.stop_reason, done.output) == ("final_answer", "85")
    assert list(done.steps.order_by("index").values_list("kind", flat=True)) == [
        "model",
        "tool",
        "model",
        "tool",
        "model",
    ]


DECIDE = """
import django, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reactsite.settings")
django.setup()
from django.contrib.auth.models import User
from agents import services
services.execute(run_id=sys.argv[1])  # pauses before the sensitive search
services.decide_approval(run_id=sys.argv[1], actor=User.objects.get(username=sys.argv[2]), approved=True)
"""


def test_kill_9_during_an_approved_tool_call_loses_neither_the_decision_nor_a_model_reply(settings, stub):
    settings.OPENAI_API_KEY = fake_key()
    calls, hanging = [], threading.Event()

    def model(request):
        turn = sum(1 for m in json.loads(request.body)["messages"] if m["role"] == "tool")
        calls.append(turn)
        reply = openai_tool_calls([("s1", "search", {"query": "x"})]) if turn == 0 else openai_text("X is a letter.")
        return 200, {"Content-Type": "application/json"}, json.dumps(reply).encode()

    def search(request):
        if not hanging.is_set():
            hanging.set()
            time.sleep(30)  # the process that asked is killed meanwhile
        return 200, {"Content-Type": "application/json"}, b'{"Heading": "X", "AbstractText": "X is a letter."}'

    stub.add("POST", OPENAI_PATH, handler=model, repeat=True)
    stub.add("GET", "/", handler=search, repeat=True)
    reviewer = quick_user("rev", is_superuser=True, is_staff=True)
    run = new_run("sync", tools=("search",))
    search_env = env(stub) | {"DUCKDUCKGO_URL": stub.url + "/", "TAVILY_API_KEY": ""}
    driver = subprocess.Popen([PYTHON, "-c", DECIDE, str(run.pk), reviewer.username], cwd=ROOT, env=search_env)
    done = kill_and_take_over(driver, hanging, run, search_env)

    assert (done.stop_reason, done.output) == ("final_answer", "X is a letter.")
    kinds = list(done.steps.order_by("index").values_list("kind", flat=True))
    assert kinds == ["model", "approval", "tool", "model"]  # the stored decision was kept; the search ran again
    assert calls == [0, 1]  # the committed reply was never asked for twice
