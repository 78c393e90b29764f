"""Concurrency on a real database: the run lease, idempotency and rate limits with real threads and processes.

A model call that must overlap another request is held open by the stub (released by the test), so every race
here is forced, not hoped for. Each thread closes its own database connection when it ends.
"""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta

import pytest
import requests
from django.db import connection, transaction
from django.utils import timezone
from rest_framework.test import APIClient

from agents import errors
from agents.models import IdempotencyKey, Run, RunStatus, Step
from agents.runs import drive, leases, review, rows, store, submit
from tests.integration._support import (
    app_env,
    in_threads,
    quick_user,
    run_py,
    token_key,
    user_far_from_window_edge,
)
from tests.integration.conftest import GUNICORN_RATE_LIMIT, GUNICORN_RATE_LIMIT_COUNT
from tests.providers.stub_llm import OPENAI_PATH, fake_key, openai_text, openai_tool_calls

QUESTION = "What is 12*7, plus 1?"
CALL_12x7 = openai_tool_calls([("call_1", "calculator", {"expression": "12*7"})])
HOLD_S = 15.0  # the longest the stub holds a reply when the test never releases it (a failing test)


def redis_cache(settings) -> bool:
    return settings.CACHES["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache"


@pytest.fixture
def user(transactional_db):
    return quick_user("tess")


@pytest.fixture
def openai_stub(settings, stub):
    """The openai provider pointed at the stub; rate limits out of the way unless a test sets its own."""
    settings.OPENAI_API_KEY = fake_key()
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    settings.AGENT_RATE_LIMIT = "1000/m"
    return stub


class Gate:
    """A stub reply that is held until the test releases it; `entered` is set when the request arrives."""

    def __init__(self, stub, reply: dict) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        payload = json.dumps(reply).encode()

        def handler(_request):
            self.entered.set()
            self.release.wait(HOLD_S)
            return 200, {"Content-Type": "application/json"}, payload

        stub.add("POST", OPENAI_PATH, handler=handler)

    def wait_entered(self) -> None:
        assert self.entered.wait(HOLD_S), "the model call never reached the stub"


def start(owner, **options) -> Run:
    """A stored run (nothing executed yet)."""
    return submit.start_run(owner=owner, options=submit.RunOptions(input=QUESTION, **options))


def step_indexes(run) -> list[int]:
    return list(run.steps.order_by("index").values_list("index", flat=True))


def race(n: int, call, gate: Gate) -> list:
    """n threads call call(i) at once; the gate opens once n - 1 of them have returned (the losers)."""
    lock, finished = threading.Lock(), [0]

    def target(i: int):
        try:
            return call(i)
        finally:
            with lock:
                finished[0] += 1
                if finished[0] == n - 1:
                    gate.release.set()

    return in_threads(n, target)


def token_client(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_key(user)}")
    return client


# --- the run lease ------------------------------------------------------------------------------------------


def test_two_advances_at_once_one_wins_the_other_is_busy(user, openai_stub):
    run = start(user, provider="openai", mode="step")
    gate = Gate(openai_stub, CALL_12x7)

    results = race(2, lambda i: drive.execute(run_id=run.pk, units=1), gate)

    wins = [r for r in results if isinstance(r, Run)]
    busy = [r for r in results if isinstance(r, errors.RunBusy)]
    assert (len(wins), len(busy)) == (1, 1), results
    assert openai_stub.count("POST", OPENAI_PATH) == 1
    run.refresh_from_db()
    assert (run.status, run.turns, run.lease_owner, run.lease_expires) == ("running", 1, "", None)
    assert list(run.steps.order_by("index").values_list("index", "kind")) == [(0, "model"), (1, "tool")]


def test_twenty_advances_through_the_api_one_200_the_rest_409(user, openai_stub):
    """SQLite serialises the writers (WAL, 20 s busy timeout); the losers still fail fast, nobody waits on the model."""
    run = start(user, provider="openai", mode="step")
    gate = Gate(openai_stub, CALL_12x7)
    key = token_key(user)

    def advance(i: int) -> int:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        resp = client.post(f"/api/v1/runs/{run.pk}/advance", {}, format="json")
        return resp.status_code

    statuses = race(20, advance, gate)

    assert sorted(statuses) == [200] + [409] * 19, statuses
    assert openai_stub.count("POST", OPENAI_PATH) == 1
    run.refresh_from_db()
    assert (run.turns, run.lease_owner) == (1, "")
    assert step_indexes(run) == [0, 1]


def test_a_killed_workers_lease_expires_and_the_run_goes_on(user):
    run = start(user, mode="step")
    drive.execute(run_id=run.pk, units=1)  # steps 0 (model) and 1 (tool) are committed
    _, dead, _ = drive._claim(run.pk, [RunStatus.RUNNING])  # a worker takes the lease, then dies holding it

    with pytest.raises(errors.RunBusy):
        drive.execute(run_id=run.pk)
    assert step_indexes(run) == [0, 1]

    Run.objects.filter(pk=run.pk).update(lease_expires=timezone.now() - timedelta(seconds=1))
    run = drive.execute(run_id=run.pk)

    assert (run.status, run.stop_reason, run.output, run.turns) == ("done", "final_answer", "85", 3)
    assert step_indexes(run) == [0, 1, 2, 3, 4]
    assert (run.lease_owner, run.lease_expires) == ("", None)

    # The dead worker comes back and tries to commit what it had: refused, nothing written.
    state = rows.state_from_rows(run, rows.step_events(run))
    late = [{"index": 5, "kind": "error", "latency_ms": 0, "message": "late"}]
    try:
        with pytest.raises(errors.RunBusy):
            store.commit_unit(store.Held(run, dead, state), state, late, release=True)
    finally:
        leases.drop(dead)  # the dead worker's hold, made up by this test, ends with it
    assert step_indexes(run) == [0, 1, 2, 3, 4]


def test_a_run_continues_in_a_fresh_process(user):
    run = start(user, mode="step")
    drive.execute(run_id=run.pk, units=1)

    proc = run_py(
        f"from agents.runs import drive\nrun = drive.execute(run_id={str(run.pk)!r})\nprint(run.status, run.output)",
        env=app_env(),
    )

    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "done 85"
    run.refresh_from_db()
    assert (run.status, run.stop_reason, run.output, run.turns) == ("done", "final_answer", "85", 3)
    assert list(run.steps.order_by("index").values_list("index", "kind")) == [
        (0, "model"),
        (1, "tool"),
        (2, "model"),
        (3, "tool"),
        (4, "model"),
    ]


def test_no_transaction_or_row_lock_is_held_during_the_model_call(user, openai_stub):
    run = start(user, provider="openai", mode="step")
    gate = Gate(openai_stub, CALL_12x7)
    worker = ThreadResult(lambda: drive.execute(run_id=run.pk, units=1))
    gate.wait_entered()
    try:
        # The worker is inside the model call now. Its lease is committed (visible to this connection) ...
        assert Run.objects.get(pk=run.pk).lease_owner != ""
        # ... and the run row can be written at once: no lock is held (a short lock wait makes a held lock an error).
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND state LIKE 'idle in transaction%%'"
                )
                assert cursor.fetchone()[0] == 0
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("SET LOCAL lock_timeout = '2s'")
                updated = Run.objects.filter(pk=run.pk).update(updated_at=timezone.now())
        else:
            with connection.cursor() as cursor:
                cursor.execute("PRAGMA busy_timeout = 2000")
            try:
                updated = Run.objects.filter(pk=run.pk).update(updated_at=timezone.now())
            finally:
                connection.close()  # the next query reconnects with the configured busy timeout
        assert updated == 1
    finally:
        gate.release.set()
    result = worker.join()

    assert isinstance(result, Run), result
    assert (result.status, result.turns) == ("running", 1)
    assert step_indexes(result) == [0, 1]


