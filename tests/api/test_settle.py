"""The settle step (agents/runs/settle.py): after a run ends, however it ends (its last unit's commit, a cancel, a
newer run on its thread interrupting it), the observers are told, then its continuations run in their declared order,
once. The continuations are called, not connected: with no receiver of `run_done` at all they still run."""

from __future__ import annotations

import pytest
from django.dispatch import Signal

from agents.models import Run
from agents.runs import handoff, settle, signals
from tests.api.conftest import create_run, run_url

QUESTION = "What is 12*7, plus 1?"  # three units with the demo model


@pytest.fixture(autouse=True)
def _no_rate_limit(settings):
    settings.AGENT_RATE_LIMIT = "100000/m"


@pytest.fixture
def settled(monkeypatch) -> list[tuple[str, str]]:
    """What settling did, in order: (`observers` or the continuation's name, the run's id). The real continuations
    still run; `run_done` is a fresh signal whose only receiver is this record's observer."""
    done: list[tuple[str, str]] = []
    run_done = Signal()
    run_done.connect(lambda sender, run, **kwargs: done.append(("observers", str(run.pk))), weak=False)
    monkeypatch.setattr(signals, "run_done", run_done)

    def recorded(continuation):
        def record(run: Run) -> None:
            done.append((continuation.__name__, str(run.pk)))
            continuation(run)

        return record

    monkeypatch.setattr(settle, "CONTINUATIONS", tuple(recorded(c) for c in settle.CONTINUATIONS))
    return done


def in_order(run_id: str) -> list[tuple[str, str]]:
    return [
        ("observers", run_id), ("resume_parent", run_id), ("start_next_on_thread", run_id), ("queue_scoring", run_id),
    ]  # fmt: skip


def test_the_continuations_are_declared_in_one_place_in_their_order():
    assert settle.CONTINUATIONS == (settle.resume_parent, settle.start_next_on_thread, settle.scoring.queue_scoring)


@pytest.mark.django_db
def test_a_run_that_finishes_settles_once_after_its_commit(api, settled, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        run = create_run(api, input=QUESTION).json()
        assert settled == []  # not before the commit
    assert len(callbacks) == 1
    assert run["status"] == "done"
    assert settled == in_order(run["id"])

    assert api.post(run_url(run["id"], "cancel")).status_code == 409  # done already: nothing settles again
    assert settled == in_order(run["id"])


@pytest.mark.django_db
def test_a_cancelled_run_settles_once(api, settled):
    run = create_run(api, input=QUESTION, mode="step").json()
    assert settled == []  # a step run waits for its client: it has not ended

    assert api.post(run_url(run["id"], "cancel")).status_code == 200
    assert api.post(run_url(run["id"], "cancel")).status_code == 409
    assert settled == in_order(run["id"])


@pytest.mark.django_db
def test_an_interrupted_thread_run_settles_once(api, settled, django_capture_on_commit_callbacks):
    thread = api.post("/api/v1/threads", {}, format="json").json()["id"]
    active = create_run(api, input=QUESTION, thread_id=thread, mode="step").json()
    with django_capture_on_commit_callbacks(execute=True):
        newer = create_run(api, input="2*3?", thread_id=thread, mode="step", multitask_strategy="interrupt")
    assert newer.status_code == 201
    assert settled == in_order(active["id"])


@pytest.mark.django_db
def test_a_childs_end_takes_its_parent_up_with_no_receiver_of_run_done(api, settled, monkeypatch):
    """The parent's resumption is the child's first continuation, not an observer's doing."""
    parent = create_run(api, input=QUESTION, mode="background").json()
    Run.objects.filter(pk=parent["id"]).update(status="running")
    queued: list[str] = []
    monkeypatch.setattr(handoff, "enqueue", lambda run, **kwargs: queued.append(str(run.pk)))
    child = create_run(api, input=QUESTION, mode="step").json()
    Run.objects.filter(pk=child["id"]).update(parent_id=parent["id"], parent_call_id="c1", depth=1)

    assert api.post(run_url(child["id"], "cancel")).status_code == 200
    assert settled == in_order(child["id"])
    assert queued == [parent["id"]]
