"""Background work on Celery against the real brokers (RabbitMQ and Redis), on PostgreSQL, with real processes:
`celery -A reactsite worker -P gevent` (and `celery -A reactsite beat` where sweeps are needed), runs queued by a
process whose AGENT_TASK_BACKEND is celery, the model a stub on 127.0.0.1. Each test has a queue of its own.

- On each broker: 20 background runs go through one worker, each asking its model once; `celery inspect ping`
  answers, and `celery events` (what Flower reads) sees each task sent, received, started and succeeded.
- On RabbitMQ (a test's minute spent once, not per broker: the lease and the database claim decide, whichever broker
  redelivers): kill -9 of a worker with 8 slow runs in flight, and a new worker finishes all 8 (RabbitMQ redelivers
  the unacknowledged messages at once, and the orphan sweep queues them again anyway) with no committed model reply
  asked for twice; a schedule fires once per tick with two workers and two beats (one by mistake).
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.conf import settings
from django.utils import timezone

from agents.models import Run, Schedule
from agents.schedules import services as schedules
from tests.integration._support import PYTHON, ROOT, app_env, quick_user, run_py
from tests.providers.stub_llm import OPENAI_PATH, fake_key, openai_text, openai_tool_calls

BROKERS = {"rabbitmq": "amqp://guest:guest@127.0.0.1:5672//", "redis": "redis://127.0.0.1:6379/2"}
CELERY = str(Path(PYTHON).parent / "celery")
LEASE_S = "2"

pytestmark = [
    pytest.mark.connection_heavy,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql",
        reason="Celery's workers on PostgreSQL (the CI leg with its services)",
    ),
]


def _listening(url: str) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port or 5672), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture(params=sorted(BROKERS))
def celery_env(request, stub, settings):
    """The environment of this test's Celery processes, on each broker: the broker, a queue of its own, the stub."""
    return _environment(request.param, stub, settings)


@pytest.fixture
def rabbitmq_env(stub, settings):
    """The same on RabbitMQ only: what a test of the recovery and the schedule claims needs of a broker (late acks, a
    redelivery) is the same on Redis, whose visibility timeout the backend's tests cover (tests/background)."""
    return _environment("rabbitmq", stub, settings)


def _environment(broker: str, stub, settings) -> dict[str, str]:
    url = BROKERS[broker]
    if not _listening(url):
        pytest.skip(f"{broker} is not running on 127.0.0.1 (.ci/run starts it)")
    settings.OPENAI_API_KEY = fake_key()
    return app_env(
        AGENT_TASK_BACKEND="celery",
        CELERY_BROKER_URL=url,
        CELERY_TASK_DEFAULT_QUEUE=f"test-{uuid.uuid4().hex[:12]}",
        CELERY_VISIBILITY_TIMEOUT_S="4",  # Redis: a killed worker's messages go to another within seconds
        OPENAI_API_KEY=fake_key(),
        OPENAI_BASE_URL=stub.url + "/v1",
        AGENT_LEASE_S=LEASE_S,
        LOG_LEVEL="INFO",
        # few connections per process: these processes share PostgreSQL's 100 with the other test files running
        # meanwhile (test_kill9's 20 drivers); a run hands its connection back during each model call anyway
        DB_POOL_MIN_SIZE="1",
        DB_POOL_MAX_SIZE="8",
    )


def worker(name: str) -> tuple[str, list[str], bytes]:
    """A Celery worker (gevent, 50 in flight), ready once it logs so."""
    cmd = [CELERY, "-A", "reactsite", "worker", "-P", "gevent", "-c", "50", "-n", f"{name}-{uuid.uuid4().hex[:6]}@%h"]
    return name, [*cmd, "--without-mingle", "--without-gossip"], b" ready."


def beat(name: str, logs: Path) -> tuple[str, list[str], bytes]:
    """`celery -A reactsite beat` with a schedule file of its own (a gevent worker cannot embed one: no -B)."""
    return (
        name,
        [CELERY, "-A", "reactsite", "beat", "-s", str(logs / f"{name}-schedule"), "--max-interval", "1"],
        b"beat: Starting",
    )


@contextmanager
def started(env: dict[str, str], logs: Path, *specs: tuple[str, list[str], bytes]) -> Iterator[list[subprocess.Popen]]:
    """Start every process at once, wait until each is ready, and stop them (or find them killed) afterwards."""
    procs: list[subprocess.Popen] = []
    try:
        for name, cmd, _ in specs:
            with (logs / f"{name}.log").open("wb") as out:
                procs.append(subprocess.Popen([*cmd, "-l", "INFO"], cwd=ROOT, env=env, stdout=out, stderr=out))
        deadline = time.monotonic() + 60
        for proc, (name, _, ready) in zip(procs, specs, strict=True):
            log = logs / f"{name}.log"
            while ready not in log.read_bytes():
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
                time.sleep(0.1)
        yield procs
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def queue_runs(env: dict[str, str], inputs: list[str], tools: list[str]) -> list[str]:
    """Background runs queued by a process of the Celery backend (each sent once its transaction commits)."""
    code = (
        "import json, sys\n"
        "from agents.runs import submit\n"
        "from django.contrib.auth import get_user_model\n"
        "owner, _ = get_user_model().objects.get_or_create(username='celery-owner')\n"
        f"inputs, tools = {inputs!r}, {tools!r}\n"
        "ids = [str(submit.submit_run(owner=owner, options=submit.RunOptions(input=text, mode='background', "
        "provider='openai', tools=tools, timeout_s=120)).pk) for text in inputs]\n"
        "print(json.dumps(ids))\n"
    )
    done = run_py(code, env)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def wait_all_done(ids: list[str], limit_s: float) -> list[Run]:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        runs = list(Run.objects.filter(pk__in=ids))
        if len(runs) == len(ids) and all(r.status == "done" for r in runs):
            return runs
        time.sleep(0.2)
    raise AssertionError(Counter(Run.objects.filter(pk__in=ids).values_list("status", flat=True)))


