"""No run dies with its worker (issue 11): kill -9 the process driving a run (during a model call, during a tool
call, between units; twenty times each), and a `run_worker` takes it over from its last committed step within
seconds, with no step doubled and no committed model reply asked for again. Bounded in time; real processes."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass
from subprocess import Popen
from urllib.parse import parse_qs, urlsplit

import pytest

from agents.models import Run
from tests.integration._support import MANAGE, PYTHON, ROOT, app_env, quick_user
from tests.providers.stub_llm import OPENAI_PATH, fake_key, openai_text, openai_tool_calls

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.connection_heavy]
LEASE_S = "1"  # the drivers' AGENT_LEASE_S: a killed driver's run is taken over within a few seconds
# The workers that take over hold their leases longer. On a loaded 2-core CI machine a 1 s lease lapsed under a live
# worker (between its claim of a run's task and its first renewal, two seconds passed), the other worker's sweep
# rightly took the run, and asked again for a reply that was never committed: allowed, but this test counts calls.
WORKER_LEASE_S = "5"


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
    # A driver uses one connection at a time: with PostgreSQL's pool at its default (2 per process), the 20 drivers
    # of a case plus the session's gunicorn and the workers came within reach of max_connections (100) on CI.
    return app_env(
        OPENAI_API_KEY=fake_key(),
        OPENAI_BASE_URL=stub.url + "/v1",
        LOG_LEVEL="WARNING",
        AGENT_LEASE_S=LEASE_S,
        DB_POOL_MIN_SIZE="1",
    )


def new_run(mode: str, tools: tuple[str, ...] = ("calculator",)) -> Run:
    from agents.runs import submit

    options = submit.RunOptions(input="What is 12*7, plus 1?", mode=mode, provider="openai", tools=list(tools))
    return submit.start_run(owner=quick_user(f"k{time.monotonic_ns()}"), options=options)


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
        worker_env = environ | {"AGENT_LEASE_S": WORKER_LEASE_S}
        worker = subprocess.Popen([PYTHON, MANAGE, "run_worker", "--interval", "0.1"], cwd=ROOT, env=worker_env)
        return wait_done(run.pk, 60)
    finally:
        for proc in (driver, worker):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(20)


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
from agents.runs import drive, review
drive.execute(run_id=sys.argv[1])  # pauses before the sensitive search
review.decide_approval(run_id=sys.argv[1], actor=User.objects.get(username=sys.argv[2]), approved=True)
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


# --- kill -9, twenty times per kill point ------------------------------------------------------------------------

KILLS = 20  # drivers killed per case, each driving its own run
TAKEOVER_S = 60  # every run is done this long after the workers that take over start
TAG = re.compile(r"#(\d+)")
JSON = {"Content-Type": "application/json"}
CALC_KINDS = ["model", "tool", "model", "tool", "model"]

# One driver per run. A sync run is driven as the web request would (drive.execute); a background run as its
# task's body (drive.run_background) or, with `task`, as a django-tasks-db worker does: it claims the run's task
# row, then runs it. A run that pauses for approval is then approved by the same process, which runs the approved
# tool (as the API's decision request does). With a stop count, the driver sleeps right after that many commits of
# its own, once it printed `paused after commit k`.
DRIVE_ONE = """
import django, logging, os, sys, time
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reactsite.settings")
django.setup()
logging.getLogger("django.tasks").setLevel(logging.WARNING)
from django.contrib.auth.models import User
from agents.models import Run
from agents.runs import drive, review, store

run_id, mode, reviewer, stop_after = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if stop_after:
    commit, commits = store.commit_unit, []

    def counted(*args, **kwargs):
        commit(*args, **kwargs)
        commits.append(1)
        if len(commits) == stop_after:
            print(f"paused after commit {stop_after}", flush=True)
            time.sleep(600)  # killed here, before the next unit (or the reply's tool call) starts

    store.commit_unit = counted
if mode == "task":
    from django_tasks_db.management.commands.db_worker import Worker
    from django_tasks_db.models import DBTaskResult

    worker = Worker(
        queue_names=["default"], interval=0.1, batch=True, backend_name="default", startup_delay=False,
        max_tasks=None, worker_id=f"driver-{os.getpid()}", excluded_queue_names=[],
    )
    task = DBTaskResult.objects.ready().get(args_kwargs__args__0=run_id)
    task.claim(worker.worker_id)
    worker.run_task(task)
elif mode == "background":
    drive.run_background(run_id=run_id)
else:
    drive.execute(run_id=run_id)
if Run.objects.get(pk=run_id).status == "awaiting_approval":
    review.decide_approval(run_id=run_id, actor=User.objects.get(username=reviewer), approved=True)