def test_cancel_while_a_worker_is_in_the_model_call(user, openai_stub):
    run = start(user, provider="openai", mode="sync")
    gate = Gate(openai_stub, CALL_12x7)
    openai_stub.add("POST", OPENAI_PATH, json=openai_text("85"))  # never asked for: the worker stops first
    worker = ThreadResult(lambda: drive.execute(run_id=run.pk))
    gate.wait_entered()
    try:
        cancelled = drive.cancel_run(run_id=run.pk)
        assert (cancelled.status, cancelled.stop_reason) == ("done", "cancelled")
    finally:
        gate.release.set()
    result = worker.join()

    assert isinstance(result, Run), result
    run.refresh_from_db()
    assert (run.status, run.stop_reason, run.ok, run.output) == ("done", "cancelled", False, None)
    assert run.turns == 1  # the model call that happened is counted ...
    assert step_indexes(run) == []  # ... but nothing is appended to a run once it is done, and no tool ran
    assert openai_stub.count("POST", OPENAI_PATH) == 1
    assert (run.lease_owner, run.lease_expires) == ("", None)


def test_a_stream_that_sent_done_has_every_step_of_a_run_cancelled_during_a_model_call(user, openai_stub):
    """`done` is the last event, and nothing is appended after it (issue 10.3): a cancel during a slow model call."""
    from agents.api.events import run_events

    openai_stub.add("POST", OPENAI_PATH, json=CALL_12x7)
    gate = Gate(openai_stub, openai_text("85"))
    first = drive.execute(run_id=start(user, provider="openai", mode="step").pk, units=1)  # one unit committed
    assert step_indexes(first) == [0, 1]
    worker = ThreadResult(lambda: drive.execute(run_id=first.pk, units=1))
    gate.wait_entered()
    try:
        drive.cancel_run(run_id=first.pk)
        frames = list(run_events(first.pk, -1, poll_s=0.05, max_s=10))
    finally:
        gate.release.set()
        connection.close()
    result = worker.join()

    assert isinstance(result, Run), result
    assert frames[-1].startswith("event: done")
    streamed = [int(f.split("\n")[0][4:]) for f in frames if f.startswith("id: ")]
    assert streamed == step_indexes(result) == [0, 1]
    assert Run.objects.get(pk=first.pk).turns == 2  # the cut unit's model call is still counted