def _user_text(request) -> str:
    return next(m["content"] for m in json.loads(request.body)["messages"] if m["role"] == "user")


def test_twenty_background_runs_go_through_a_celery_worker_each_asking_its_model_once(celery_env, stub, tmp_path):
    asked: Counter[str] = Counter()
    lock = threading.Lock()

    def model(request):
        with lock:
            asked[_user_text(request)] += 1
        return 200, {"Content-Type": "application/json"}, json.dumps(openai_text("done")).encode()

    stub.add("POST", OPENAI_PATH, handler=model, repeat=True)
    inputs = [f"say done ({n})" for n in range(20)]
    events = tmp_path / "events.log"
    with started(celery_env, tmp_path, worker("w1")):
        with events.open("wb") as out:  # what Flower and `celery events` read: the workers' task events
            dump = subprocess.Popen([CELERY, "-A", "reactsite", "events", "--dump"], cwd=ROOT, env=celery_env,
                                    stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            time.sleep(3)  # connected before the first task is sent
            ids = queue_runs(celery_env, inputs, tools=[])
            runs = wait_all_done(ids, 60)
            ping = subprocess.run([CELERY, "-A", "reactsite", "inspect", "ping", "--timeout", "5"], cwd=ROOT,
                                  env=celery_env, capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
            time.sleep(1)
        finally:
            dump.terminate()
            dump.wait(10)

    assert {(r.stop_reason, r.output) for r in runs} == {("final_answer", "done")}
    assert asked == Counter(inputs)  # each run driven once: one model call each
    assert ping.returncode == 0 and "pong" in ping.stdout, ping.stdout + ping.stderr
    seen = events.read_text(errors="replace")
    for kind in ("task sent", "task received", "task started", "task succeeded"):
        assert seen.count(f"{kind}: agents.tasks.advance_in_background(") == 20, (kind, seen[-2000:])


def test_kill_9_with_eight_slow_runs_in_flight_a_new_worker_finishes_them_asking_no_committed_reply_again(
    rabbitmq_env, stub, tmp_path
):
    """Each run: a calculator call (committed), then a slow second model call, during which the worker is killed."""
    asked: Counter[tuple[str, int]] = Counter()
    lock, slow, released = threading.Lock(), threading.Semaphore(0), threading.Event()

    def model(request):
        turn = sum(1 for m in json.loads(request.body)["messages"] if m["role"] == "tool")
        key = (_user_text(request), turn)
        with lock:
            asked[key] += 1
            first = asked[key] == 1
        if turn == 0:
            reply = openai_tool_calls([("c1", "calculator", {"expression": "12*7"})])
        else:
            if first:  # the killed worker's call: it never gets the answer
                slow.release()
                released.wait(30)
            reply = openai_text("84")
        return 200, {"Content-Type": "application/json"}, json.dumps(reply).encode()

    stub.add("POST", OPENAI_PATH, handler=model, repeat=True)
    inputs = [f"what is 12*7 ({n})" for n in range(8)]
    try:
        with started(rabbitmq_env, tmp_path, worker("doomed")) as [doomed]:
            ids = queue_runs(rabbitmq_env, inputs, tools=["calculator"])
            for _ in inputs:
                assert slow.acquire(timeout=60), "not every run reached its slow model call"
            doomed.send_signal(signal.SIGKILL)
            doomed.wait(10)
        released.set()
        with started(rabbitmq_env, tmp_path, worker("heir"), beat("beat", tmp_path)):
            runs = wait_all_done(ids, 90)
    finally:
        released.set()

    assert {(r.stop_reason, r.output) for r in runs} == {("final_answer", "84")}
    for text in inputs:
        assert asked[(text, 0)] == 1, asked  # committed before the kill: never asked again
        # the killed call, then the heir's; that ask is not committed yet, so on a loaded host the heir's 2 s lease
        # may lapse during it and the run be driven again from its last commit: an extra ask, still stored once
        assert asked[(text, 1)] >= 2, asked
    for run in runs:  # each turn stored once, whoever drove it
        assert list(run.steps.order_by("index").values_list("kind", flat=True)) == ["model", "tool", "model"]


def test_a_schedule_fires_once_per_tick_with_two_workers_and_two_beats(rabbitmq_env, stub, tmp_path):
    stub.add("POST", OPENAI_PATH, json=openai_text("tick"), repeat=True)
    owner = quick_user(f"sched{time.monotonic_ns()}")
    schedule = schedules.create_schedule(owner=owner, cron="0 0 1 1 *", input="tick", options={"provider": "openai"})
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=timezone.now() - timedelta(seconds=1))  # due now

    processes = worker("a"), worker("b"), beat("beat-a", tmp_path), beat("beat-b", tmp_path)
    with started(rabbitmq_env, tmp_path, *processes):
        deadline = time.monotonic() + 30
        while not Run.objects.filter(owner=owner, status="done").exists():
            assert time.monotonic() < deadline, "the schedule never fired"
            time.sleep(0.2)
        time.sleep(2 * float(LEASE_S))  # both beats send the schedules sweep (every 0.67 s) several times meanwhile

    assert Run.objects.filter(owner=owner).count() == 1
    schedule.refresh_from_db()
    assert schedule.next_run_at > timezone.now() + timedelta(days=1)  # next year's 1 January: the tick was claimed
    for name in ("beat-a", "beat-b"):
        assert "Sending due task reactsite.schedules" in (tmp_path / f"{name}.log").read_text(errors="replace")
