"""A keyed sync POST outlives a deploy and a crash (issue 39, item 2), with real processes: a gunicorn master with
one gevent worker, a `run_worker`, and a stub model whose second call hangs. In each round the gunicorn worker that
holds the request is stopped (SIGTERM: a deploy) or killed (`kill -9`); the client then retries with the same
Idempotency-Key and body until the run is done. Every round: exactly one run, four model calls (the interrupted call
asked once more, nothing else), and every answer names that run. With SIGTERM the first request itself answers 202
with the run; after `kill -9` the retries answer 409 for at most about one lease, then the run.

Rounds: REACTSITE_DEPLOY_ROUNDS each (default 10 on PostgreSQL, 2 on SQLite, where CI's time is shorter)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
import requests
from django.db import connection

from agents.models import Run
from tests.integration._support import MANAGE, PYTHON, ROOT, app_env, quick_user, token_key, wait_healthy
from tests.integration.conftest import free_port
from tests.providers.stub_llm import OPENAI_PATH, fake_key, openai_text, openai_tool_calls
from tests.support.http_stub import StubServer

pytestmark = pytest.mark.django_db(transaction=True)
GUNICORN_LEASE_S = 2  # a killed worker's run is swept back within a few seconds
QUESTION = "What is 12*7, plus 1? (round {n})"
GONE: set[int] = set()  # gunicorn workers stopped or killed so far


def rounds() -> int:
    default = 10 if connection.vendor == "postgresql" else 2
    return int(os.environ.get("REACTSITE_DEPLOY_ROUNDS", default))


class Model:
    """calculator(12*7), calculator(84+1), "85"; the second call of each question hangs the first time it is asked."""

    def __init__(self, stub) -> None:
        self.calls: Counter[str] = Counter()
        self.hung: dict[str, threading.Event] = {}
        self.lock = threading.Lock()
        replies = [
            openai_tool_calls([("c1", "calculator", {"expression": "12*7"})]),
            openai_tool_calls([("c2", "calculator", {"expression": "84+1"})]),
            openai_text("85"),
        ]

        def handler(request):
            messages = json.loads(request.body)["messages"]
            question = next(m["content"] for m in messages if m["role"] == "user")
            turn = sum(1 for m in messages if m["role"] == "tool")
            with self.lock:
                self.calls[question] += 1
                event = self.hung.setdefault(question, threading.Event())
                hang = turn == 1 and not event.is_set()
                if hang:
                    event.set()
            if hang:
                time.sleep(20)  # the worker that asked is stopped or killed meanwhile
            return 200, {"Content-Type": "application/json"}, json.dumps(replies[turn]).encode()

        stub.add("POST", OPENAI_PATH, handler=handler, repeat=True)

    def wait_hanging(self, question: str, limit_s: float = 30) -> None:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            with self.lock:
                event = self.hung.get(question)
            if event is not None and event.is_set():
                return
            time.sleep(0.02)
        raise AssertionError(f"the run of {question!r} never reached its second model call")


def children(pid: int) -> list[int]:
    found = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True, check=False).stdout.split()
    return [int(p) for p in found]


def the_worker(master: subprocess.Popen, gone: set[int], limit_s: float = 30) -> int:
    """The pid of the gunicorn master's one live worker (not one of those stopped before: `gone`)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        pids = [p for p in children(master.pid) if p not in gone]
        if len(pids) == 1:
            return pids[0]
        time.sleep(0.05)
    raise AssertionError(f"gunicorn has workers {children(master.pid)}")


def fresh_worker(master: subprocess.Popen, gone: int, url: str, limit_s: float = 30) -> None:
    """Wait until the stopped worker has left and its successor answers: a signal that reaches a worker still
    booting is lost (it still has the master's handlers), so each round starts with one that is ready."""
    deadline = time.monotonic() + limit_s
    t0 = time.monotonic()
    while time.monotonic() < deadline and gone in children(master.pid):
        time.sleep(0.05)
    print(f"GONE after {time.monotonic() - t0:.2f}", flush=True)
    while time.monotonic() < deadline:
        try:
            if requests.get(f"{url}/api/v1/health", timeout=2).status_code == 200:
                print(f"HEALTHY after {time.monotonic() - t0:.2f}", flush=True)
                return
        except requests.RequestException:
            pass
        time.sleep(0.05)
    raise AssertionError("no fresh gunicorn worker")


@pytest.fixture(scope="module")
def deployment(django_db_setup, tmp_path_factory):
    """gunicorn (one gevent worker) and a run_worker on the test database, the model at the stub: one for the whole
    file (each round starts with a fresh gunicorn worker, and each test asks its own questions)."""
    with StubServer() as stub:
        yield from _deployment(stub, tmp_path_factory.mktemp("deploy"))