def test_after_an_approval_pause_the_run_is_held_while_it_works(user, openai_stub, settings):
    """The deadline moves by the time spent paused, and the (short, renewed) lease keeps a second worker out while
    the first still works on the run."""
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = openai_stub.url + "/"
    openai_stub.add("GET", "/", json={"Heading": "X", "AbstractText": "X is a letter."})
    openai_stub.add("POST", OPENAI_PATH, json=openai_tool_calls([("call_s", "search", {"query": "x"})]))
    run = drive.execute(run_id=start(user, provider="openai", mode="sync", timeout_s=60).pk)
    assert run.status == "awaiting_approval"
    # The reviewer decides 10 minutes later; the run had 60 s of its budget left when it paused.
    now = timezone.now()
    Run.objects.filter(pk=run.pk).update(updated_at=now - timedelta(minutes=10), deadline=now - timedelta(minutes=9))
    gate = Gate(openai_stub, openai_text("X is a letter."))
    rita = quick_user("rita", is_superuser=True, is_staff=True)
    worker = ThreadResult(lambda: review.decide_approval(run_id=run.pk, actor=rita, approved=True))
    gate.wait_entered()
    try:
        held = Run.objects.get(pk=run.pk)
        assert held.deadline > timezone.now() + timedelta(seconds=45)  # the paused time was given back
        assert held.lease_owner and held.lease_expires > timezone.now()  # held while the model call lasts
        with pytest.raises(errors.RunBusy):
            drive.execute(run_id=run.pk, units=1)
    finally:
        gate.release.set()
    result = worker.join()

    assert isinstance(result, Run), result
    assert (result.status, result.stop_reason, result.output) == ("done", "final_answer", "X is a letter.")
    assert list(result.steps.order_by("index").values_list("kind", flat=True)) == ["model", "approval", "tool", "model"]


@pytest.mark.parametrize("offset_ms", [-20, -5, 0, 5, 20])
def test_a_decision_racing_the_expiry_exactly_one_is_recorded(user, settings, stub, offset_ms):
    """The call expires at T; a reviewer decides around T (offset) while the sweep runs from T on. Whichever takes the
    run's lease first records; the other records nothing (a late decision is refused as expired)."""
    settings.AGENT_RATE_LIMIT = "1000/m"
    settings.TAVILY_API_KEY = ""
    settings.DUCKDUCKGO_URL = stub.url + "/"
    stub.add("GET", "/", json={"Heading": "X", "AbstractText": "X is a letter."}, repeat=True)
    run = submit.submit_run(owner=user, options=submit.RunOptions(input="search python", mode="step"))
    assert run.status == "awaiting_approval"
    expires = timezone.now() + timedelta(milliseconds=300)
    Run.objects.filter(pk=run.pk).update(approval_expires_at=expires)
    rita = quick_user("rita", is_superuser=True, is_staff=True)

    def at(moment) -> None:
        time.sleep(max((moment - timezone.now()).total_seconds(), 0))

    def decide() -> object:
        at(expires + timedelta(milliseconds=offset_ms))
        return review.decide_approval(run_id=run.pk, actor=rita, approved=True)

    def sweep() -> int:
        at(expires)
        expired = 0
        for _ in range(50):  # the worker's schedule, compressed
            expired += review.sweep_expired_approvals()
            if Run.objects.get(pk=run.pk).status != "awaiting_approval":
                break
            time.sleep(0.01)
        return expired

    results = in_threads(2, lambda i: (decide, sweep)[i]())

    approvals = list(Step.objects.filter(run=run, kind="approval").values_list("data", flat=True))
    assert len(approvals) == 1, (results, approvals)
    decided = isinstance(results[0], Run)
    assert approvals[0]["reviewer"] == ("rita" if decided else None), results
    assert results[1] == (0 if decided else 1), results
    if not decided:
        assert isinstance(results[0], errors.ServiceError), results  # refused: busy or expired (409)
    run.refresh_from_db()
    assert (run.status, run.lease_owner) != ("awaiting_approval", "")


