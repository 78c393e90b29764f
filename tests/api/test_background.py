"""mode=background: 202 with a queued run, a task worker advances it, decisions put it back on the queue."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django_tasks_db.models import DBTaskResult

from agents.models import Run
from agents.runs import drive, leases
from tests.api.conftest import RUNS, create_run
from tests.conftest import client_for

# db_worker closes its database connection between tasks, as a long-lived worker should: these tests commit.
WORKER = pytest.mark.django_db(transaction=True)


def work() -> None:
    """What `manage.py db_worker` does, once: every queued task, then stop."""
    call_command("db_worker", "--batch", "--no-reload", "--no-startup-delay", verbosity=0)


def queued_tasks() -> int:
    return DBTaskResult.objects.filter(status="READY").count()


@WORKER
def test_a_background_run_is_accepted_queued_and_done_by_a_worker(api):
    response = create_run(api, mode="background")

    assert response.status_code == 202
    body = response.json()
    assert (body["status"], body["mode"], body["turns"], body["stop_reason"]) == ("queued", "background", 0, None)
    assert Run.objects.get(pk=body["id"]).steps.count() == 0
    assert queued_tasks() == 1

    work()
    run = api.get(f"{RUNS}/{body['id']}").json()
    assert (run["status"], run["output"], run["turns"]) == ("done", "85", 3)
    assert [s["index"] for s in run["steps"]] == [0, 1, 2, 3, 4]
    assert queued_tasks() == 0


@WORKER
def test_a_paused_background_run_goes_back_on_the_queue_after_the_decision(api, reviewer, search_stub):
    run_id = create_run(api, "search django", mode="background").json()["id"]
    work()
    assert Run.objects.get(pk=run_id).status == "awaiting_approval"
    assert queued_tasks() == 0

    decided = client_for(reviewer).post(f"{RUNS}/{run_id}/advance", {"approval": True}, format="json")
    assert decided.status_code == 200
    assert decided.json()["status"] == "running"  # the tool ran; the model's next turn is the worker's
    assert queued_tasks() == 1

    work()
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason) == ("done", "final_answer")
    assert [s.kind for s in run.steps.order_by("index")] == ["model", "approval", "tool", "model"]


@WORKER
def test_a_cancelled_queued_run_is_left_alone_by_the_worker(api):
    run_id = create_run(api, mode="background").json()["id"]
    assert api.post(f"{RUNS}/{run_id}/cancel").json()["stop_reason"] == "cancelled"

    work()
    run = Run.objects.get(pk=run_id)
    assert (run.status, run.stop_reason, run.turns) == ("done", "cancelled", 0)
    assert run.steps.count() == 0


def test_the_task_itself_skips_a_run_it_cannot_have(api):
    from agents.tasks import advance_in_background

    run_id = create_run(api).json()["id"]  # a sync run: already done
    assert advance_in_background.call(run_id) == "skipped"
    assert advance_in_background.call("00000000-0000-0000-0000-000000000000") == "skipped"


def test_background_runs_honour_idempotency(api):
    headers = {"HTTP_IDEMPOTENCY_KEY": "bg-1"}
    first = api.post(RUNS, {"input": "What is 1+1?", "mode": "background"}, format="json", **headers)
    again = api.post(RUNS, {"input": "What is 1+1?", "mode": "background"}, format="json", **headers)
    assert (first.status_code, again.status_code) == (202, 202)
    assert first.json()["id"] == again.json()["id"]
    assert queued_tasks() == 1


@pytest.mark.parametrize("mode", ["sync", "step"])
def test_other_modes_queue_nothing(api, mode):
    assert create_run(api, mode=mode).status_code == 201
    assert queued_tasks() == 0


def test_execute_accepts_a_queued_run_and_marks_it_running(api):
    run_id = create_run(api, mode="background").json()["id"]
    run = drive.execute(run_id=run_id, units=1)
    assert (run.status, run.turns) == ("running", 1)


# --- no background run is dropped (issue 11) ----------------------------------------------------------------------


@WORKER
def test_a_web_advance_of_a_background_run_leaves_it_on_the_queue(api):
    run_id = create_run(api, mode="background").json()["id"]
    DBTaskResult.objects.all().delete()  # as if the worker had taken the task and the web request came first

    advanced = api.post(f"{RUNS}/{run_id}/advance", {}, format="json")
    assert advanced.status_code == 200 and advanced.json()["status"] == "running"
    assert queued_tasks() == 1  # a worker carries it on

    work()
    assert Run.objects.get(pk=run_id).stop_reason == "final_answer"


@WORKER
def test_a_task_that_finds_its_run_busy_comes_back_later(api):
    from datetime import timedelta

    from django.utils import timezone

    from agents.tasks import advance_in_background

    run_id = create_run(api, mode="background").json()["id"]
    DBTaskResult.objects.all().delete()
    _, held, _ = drive._claim(run_id, ["queued"])  # another worker holds it right now

    assert advance_in_background.call(run_id) == "requeued"
    (task,) = DBTaskResult.objects.filter(status="READY")
    assert task.run_after is not None and task.run_after > timezone.now() + timedelta(seconds=1)

    leases.release(run_id, held)
    DBTaskResult.objects.filter(pk=task.pk).update(run_after=timezone.now())  # its time has come
    work()
    assert Run.objects.get(pk=run_id).stop_reason == "final_answer"


@WORKER
def test_a_queued_runs_budget_starts_when_a_worker_takes_it(api):
    from datetime import timedelta

    from django.utils import timezone

    run_id = create_run(api, mode="background", timeout_s=30).json()["id"]
    long_ago = timezone.now() - timedelta(minutes=5)  # queued 5 minutes ago: its 30 s would be long gone
    Run.objects.filter(pk=run_id).update(created_at=long_ago, deadline=long_ago + timedelta(seconds=30))

    work()
    run = Run.objects.get(pk=run_id)
    assert (run.stop_reason, run.output) == ("final_answer", "85")
    assert run.deadline > timezone.now() + timedelta(seconds=20)