def _deployment(stub: StubServer, tmp_path: Path):
    base = app_env(OPENAI_API_KEY=fake_key(), OPENAI_BASE_URL=stub.url + "/v1", LOG_LEVEL="WARNING")
    base |= {"AGENT_RATE_LIMIT": "100000/m"}
    port = free_port()
    cmd = [str(ROOT / ".venv" / "bin" / "gunicorn"), "-c", "gunicorn.conf.py", "--workers", "1"]
    cmd += ["--graceful-timeout", "10", "--bind", f"127.0.0.1:{port}", "--no-control-socket", "reactsite.wsgi"]
    err = tmp_path / "gunicorn.err"
    with err.open("wb") as ferr:
        server = subprocess.Popen(cmd, cwd=ROOT, env=base | {"AGENT_LEASE_S": str(GUNICORN_LEASE_S)}, stderr=ferr)
    worker = subprocess.Popen(
        [PYTHON, MANAGE, "run_worker", "--interval", "0.1"], cwd=ROOT, env=base | {"AGENT_LEASE_S": "5"}
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, server, err)
        yield url, server, Model(stub), err
    finally:
        for proc in (server, worker):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in (server, worker):
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


def post(url: str, headers: dict, body: dict) -> requests.Response | Exception:
    try:
        return requests.post(f"{url}/api/v1/runs", json=body, headers=headers, timeout=40)
    except requests.RequestException as exc:
        return exc


def retry_until_answered(url: str, headers: dict, body: dict, limit_s: float = 60) -> tuple[requests.Response, float]:
    """Retry as a client would (honouring Retry-After, through the worker's respawn); the answer and the seconds
    spent on 409s."""
    deadline, busy_s = time.monotonic() + limit_s, 0.0
    while time.monotonic() < deadline:
        started = time.monotonic()
        answer = post(url, headers, body)
        if isinstance(answer, Exception):
            time.sleep(0.1)  # the worker is being respawned
            continue
        if answer.status_code != 409:
            return answer, busy_s
        time.sleep(min(float(answer.headers["Retry-After"]), 1.0))
        busy_s += time.monotonic() - started
    raise AssertionError("no answer but 409 within the limit")


def wait_done(question: str, limit_s: float = 60) -> Run:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        runs = list(Run.objects.filter(input=question))
        if len(runs) == 1 and runs[0].status == "done":
            return runs[0]
        time.sleep(0.1)
    raise AssertionError(f"runs of {question!r}: {[(r.pk, r.status) for r in Run.objects.filter(input=question)]}")


def one_round(deployment, headers: dict, n: int, sig: signal.Signals, prefix: str) -> dict:
    url, server, model, err = deployment
    question = QUESTION.format(n=f"{prefix}{n}")
    body = {"input": question, "provider": "openai", "tools": ["calculator"]}
    keyed = {**headers, "Idempotency-Key": f"{prefix}-{n}"}
    first: list = []
    client = threading.Thread(target=lambda: first.append(post(url, keyed, body)))
    client.start()
    model.wait_hanging(question)
    pid = the_worker(server, GONE)
    GONE.add(pid)
    os.kill(pid, sig)
    client.join(40)
    answer, busy_s = retry_until_answered(url, keyed, body)
    run = wait_done(question)
    final, _ = retry_until_answered(url, keyed, body)
    fresh_worker(server, pid, url)
    return {
        "first": first[0],
        "retry": answer,
        "busy_s": busy_s,
        "final": final,
        "run": run,
        "runs": Run.objects.filter(input=question).count(),
        "calls": model.calls[question],
    }


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "kill-9"])
def test_a_keyed_sync_post_survives_its_worker_stopping_or_dying(deployment, sig):
    owner = quick_user(f"deploy-{sig.name.lower()}")
    headers = {"Authorization": f"Token {token_key(owner)}"}
    results = [one_round(deployment, headers, n, sig, sig.name.lower()) for n in range(rounds())]
    for r in results:
        run_id = str(r["run"].pk)
        assert r["runs"] == 1, r
        assert r["calls"] == 4, r  # the interrupted call asked once more, and nothing else
        assert r["retry"].status_code in (201, 202) and r["retry"].json()["id"] == run_id
        assert r["final"].status_code == 201 and r["final"].json()["id"] == run_id
        assert (r["final"].json()["output"], r["run"].stop_reason) == ("85", "final_answer")
        if sig == signal.SIGTERM:  # a graceful stop: the request itself answers, with the run handed on
            assert not isinstance(r["first"], Exception), r["first"]
            assert r["first"].status_code == 202 and r["first"].json()["id"] == run_id
            assert r["first"].json()["mode"] == "background"
        else:  # the lease of the dead worker's run runs out, then the retry finds the run
            assert isinstance(r["first"], Exception)
            assert r["busy_s"] <= GUNICORN_LEASE_S + 8, r["busy_s"]
