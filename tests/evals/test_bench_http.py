"""The helpers behind `manage.py bench`'s HTTP figures: the model server's delay, /proc CPU and memory, the load."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import threading
import time

import pytest
import requests
from django.db import connection

from bench.http import (
    InstantModelServer,
    ServerUsage,
    closed_loop,
    free_port,
    postgres_backends,
    process_tree,
)

# A parent that, once told to, runs one child that burns 0.3 s of CPU and exits (reaped: its CPU moves into the
# parent's cutime), then starts a second that burns 0.3 s and stays alive; it says "done" when both have burnt.
BURN = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
PARENT = f"""
import subprocess, sys
sys.stdin.readline()
subprocess.run([sys.executable, "-c", {BURN!r}], check=True)
alive = subprocess.Popen([sys.executable, "-c", {BURN + "print('burnt', flush=True)" + chr(10) + "input()"!r}],
                         stdout=subprocess.PIPE, stdin=subprocess.PIPE, text=True)
alive.stdout.readline()
print("done", flush=True)
sys.stdin.readline()
alive.communicate("")
"""


def _post(url: str, turn: int) -> tuple[float, dict]:
    """Seconds one chat completion took, and its body."""
    messages = [{"role": "user", "content": "q"}] + [{"role": "tool", "content": "x"}] * turn
    start = time.perf_counter()
    response = requests.post(url + "/chat/completions", json={"messages": messages}, timeout=10)
    return time.perf_counter() - start, response.json()


def test_the_model_server_delays_each_answer_without_holding_up_the_others():
    with InstantModelServer(delay_ms=200) as model:
        results: list[tuple[float, dict]] = []
        threads = [threading.Thread(target=lambda t=t: results.append(_post(model.url, t % 3))) for t in range(8)]
        start = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.perf_counter() - start

    assert len(results) == 8 and all(took >= 0.2 for took, _ in results)
    assert wall < 0.8  # one at a time would take 1.6 s
    answers = sorted(body["choices"][0]["finish_reason"] for _, body in results)
    assert answers.count("stop") == 2 and answers.count("tool_calls") == 6


def test_the_model_server_answers_at_once_by_default():
    with InstantModelServer() as model:
        took, body = _post(model.url, 2)
    assert took < 0.5 and body["choices"][0]["message"]["content"] == "85"


def test_server_usage_counts_live_and_reaped_descendants():
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )  # fmt: skip
    try:
        with ServerUsage(parent.pid) as usage:
            parent.stdin.write("go\n")
            parent.stdin.flush()
            assert parent.stdout.readline().strip() == "done"
            tree = process_tree(parent.pid)
    finally:
        parent.communicate("\n", timeout=10)

    assert len(tree) == 2 and tree[0] == parent.pid and os.getpid() not in tree
    assert usage.cpu_ms >= 550  # two children of 300 ms each (the clock ticks every 10 ms)
    assert usage.peak_rss_mb > 1 and usage.db_cpu_ms is None


def test_process_tree_of_a_gone_process_is_empty():
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    assert process_tree(proc.pid) == []


@pytest.mark.django_db
def test_postgres_backends_finds_our_own_connection():
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    conf = connection.settings_dict
    assert pid in postgres_backends(conf["USER"], conf["NAME"])
    assert pid not in postgres_backends(conf["USER"], conf["NAME"] + "_other")


def test_closed_loop_counts_good_runs_non_2xx_and_wrong_answers(stub):
    answers = itertools.cycle([(201, {"output": "85"}), (429, {"detail": "slow down"}), (201, {"output": "84"})])

    def answer(request):
        status, body = next(answers)
        return status, {"Content-Type": "application/json"}, json.dumps(body).encode()

    stub.add("POST", "/api/v1/runs", handler=answer, delay_s=0.01, repeat=True)
    load = closed_loop(stub.url, "tok", clients=3, seconds=0.5)

    assert load.runs > 0 and load.non_2xx > 0 and load.failed > 0
    assert len(load.latencies_ms) >= load.runs and all(ms >= 10 for ms in load.latencies_ms)
    assert len(stub.requests) == len(load.latencies_ms) + load.errors
    assert all(r.headers["authorization"] == "Token tok" for r in stub.requests)
    assert json.loads(stub.requests[0].body)["input"] == "What is 12*7, plus 1?"


def test_closed_loop_against_nothing_counts_transport_errors():
    load = closed_loop(f"http://127.0.0.1:{free_port()}", "tok", clients=2, seconds=0.2)
    assert load.runs == 0 and load.latencies_ms == [] and load.failed >= 2 and load.non_2xx == 0
    assert "ConnectionError" in load.last_error