print("driver finished", Run.objects.get(pk=run_id).status, flush=True)
"""


@dataclass
class Plan:
    """One run of a case: its script, what it must end with, and where its driver is killed."""

    tag: int
    mode: str  # sync, background, or task (a background run whose driver holds its task)
    replies: list[dict]  # the model's reply per turn
    kinds: list[str]  # the run's steps, in order
    output: str
    hang_turn: int | None = None  # model-call: this turn's first call hangs
    search_turn: int | None = None  # tool-call: the search the model asks for at this turn hangs the first time
    stop_after: int = 0  # between-units: the driver stops after this many commits
    run_id: str = ""


def plans(case: str, kills: int, modes: tuple[str, ...]) -> list[Plan]:
    """`kills` runs, in the modes by turns; the kill point varies across them (each point once per mode)."""
    calc = [
        openai_tool_calls([("c1", "calculator", {"expression": "12*7"})]),
        openai_tool_calls([("c2", "calculator", {"expression": "84+1"})]),
        openai_text("85"),
    ]
    out = []
    for i in range(kills):
        mode, n = modes[i % len(modes)], i // len(modes)
        if case == "model-call":
            out.append(Plan(i, mode, calc, CALC_KINDS, "85", hang_turn=n % 3))  # the 1st, 2nd or 3rd model call
        elif case == "between-units":  # after the first or the second unit (a reply stored with its calculator
            # result: an instant tool); a reply stored before its tool runs is the tool-call case's kill point
            out.append(Plan(i, mode, calc, CALC_KINDS, "85", stop_after=n % 2 + 1))
        else:  # tool-call: the search is the first unit's tool call, or the second's (after a calculator unit)
            search = openai_tool_calls([("s1", "search", {"query": f"letter #{i}"})])
            if n % 2 == 0:
                replies, kinds, at = [search, openai_text("X is a letter.")], ["model", "approval", "tool", "model"], 0
            else:
                replies, at = [calc[0], search, openai_text("X is a letter.")], 1
                kinds = ["model", "tool", "model", "approval", "tool", "model"]
            out.append(Plan(i, mode, replies, kinds, "X is a letter.", search_turn=at))
    return out


class Stubs:
    """The scripted model and search engine for many runs at once, told apart by the `#tag` in their input (the
    search by its query); counts every model call per (run, turn) and every search per run."""

    def __init__(self, stub, runs: list[Plan]) -> None:
        self.plans = {p.tag: p for p in runs}
        self.model_calls: Counter[tuple[int, int]] = Counter()
        self.searches: Counter[int] = Counter()
        self.busy = {p.tag: threading.Event() for p in runs}  # the driver got to its kill point
        self.release = threading.Event()  # lets hung calls end once the test is over
        self.lock = threading.Lock()
        stub.add("POST", OPENAI_PATH, handler=self.model, repeat=True)
        stub.add("GET", "/", handler=self.search, repeat=True)

    def model(self, request):
        messages = json.loads(request.body)["messages"]
        user = next(m for m in messages if m["role"] == "user")
        tag = int(TAG.search(json.dumps(user["content"])).group(1))
        turn = sum(1 for m in messages if m["role"] == "tool")
        plan = self.plans[tag]
        with self.lock:
            self.model_calls[tag, turn] += 1
            hang = turn == plan.hang_turn and self.model_calls[tag, turn] == 1
        if hang:
            self.busy[tag].set()
            self.release.wait(120)  # the driver that asked is killed meanwhile
        return 200, JSON, json.dumps(plan.replies[turn]).encode()

    def search(self, request):
        tag = int(TAG.search(parse_qs(urlsplit(request.path).query)["q"][0]).group(1))
        with self.lock:
            self.searches[tag] += 1
            hang = self.searches[tag] == 1
        if hang:
            self.busy[tag].set()
            self.release.wait(120)  # the driver running the approved search is killed meanwhile
        return 200, JSON, b'{"Heading": "X", "AbstractText": "X is a letter."}'


def watch_stdout(driver: Popen, plan: Plan, busy: threading.Event) -> None:
    for line in driver.stdout:
        if line.strip() == f"paused after commit {plan.stop_after}":
            busy.set()


def kill_at_their_kill_points(drivers: dict[int, Popen], stubs: Stubs, limit_s: float = 90) -> None:
    """SIGKILL each driver as soon as it is at its kill point; none may finish or die on its own first."""
    deadline, alive = time.monotonic() + limit_s, dict(drivers)
    while alive:
        assert time.monotonic() < deadline, f"drivers never got to their kill point: {sorted(alive)}"
        for tag, driver in list(alive.items()):
            if stubs.busy[tag].is_set():
                driver.send_signal(signal.SIGKILL)
                assert driver.wait(10) == -signal.SIGKILL, f"driver #{tag} was gone before its kill"
                del alive[tag]
            elif driver.poll() is not None:
                raise AssertionError(f"driver #{tag} exited with {driver.returncode} before its kill point")
        time.sleep(0.02)


def describe(run_ids: list[str]) -> str:
    """The state of unfinished runs, for a failure message."""
    from django_tasks_db.models import DBTaskResult

    lines = []
    for run in Run.objects.filter(pk__in=run_ids).exclude(status="done"):
        tasks = list(DBTaskResult.objects.filter(args_kwargs__args__0=str(run.pk)).values_list("status", flat=True))
        kinds = list(run.steps.order_by("index").values_list("kind", flat=True))
        lines.append(f"{run.input!r} {run.status} {run.mode} lease={run.lease_owner!r} tasks={tasks} steps={kinds}")
    return "\n".join(lines)


def kill_them_all(stub, case: str, kills: int, modes: tuple[str, ...], takeover_s: float) -> tuple[list[Plan], Stubs]:
    """Start one driver per run, all at once; kill -9 each at its kill point; then two fresh `run_worker`s (short
    leases: the orphan sweep hands the runs to the queue once their leases run out) must finish every run."""
    from agents.runs import submit

    runs = plans(case, kills, modes)
    stubs = Stubs(stub, runs)
    reviewer = quick_user("rev", is_superuser=True, is_staff=True)
    owner = quick_user("k9")
    tools = ["search", "calculator"] if case == "tool-call" else ["calculator"]
    for p in runs:
        mode = "background" if p.mode == "task" else p.mode
        options = submit.RunOptions(
            input=f"What is 12*7, plus 1? #{p.tag}", mode=mode, provider="openai", tools=tools, timeout_s=300
        )
        if p.mode == "task":
            p.run_id = str(submit.submit_run(owner=owner, options=options).pk)  # queued, with its task
        else:
            p.run_id = str(submit.start_run(owner=owner, options=options).pk)
    environ = env(stub) | {"DUCKDUCKGO_URL": stub.url + "/", "TAVILY_API_KEY": ""}
    drivers: dict[int, Popen] = {}
    workers: list[Popen] = []
    watchers: list[threading.Thread] = []
    try:
        for p in runs:
            args = [PYTHON, "-c", DRIVE_ONE, p.run_id, p.mode, reviewer.username, str(p.stop_after)]
            drivers[p.tag] = Popen(args, cwd=ROOT, env=environ, stdout=subprocess.PIPE, text=True)
            watchers.append(threading.Thread(target=watch_stdout, args=(drivers[p.tag], p, stubs.busy[p.tag])))
            watchers[-1].start()
        kill_at_their_kill_points(drivers, stubs)
        started = time.monotonic()
        worker_env = environ | {"AGENT_LEASE_S": WORKER_LEASE_S}
        workers = [Popen([PYTHON, MANAGE, "run_worker", "--interval", "0.1"], cwd=ROOT, env=worker_env) for _ in "ab"]
        ids = [p.run_id for p in runs]
        while Run.objects.filter(pk__in=ids).exclude(status="done").exists():
            if time.monotonic() - started > takeover_s:
                raise AssertionError(f"runs not done {takeover_s} s after the takeover began:\n{describe(ids)}")
            time.sleep(0.2)
    finally:
        stubs.release.set()
        for proc in [*drivers.values(), *workers]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM if proc in workers else signal.SIGKILL)
        for proc in [*drivers.values(), *workers]:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        for watcher in watchers:
            watcher.join(5)  # each ends at its driver's end of output
        for proc in drivers.values():
            proc.stdout.close()
    return runs, stubs


def check_every_run(runs: list[Plan], stubs: Stubs) -> None:
    problems = []
    for p in runs:
        run = Run.objects.get(pk=p.run_id)
        steps = list(run.steps.order_by("index").values_list("index", "kind"))
        calls = {turn: stubs.model_calls[p.tag, turn] for turn in range(len(p.replies))}
        # A committed reply is never asked for again: only the call in flight at the kill is asked twice.
        expected = {turn: 2 if turn == p.hang_turn else 1 for turn in range(len(p.replies))}
        searches = 0 if p.search_turn is None else 2  # the killed search, then once more after the takeover
        got = (run.status, run.stop_reason, run.output, steps, calls, stubs.searches[p.tag])
        want = ("done", "final_answer", p.output, list(enumerate(p.kinds)), expected, searches)
        if got != want:
            where = f"hang_turn={p.hang_turn} search_turn={p.search_turn} stop_after={p.stop_after}"
            problems.append(f"#{p.tag} ({p.mode}, {where}):\n  got  {got}\n  want {want}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("case", ["model-call", "tool-call", "between-units"])
def test_kill_9_twenty_times_and_every_run_still_finishes(settings, stub, case):
    """kill -9 of the process driving a run, KILLS times per case (each its own driver and run; sync runs, and
    background runs whose driver holds their task as a task worker does, in turns): every run is finished by the
    workers that take over within TAKEOVER_S, its steps contiguous (none doubled, none lost) and no model call
    repeated for a reply committed before the kill. A dead task worker's task is marked failed by the sweep."""
    settings.OPENAI_API_KEY = fake_key()
    runs, stubs = kill_them_all(stub, case, KILLS, ("sync", "task"), TAKEOVER_S)
    check_every_run(runs, stubs)

    from django_tasks_db.models import DBTaskResult

    assert not DBTaskResult.objects.filter(status="RUNNING").exists()  # no task is left to a dead worker
    lost = DBTaskResult.objects.filter(status="FAILED", exception_class_path="agents.runs.leases.WorkerLost").count()
    # the drivers killed inside their task (in the tool-call case the task ended at the approval, before the kill)
    assert lost == (0 if case == "tool-call" else sum(1 for p in runs if p.mode == "task"))
