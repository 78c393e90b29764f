"""Django's tasks API over Celery (`AGENT_TASK_BACKEND=celery`): the same task bodies as the database queue.

A thin backend of our own rather than django-tasks-celery (0.1.x when this was written: docs/operations.md says why):

- **Enqueue on commit.** `enqueue()` inside a transaction sends the message once the transaction commits, and never
  if it rolls back, as a task row of the database queue would commit or vanish with it. Outside one, it is sent now.
- **Registered where defined.** Each task of Django's tasks API (agents/tasks.py) becomes the Celery task of the same
  path when it is defined (`validate_task`, in every process): the worker finds every task without a list of names.
- **Acknowledged late.** A message is acknowledged once its task has run (`acks_late`, `reject_on_worker_lost`): a
  worker killed mid-run leaves it to be delivered again. The run's lease decides who drives the run: a second
  delivery of a run another worker holds is queued again for later, and one of a finished run is skipped
  (agents/runs/drive.py `run_background`).
- **No results.** A task's outcome is in the rows it wrote (a run's status, a delivery's attempts): `get_result` is
  not supported, as on any backend without `supports_get_result`.

`queue_depth()` is what the metrics' queue gauge reads: the messages waiting in the broker's queue.
"""

from __future__ import annotations

import logging
import time
import uuid
from datetime import UTC, datetime
from functools import partial
from typing import Any

from celery import signals
from django.db import transaction
from django.tasks import DEFAULT_TASK_QUEUE_NAME, Task, TaskResult, TaskResultStatus
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.signals import task_enqueued

from agents.background import metrics_server
from agents.runs import telemetry
from reactsite.celery import app

log = logging.getLogger(__name__)
SENT_AT = "reactsite_sent_at"  # the message header with the time it was sent (epoch seconds): the queue wait
_registered: set[str] = set()


@signals.worker_ready.connect
def _serve_metrics(sender: Any = None, **kwargs: Any) -> None:
    """A worker-only machine's /metrics, on its own port (with AGENT_METRICS and AGENT_WORKER_METRICS_PORT)."""
    metrics_server.start_from_settings()


class CeleryBackend(BaseTaskBackend):
    supports_defer = True
    supports_get_result = False

    def validate_task(self, task: Task) -> None:
        super().validate_task(task)
        register(task)

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:
        self.validate_task(task)
        result = TaskResult(
            task=task,
            id=str(uuid.uuid4()),
            status=TaskResultStatus.READY,
            enqueued_at=datetime.now(UTC),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=list(args),
            kwargs=dict(kwargs),
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        transaction.on_commit(partial(_send, task, result.id, result.args, result.kwargs), robust=False)
        task_enqueued.send(sender=type(self), task_result=result)
        return result

    def queue_depth(self, queue_name: str = DEFAULT_TASK_QUEUE_NAME) -> int:
        """Messages waiting in the broker's queue (not those a worker holds, prefetched or running)."""
        name = _celery_queue(queue_name)
        with app.connection_for_read() as conn:
            try:
                return int(conn.default_channel.queue_declare(queue=name, passive=True).message_count)
            except conn.channel_errors:  # no such queue yet: nothing was ever sent to it, and no worker declared it
                return 0


def _celery_queue(queue_name: str) -> str:
    """Django's queue `default` is Celery's default queue (CELERY_TASK_DEFAULT_QUEUE); any other keeps its name."""
    return app.conf.task_default_queue if queue_name == DEFAULT_TASK_QUEUE_NAME else queue_name


def _send(task: Task, task_id: str, args: list, kwargs: dict) -> None:
    options: dict[str, Any] = {"queue": _celery_queue(task.queue_name), "headers": {SENT_AT: time.time()}}
    if task.run_after is not None:
        options["eta"] = task.run_after
    app.send_task(task.module_path, args=args, kwargs=kwargs, task_id=task_id, **options)


def register(task: Task) -> None:
    """Make `task` the Celery task of its path (once per process; `Task.using()` copies are the same task)."""
    name = task.module_path
    if name in _registered:
        return
    _registered.add(name)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        sent_at = getattr(self.request, SENT_AT, None)
        due = max(float(sent_at), _eta_s(self.request.eta)) if sent_at is not None else None
        with telemetry.task(name, None if due is None else time.time() - due):
            return task.call(*args, **kwargs)

    run.__name__ = run.__qualname__ = name.rsplit(".", 1)[-1]
    app.task(name=name, bind=True, acks_late=True, reject_on_worker_lost=True, ignore_result=True)(run)


def _eta_s(eta: Any) -> float:
    """A message's `eta` (an ISO string, a datetime or None) in epoch seconds; 0 for none."""
    if not eta:
        return 0.0
    if isinstance(eta, str):
        eta = datetime.fromisoformat(eta)
    return eta.timestamp()
