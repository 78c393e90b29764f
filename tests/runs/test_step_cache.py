"""A take of a run this process committed last reads none of its steps again (agents/runs/step_cache.py); any other
take reads them all, and what the cache gives is exactly what the database holds."""

from __future__ import annotations

import contextlib

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from agents.models import Run, RunMode, RunStatus, Step
from agents.runs import review, rows, step_cache, submit
from bench.advance import goal

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def empty_cache():
    step_cache.forget()
    yield
    step_cache.forget()


@pytest.fixture
def durable(transactional_db):
    """Outside any transaction, as a request or a worker is: each commit is durable when it returns, and what waits
    for it runs at once."""
    return contextlib.nullcontext


def _start(user, turns: int = 6) -> Run:
    options = submit.RunOptions(
        input=goal(turns), mode=RunMode.STEP, provider="demo", tools=["calculator"], max_turns=turns, timeout_s=600
    )
    return submit.submit_run(owner=user, options=options)


def _advance(user, run: Run) -> tuple[Run, int]:
    """One advance, and how many statements of it read the run's steps."""
    with CaptureQueriesContext(connection) as ctx:
        run = review.advance_run(run_id=run.pk, actor=user, owner_id=user.pk)
    reads = [q["sql"] for q in ctx.captured_queries if q["sql"].startswith("SELECT") and '"agents_step"' in q["sql"]]
    return run, len(reads)


def test_only_the_first_take_reads_the_steps_and_the_state_is_what_is_stored(alice, durable):
    with durable():
        run = _start(alice)
    reads = []
    while run.status == RunStatus.RUNNING:
        entry = step_cache._runs.get(str(run.pk))
        if entry is not None:  # what the next take will use is what the database holds at that version
            assert entry[0] == Run.objects.get(pk=run.pk).version
            assert entry[1] == rows.step_events(run)
        with durable():
            run, read = _advance(alice, run)
        reads.append(read)
    assert run.output == "6" and len(reads) == 5
    assert reads == [1, 0, 0, 0, 0]  # the submit's commit had nothing to follow; then each take is this process's
    assert str(run.pk) not in step_cache._runs  # done: taken no more


def test_a_version_committed_elsewhere_is_read_from_the_database(alice, durable):
    with durable():
        run = _start(alice)
        run, _ = _advance(alice, run)
    # Another process's commit: a step appended and the version moved on (as its unit commit does).
    last = Step.objects.filter(run=run).order_by("-index").first()
    Step.objects.create(run=run, index=last.index + 1, kind="tool", data={"name": "calculator", "observation": "9"})
    Run.objects.filter(pk=run.pk).update(version=F("version") + 1)
    run.refresh_from_db()
    with durable():
        assert len(step_cache.steps_of(run)) == last.index + 2  # read: the new step is there
    with CaptureQueriesContext(connection) as ctx:
        again = step_cache.steps_of(run)
    assert again == rows.step_events(run) and not ctx.captured_queries  # and now known at that version


def test_what_a_rolled_back_transaction_read_or_committed_is_not_kept(alice, durable):
    run = _start(alice)
    with pytest.raises(RuntimeError), transaction.atomic():
        step_cache.steps_of(Run.objects.get(pk=run.pk))
        review.advance_run(run_id=run.pk, actor=alice, owner_id=alice.pk)
        raise RuntimeError
    assert not step_cache._runs


def test_a_returned_list_is_the_callers_own(alice, durable):
    with durable():
        run = _start(alice)
        run, _ = _advance(alice, run)
    run.refresh_from_db()
    steps = step_cache.steps_of(run)
    steps.append({"index": 99})
    assert step_cache.steps_of(run) == rows.step_events(run)


def test_the_least_recently_taken_run_goes_past_max_runs(alice, durable, monkeypatch):
    monkeypatch.setattr(step_cache, "MAX_RUNS", 2)
    with durable():
        runs = [_start(alice) for _ in range(3)]
        for run in runs:
            _advance(alice, run)
    assert list(step_cache._runs) == [str(run.pk) for run in runs[1:]]