class ThreadResult:
    """Run fn in a thread (closing its DB connection at the end); join() returns its result or exception."""

    def __init__(self, fn) -> None:
        self._result = None

        def body():
            try:
                self._result = fn()
            except BaseException as exc:  # noqa: BLE001 - handed back to the test
                self._result = exc
            finally:
                connection.close()

        self._thread = threading.Thread(target=body, daemon=True)
        self._thread.start()

    def join(self, timeout: float = 30):
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "the worker thread did not finish"
        return self._result


# --- idempotency ----------------------------------------------------------------------------------------------


def test_twenty_identical_creates_with_one_idempotency_key_make_one_run(user, settings):
    settings.AGENT_RATE_LIMIT = "1000/m"
    key = token_key(user)
    body = {"input": QUESTION}

    def create(i: int):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        resp = client.post("/api/v1/runs", body, format="json", headers={"Idempotency-Key": "same-key-1"})
        return resp.status_code, (resp.json().get("id") if resp.status_code == 201 else None)

    results = in_threads(20, create)

    assert Run.objects.count() == 1
    run = Run.objects.get()
    assert {status for status, _ in results} <= {201, 409}, results
    assert {run_id for status, run_id in results if status == 201} <= {str(run.pk)}
    assert any(status == 201 for status, _ in results)  # the first one answered
    assert (run.status, run.output) == ("done", "85")
    # After the race the key replays the first response.
    again = token_client(user).post("/api/v1/runs", body, format="json", headers={"Idempotency-Key": "same-key-1"})
    assert (again.status_code, again.json()["id"]) == (201, str(run.pk))
    assert Run.objects.count() == 1
    assert IdempotencyKey.objects.filter(user=user).count() == 1


@pytest.mark.parametrize("mode", ["background", "sync"])
def test_twenty_creates_on_one_thread_at_once_make_exactly_one_run(user, settings, mode):
    """One run at a time per thread, held by the database (a partial unique index), not only by the check that
    reads the thread's latest run: racers that all passed the check still get exactly one 201/202."""
    from agents.models import Thread

    settings.AGENT_RATE_LIMIT = "1000/m"
    key, thread = token_key(user), Thread.objects.create(owner=user)
    body = {"input": "What is 2+2?", "thread_id": str(thread.pk), "mode": mode}

    def create(i: int) -> int:
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        return client.post("/api/v1/runs", body, format="json").status_code

    statuses = in_threads(20, create)

    created = 202 if mode == "background" else 201
    assert statuses.count(created) >= 1, statuses
    assert set(statuses) <= {created, 409}, statuses
    runs = Run.objects.filter(thread=thread)
    if mode == "background":  # a queued run holds the thread: exactly one of the twenty got in
        assert statuses.count(created) == 1 and runs.count() == 1
    else:  # a sync run is done when it answers, so a later racer may follow it: never two at once, nothing lost
        assert runs.count() == statuses.count(created)
        assert all(r.status == RunStatus.DONE and r.output == "4" for r in runs)


# --- rate limits ------------------------------------------------------------------------------------------------


def test_rate_limit_holds_under_concurrency(transactional_db, settings):
    settings.AGENT_RATE_LIMIT = "20/m"
    user = user_far_from_window_edge("rory")
    key = token_key(user)

    def invoke(i: int):
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
        resp = client.post("/api/v1/tools/calculator/invoke", {"arguments": {"expression": "6*7"}}, format="json")
        return resp.status_code, resp.headers.get("Retry-After")

    results = in_threads(60, invoke)

    statuses = sorted(status for status, _ in results)
    assert set(statuses) <= {200, 429}, statuses
    accepted = statuses.count(200)
    assert all(int(retry) >= 1 for status, retry in results if status == 429)
    # Exact on both caches: Redis INCR, or the database cache's locked incr (reactsite/serving/cache.py).
    assert accepted == 20, statuses


