"""End to end through a real gunicorn (2 workers of the default class, gevent) on the test database; a stub model."""

from __future__ import annotations

import requests

from tests.integration._support import quick_user, token_key
from tests.providers.stub_llm import OPENAI_PATH, openai_text, openai_tool_calls, openai_usage

QUESTION = "What is 12*7, plus 1?"


def script_85(stub) -> None:
    """The model's three replies: calculator(12*7), calculator(84+1), then the answer."""
    stub.add("POST", OPENAI_PATH, json=openai_tool_calls([("call_1", "calculator", {"expression": "12*7"})]))
    stub.add("POST", OPENAI_PATH, json=openai_tool_calls([("call_2", "calculator", {"expression": "84+1"})]))
    stub.add("POST", OPENAI_PATH, json=openai_text("85", usage=openai_usage(30, 2)))


def test_sync_run_through_gunicorn(server):
    auth = {"Authorization": f"Token {token_key(quick_user('gina'))}"}
    script_85(server.stub)

    resp = requests.post(
        server.url + "/api/v1/runs", json={"input": QUESTION, "provider": "openai"}, headers=auth, timeout=30
    )

    assert resp.status_code == 201, resp.text
    run = resp.json()
    assert (run["status"], run["stop_reason"], run["ok"]) == ("done", "final_answer", True)
    assert run["output"] == "85"
    assert run["turns"] == 3
    assert run["provider"] == "openai"
    assert run["usage"] == {"prompt_tokens": 30, "completion_tokens": 2, "total_tokens": 32}
    assert resp.headers.get("X-Request-ID")
    assert server.stub.count("POST", OPENAI_PATH) == 3
    assert {r.headers.get("authorization") for r in server.stub.requests} == {"Bearer sk-test-xxxxxxxx"}

    detail = requests.get(f"{server.url}/api/v1/runs/{run['id']}", headers=auth, timeout=10).json()
    assert [(s["index"], s["kind"]) for s in detail["steps"]] == [
        (0, "model"),
        (1, "tool"),
        (2, "model"),
        (3, "tool"),
        (4, "model"),
    ]
    assert [s["output"] for s in detail["steps"] if s["kind"] == "tool"] == ["84", "85"]


def test_request_id_is_echoed_and_auth_is_enforced(server):
    resp = requests.get(server.url + "/api/v1/runs", headers={"X-Request-ID": "e2e-req-42"}, timeout=10)

    assert resp.status_code == 401
    assert resp.headers.get("WWW-Authenticate")
    assert resp.headers.get("X-Request-ID") == "e2e-req-42"


def test_the_run_is_stored_in_the_shared_database(server):
    """What gunicorn wrote is in the test's database: the processes share it, nothing lives in a worker."""
    from agents.models import Run

    user = quick_user("gwen")
    script_85(server.stub)

    resp = requests.post(
        server.url + "/api/v1/runs",
        json={"input": QUESTION, "provider": "openai", "mode": "step"},
        headers={"Authorization": f"Token {token_key(user)}"},
        timeout=30,
    )

    assert resp.status_code == 201, resp.text
    run = Run.objects.get(pk=resp.json()["id"])
    assert (run.owner_id, run.status, run.turns, run.lease_owner) == (user.pk, "running", 1, "")
    assert list(run.steps.order_by("index").values_list("index", "kind")) == [(0, "model"), (1, "tool")]


def test_many_runs_wait_on_the_model_at_once_without_a_thread_each(server):
    """Waiting costs nothing (issue 11): 2 workers hold 40 sync runs inside their model call at the same time.

    The stub answers nobody until all 40 calls have arrived (or 20 s passed): with a thread per waiting run, as the
    gthread default had (2 × 4 threads), at most 8 could ever be waiting together and this would time out.
    """
    import json
    import threading

    wanted, arrived, everyone = 40, [], threading.Event()
    lock = threading.Lock()
    payload = json.dumps(openai_text("done")).encode()

    def handler(_request):
        with lock:
            arrived.append(1)
            if len(arrived) >= wanted:
                everyone.set()
        everyone.wait(20)
        return 200, {"Content-Type": "application/json"}, payload

    server.stub.add("POST", OPENAI_PATH, handler=handler, repeat=True)
    tokens = [token_key(quick_user(f"wait{i}")) for i in range(wanted)]  # the fixture's rate limit is per user
    results: list[int] = [0] * wanted

    def one(i: int) -> None:
        body = {"input": "say done", "provider": "openai", "tools": [], "timeout_s": 60}
        resp = requests.post(
            server.url + "/api/v1/runs", json=body, headers={"Authorization": f"Token {tokens[i]}"}, timeout=60
        )
        results[i] = resp.status_code

    threads = [threading.Thread(target=one, args=(i,)) for i in range(wanted)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)

    assert everyone.is_set(), f"only {len(arrived)} runs were waiting on the model at once"
    assert results == [201] * wanted
