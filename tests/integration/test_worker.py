"""`manage.py run_worker`: one process keeps many background runs in flight, and hands them back on SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest
from django_tasks_db.models import DBTaskResult

from agents.models import Run
from agents.runs import drive, submit
from tests.integration._support import MANAGE, PYTHON, ROOT, Barrier, app_env, quick_user
from tests.providers.stub_llm import OPENAI_PATH, fake_key, openai_text

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _openai_configured(settings):
    settings.OPENAI_API_KEY = fake_key()  # runs are validated here; the worker process gets its own key


def queue_runs(n: int) -> list[str]:
    owner = quick_user("wendy")
    options = submit.RunOptions(input="say done", mode="background", provider="openai", tools=[], timeout_s=60)
    return [str(submit.submit_run(owner=owner, options=options).pk) for _ in range(n)]


def worker(stub, *args: str) -> subprocess.Popen:
    env = app_env(OPENAI_API_KEY=fake_key(), OPENAI_BASE_URL=stub.url + "/v1", LOG_LEVEL="WARNING")
    return subprocess.Popen(
        [PYTHON, MANAGE, "run_worker", "--interval", "0.05", *args],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_one_process_keeps_40_runs_waiting_on_the_model_at_once(stub):
    ids = queue_runs(40)
    barrier = Barrier(stub, wanted=40)
    barrier.release.set()

    proc = worker(stub, "--batch", "--concurrency", "50")
    _, err = proc.communicate(timeout=60)

    assert proc.returncode == 0, err[-3000:]
    assert barrier.everyone.is_set(), f"only {barrier.arrived} runs waited on the model at once"
    runs = Run.objects.filter(pk__in=ids)
    assert sorted({(r.status, r.stop_reason, r.output) for r in runs}) == [("done", "final_answer", "done")]


def test_sigterm_hands_runs_in_flight_back_to_the_queue_at_once(stub):
    ids = queue_runs(5)
    barrier = Barrier(stub, wanted=5)  # they wait until released: in flight when the worker is told to stop

    proc = worker(stub, "--concurrency", "10", "--drain", "0.2")
    assert barrier.everyone.wait(30), "the runs never reached the model"
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)

    assert proc.returncode == 0, err[-3000:]
    assert time.monotonic() - started < 10
    runs = list(Run.objects.filter(pk__in=ids))
    assert {(r.status, r.lease_owner) for r in runs} == {("running", "")}  # released, not left held
    assert DBTaskResult.objects.filter(status="READY").count() == 5  # back on the queue

    barrier.release.set()
    again = worker(stub, "--batch", "--concurrency", "10")
    _, err = again.communicate(timeout=60)
    assert again.returncode == 0, err[-3000:]
    assert {r.stop_reason for r in Run.objects.filter(pk__in=ids)} == {"final_answer"}


def test_run_worker_refuses_to_start_without_gevent():
    from django.core.management import call_command
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="gevent"):
        call_command("run_worker", "--batch")


def test_two_worker_processes_share_one_queue_and_never_double_a_run(stub):
    """The multi-machine recipe: several run_worker processes on one database; each run is driven exactly once."""
    ids = queue_runs(30)
    barrier = Barrier(stub, wanted=30)
    barrier.release.set()

    procs = [worker(stub, "--batch", "--concurrency", "20") for _ in range(2)]
    errors = [p.communicate(timeout=60)[1] for p in procs]

    assert [p.returncode for p in procs] == [0, 0], errors
    assert barrier.everyone.is_set()  # 30 runs waited at once: more than either process's 20 alone
    runs = list(Run.objects.filter(pk__in=ids))
    assert {(r.status, r.stop_reason) for r in runs} == {("done", "final_answer")}
    assert all(list(r.steps.values_list("index", flat=True)) == [0] for r in runs)
    assert stub.count("POST", OPENAI_PATH) == 30  # one model call per run: none repeated, none doubled
    workers = {w for t in DBTaskResult.objects.all() for w in t.worker_ids}
    assert len(workers) == 2


def test_the_worker_expires_approvals_on_its_schedule_and_the_run_goes_on(stub, settings):
    """No request is involved: the worker's own sweep denies the expired call (`reviewer: null`, `reason:
    "expired"`) and then finishes the run as after any denial."""
    from datetime import timedelta

    from django.utils import timezone

    from agents.models import Step
    from tests.providers.stub_llm import openai_tool_calls

    settings.OPENAI_BASE_URL = stub.url + "/v1"
    stub.add("POST", OPENAI_PATH, json=openai_tool_calls([("s1", "search", {"query": "django"})]))
    stub.add("POST", OPENAI_PATH, json=openai_text("done"), repeat=True)
    owner = quick_user("erin")
    options = submit.RunOptions(input="look it up", mode="background", provider="openai", approval_ttl_s=60)
    run = submit.submit_run(owner=owner, options=options)
    assert drive.run_background(run_id=run.pk) == "awaiting_approval"
    Run.objects.filter(pk=run.pk).update(approval_expires_at=timezone.now() - timedelta(seconds=1))

    proc = worker(stub)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and Run.objects.get(pk=run.pk).status != "done":
            time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)

    run.refresh_from_db()
    assert (run.status, run.output) == ("done", "done"), err[-3000:]
    approvals = [s.data for s in Step.objects.filter(run=run, kind="approval")]
    assert approvals == [
        {
            "call_id": "s1",
            "name": "search",
            "original_arguments": {"query": "django"},
            "arguments": {"query": "django"},
            "approved": False,
            "reviewer": None,
            "reason": "expired",
        }
    ]
    assert stub.count("GET", "/") == 0  # the search never ran


def test_one_claim_takes_as_many_tasks_as_can_start_in_queue_order(django_assert_num_queries):
    """A claim takes up to the pool's free room in one transaction (one query, one UPDATE per task), in the queue's
    order, for this worker; `db_worker` takes one task per transaction."""
    from agents.background.worker import ConcurrentWorker

    ids = queue_runs(5)
    worker = ConcurrentWorker(
        concurrency=3, drain_s=0, queue_names=["default"], interval=0.05, batch=True, backend_name="default",
        startup_delay=False, max_tasks=None, worker_id="w-test", excluded_queue_names=[],
    )  # fmt: skip

    # BEGIN, the query, an UPDATE per task, COMMIT; one at a time, as db_worker claims, was 3 × 4
    with django_assert_num_queries(1 + 1 + 3 + 1):
        first = worker._claim(3)
    assert [t.args_kwargs["args"][0] for t in first] == ids[:3]
    assert [t.args_kwargs["args"][0] for t in worker._claim(10)] == ids[3:]
    assert worker._claim(10) == []
    tasks = DBTaskResult.objects.all()
    assert {(t.status, tuple(t.worker_ids)) for t in tasks} == {("RUNNING", ("w-test",))} and len(tasks) == 5
