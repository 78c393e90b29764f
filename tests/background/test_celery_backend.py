"""The Celery task backend without a broker process: kombu's in-memory transport stands in for RabbitMQ or Redis
(tests/integration/test_celery.py runs the real brokers and workers)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.tasks import TaskResultStatus
from django.utils import timezone

from agents import periodic, tasks
from agents.background import celery_backend
from agents.background.celery_backend import SENT_AT, CeleryBackend
from agents.models import Run, RunStatus
from agents.runs import leases, recovery
from reactsite.celery import app
from tests.conftest import make_user, stored_run_fields


@pytest.fixture
def broker(request):
    """The app on kombu's in-memory transport, a queue of this test's own; the messages sent, read back."""
    before = app.conf.broker_url, app.conf.task_default_queue
    app.conf.broker_url, app.conf.task_default_queue = "memory://localhost/", f"test-{request.node.name[:40]}"
    _forget_connections()  # connections to the new broker
    backend = CeleryBackend("default", {})

    def messages() -> list:
        with app.connection_for_read() as conn:
            queue = conn.SimpleQueue(app.conf.task_default_queue, no_ack=True)
            out = []
            while True:
                try:
                    out.append(queue.get(block=False))
                except queue.Empty:
                    return out

    yield backend, messages
    app.conf.broker_url, app.conf.task_default_queue = before
    _forget_connections()


def _forget_connections() -> None:
    app._pool = None
    app.amqp._producer_pool = None


@pytest.mark.django_db(transaction=True)
def test_a_task_is_sent_when_its_transaction_commits_and_never_when_it_rolls_back(broker):
    backend, messages = broker
    with transaction.atomic():
        result = backend.enqueue(tasks.advance_in_background, ("run-1",), {})
        assert backend.queue_depth() == 0  # not yet: the run row is not visible to a worker either
    assert (result.status, result.args, result.backend) == (TaskResultStatus.READY, ["run-1"], "default")
    assert backend.queue_depth() == 1

    with pytest.raises(RuntimeError), transaction.atomic():
        backend.enqueue(tasks.advance_in_background, ("run-2",), {})
        raise RuntimeError("rolled back")
    assert backend.queue_depth() == 1

    [message] = messages()
    assert message.headers["task"] == "agents.tasks.advance_in_background"
    assert message.headers["id"] == result.id
    assert message.payload[0] == ["run-1"]  # protocol 2: (args, kwargs, embed)
    assert isinstance(message.headers[SENT_AT], float)


@pytest.mark.django_db(transaction=True)
def test_a_delayed_task_carries_its_eta(broker):
    backend, messages = broker
    later = timezone.now() + timedelta(seconds=30)
    backend.enqueue(tasks.advance_in_background.using(run_after=later), ("run-1",), {})
    [message] = messages()
    assert abs((celery_backend._eta_s(message.headers["eta"])) - later.timestamp()) < 0.01


def test_every_task_of_the_project_is_a_celery_task_acknowledged_late():
    for task in (tasks.advance_in_background, tasks.deliver_webhook, tasks.run_periodic, tasks.score_run):
        celery_backend.register(task)
        celery_task = app.tasks[task.module_path]
        assert (celery_task.acks_late, celery_task.reject_on_worker_lost, celery_task.ignore_result) == (
            True,
            True,
            True,
        )


def test_a_celery_task_runs_the_django_task_body(monkeypatch):
    seen = []
    monkeypatch.setitem(periodic._SWEEPS, "test-sweep", periodic.Sweep("test-sweep", lambda: seen.append(1), float))
    celery_backend.register(tasks.run_periodic)
    assert app.tasks["agents.tasks.run_periodic"].apply(args=["test-sweep"]).get() == "done"
    assert app.tasks["agents.tasks.run_periodic"].apply(args=["no-such-sweep"]).get() == "skipped"
    assert seen == [1]


def test_beat_sends_every_registered_sweep_on_its_interval(settings):
    settings.AGENT_LEASE_S = 6.0
    from reactsite.celery import _schedule_sweeps

    _schedule_sweeps(app)
    schedule = app.conf.beat_schedule
    assert {entry["args"][0] for entry in schedule.values()} == {s.name for s in periodic.sweeps()}
    assert {entry["task"] for entry in schedule.values()} == {"agents.tasks.run_periodic"}
    assert schedule["reactsite.orphans"]["schedule"] == 2.0  # a third of a lease
    assert schedule["reactsite.retention"]["schedule"] == 3600.0


def test_a_sweep_name_registered_twice_by_two_functions_is_refused():
    with pytest.raises(ValueError, match="two sweeps named 'orphans'"):
        periodic.every("orphans", 1.0)(lambda: None)


@pytest.mark.django_db(transaction=True)
def test_without_task_rows_an_orphan_is_queued_once_and_left_alone_while_its_message_waits(broker, monkeypatch):
    """On Celery the sweep cannot see the broker's messages: it queues an orphan again, clears its dead lease and
    touches it, so the sweeps that follow within two leases leave it alone."""
    backend, messages = broker
    monkeypatch.setattr(recovery, "task_backends", {"default": backend})
    monkeypatch.setattr("agents.runs.handoff.advance_in_background", _on(backend, tasks.advance_in_background))
    owner = make_user("orphaned")
    long_ago = timezone.now() - timedelta(seconds=10 * leases.lease_s())
    run = Run.objects.create(owner=owner, **stored_run_fields(status=RunStatus.RUNNING, mode="background"))
    Run.objects.filter(pk=run.pk).update(lease_owner="dead-worker", lease_expires=long_ago, updated_at=long_ago)

    assert recovery.sweep_orphans() == [str(run.pk)]
    assert recovery.sweep_orphans() == []  # its message waits: not queued twice
    run.refresh_from_db()
    assert (run.lease_owner, run.lease_expires) == ("", None)
    assert [m.payload[0] for m in messages()] == [[str(run.pk)]]


def _on(backend: CeleryBackend, task):
    """`task`, enqueued through `backend` (the process's own backend is the database queue)."""

    class Bound:
        def using(self, **kwargs):
            return _on(backend, task.using(**kwargs))

        def enqueue(self, *args, **kwargs):
            return backend.enqueue(task, args, kwargs)

    return Bound()
