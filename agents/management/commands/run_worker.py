"""`manage.py run_worker`: the background worker that keeps many runs in flight (see agents/background/worker.py)."""

from __future__ import annotations

import os
import socket

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):
    help = (
        "Run background tasks (background runs, decisions put back on the queue) with up to --concurrency of them in "
        "flight at once in this one process. Start as many processes, on as many machines, as you like: they share "
        "the queue in the database."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--concurrency", type=int, default=200, help="tasks in flight at once (default 200)")
        parser.add_argument("--interval", type=float, default=0.2, help="seconds between polls of an empty queue")
        parser.add_argument("--drain", type=float, default=10.0, help="seconds in-flight runs get on shutdown")
        parser.add_argument("--batch", action="store_true", help="exit once the queue is empty and nothing runs")
        parser.add_argument("--queue-name", default="default")
        parser.add_argument(
            "--metrics-port", type=int, default=None,
            help="serve /metrics on this port (default AGENT_WORKER_METRICS_PORT; 0: none; needs AGENT_METRICS=1)",
        )  # fmt: skip

    def handle(self, *args, concurrency: int, interval: float, drain: float, batch: bool, queue_name: str, **opts):
        _check_options(concurrency, interval, drain)
        from agents.background import metrics_server

        port = settings.AGENT_WORKER_METRICS_PORT if opts["metrics_port"] is None else opts["metrics_port"]
        problem = metrics_server.port_problem(port)
        if problem is not None:
            raise CommandError(problem)
        worker = _worker(concurrency, interval, drain, batch, queue_name)
        from agents.runs import runtime

        runtime.warm()  # the SDKs and tables its first runs would otherwise build while the others wait
        worker.configure_signals()
        if port:
            metrics_server.start(settings.AGENT_WORKER_METRICS_HOST, port)
        try:
            worker.run()
        finally:
            metrics_server.stop()
            if settings.AGENT_OTEL_TRACES:  # the last spans, sent while gevent still can (not at exit)
                from reactsite.observability import tracing

                tracing.flush()


def _check_options(concurrency: int, interval: float, drain: float) -> None:
    """CommandError unless gevent has patched this process and the options are in range."""
    from reactsite.serving.green import patched

    if settings.AGENT_TASK_BACKEND != "db":
        raise CommandError(
            f"run_worker takes tasks from the database queue, and AGENT_TASK_BACKEND is "
            f"{settings.AGENT_TASK_BACKEND!r}: start `celery -A reactsite worker` (and one `celery -A reactsite beat`) "
            "instead (docs/operations.md)."
        )
    if not patched():
        raise CommandError("run_worker needs gevent's patching: run it as `.venv/bin/python manage.py run_worker`")
    if concurrency < 1 or interval <= 0 or drain < 0:
        raise CommandError("--concurrency must be at least 1, --interval above 0 and --drain at least 0.")


def _worker(concurrency: int, interval: float, drain: float, batch: bool, queue_name: str):
    """The worker of this process, named for its host and pid, taking tasks of one queue."""
    from agents.background.worker import ConcurrentWorker

    return ConcurrentWorker(
        concurrency=concurrency,
        drain_s=drain,
        queue_names=[queue_name],
        interval=interval,
        batch=batch,
        backend_name="default",
        startup_delay=False,
        max_tasks=None,
        worker_id=f"{socket.gethostname()}-{os.getpid()}"[:64],
        excluded_queue_names=[],
    )