def test_rate_limit_counter_is_shared_with_another_process(server, settings):
    """The budget spent in this process is spent for gunicorn's workers too (the same counter in the cache)."""
    settings.AGENT_RATE_LIMIT = GUNICORN_RATE_LIMIT
    user = user_far_from_window_edge("sam")
    client = token_client(user)
    for _ in range(GUNICORN_RATE_LIMIT_COUNT):
        resp = client.post("/api/v1/tools/calculator/invoke", {"arguments": {"expression": "1+1"}}, format="json")
        assert resp.status_code == 200, resp.content

    resp = requests.post(
        server.url + "/api/v1/tools/calculator/invoke",
        json={"arguments": {"expression": "1+1"}},
        headers={"Authorization": f"Token {token_key(user)}"},
        timeout=10,
    )

    assert resp.status_code == 429, resp.text
    assert int(resp.headers["Retry-After"]) >= 1


def test_rate_limit_counter_is_shared_by_gunicorn_workers(server):
    """N + 1 requests over gunicorn's 2 workers, alternating between them: the (N + 1)th is 429."""
    user = user_far_from_window_edge("uma")
    auth = {"Authorization": f"Token {token_key(user)}"}
    one, two = keep_alive_sessions_on_two_workers(server)
    statuses = []
    with one, two:
        for n in range(GUNICORN_RATE_LIMIT_COUNT + 2):
            session = (one, two)[n % 2]
            resp = session.post(
                f"{server.url}/api/v1/tools/calculator/invoke?n={n}",
                json={"arguments": {"expression": "2+2"}},
                headers=auth,
                timeout=10,
            )
            statuses.append(resp.status_code)

    assert statuses == [200] * GUNICORN_RATE_LIMIT_COUNT + [429, 429], statuses
    served_by = {pid for pid, line in server.access_log() if "/invoke?n=" in line}
    assert len(served_by) == 2, served_by  # both workers counted into, and refused from, the one counter


def keep_alive_sessions_on_two_workers(server) -> tuple[requests.Session, requests.Session]:
    """Two keep-alive connections held by different workers (found by a burst of concurrent connects)."""
    for attempt in range(10):  # the second worker may still be booting right after gunicorn starts
        if attempt:
            time.sleep(0.5)
        sessions = [requests.Session() for _ in range(16)]
        in_threads(
            len(sessions),
            lambda i, a=attempt, ss=sessions: ss[i].get(f"{server.url}/api/v1/health?probe={a}-{i}", timeout=10),
        )
        by_pid: dict[str, requests.Session] = {}
        for pid, line in server.access_log():
            for i, session in enumerate(sessions):
                if f"probe={attempt}-{i} " in line:
                    by_pid.setdefault(pid, session)
        if len(by_pid) >= 2:
            chosen = list(by_pid.values())[:2]
            for session in sessions:
                if session not in chosen:
                    session.close()
            return chosen[0], chosen[1]
        for session in sessions:
            session.close()
    pytest.skip("the kernel handed every connection to one gunicorn worker (the other process test still ran)")


def test_a_lease_is_short_and_renewed_while_a_model_call_lasts(user, openai_stub, settings):
    """No run dies with its worker (issue 11): the lease is seconds, not the run's budget, and the process holding
    the run keeps pushing it forward during a long model call."""
    from agents.runs import recovery

    settings.AGENT_LEASE_S = 1.5
    gate = Gate(openai_stub, openai_text("85"))
    run = start(user, provider="openai", mode="sync", timeout_s=600)
    worker = ThreadResult(lambda: drive.execute(run_id=run.pk))
    gate.wait_entered()
    try:
        first = Run.objects.get(pk=run.pk).lease_expires
        assert first < timezone.now() + timedelta(seconds=2)  # seconds, not the run's 600 s
        time.sleep(2.5)  # longer than a lease: the keeper has renewed it meanwhile
        later = Run.objects.get(pk=run.pk)
        assert later.lease_expires > first and later.lease_expires > timezone.now()
        assert recovery.sweep_orphans() == []  # a live worker's run is nobody's orphan
    finally:
        gate.release.set()
    result = worker.join()
    assert isinstance(result, Run) and result.output == "85"
