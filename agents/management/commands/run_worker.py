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

    def handle(self, *args, concurrency: int, interval: float, drain: float, batch: bool, queue_name: str, **opts):
        from reactsite.serving.green import patched

        if not patched():
            raise CommandError("run_worker needs gevent's patching: run it as `.venv/bin/python manage.py run_worker`")
        if concurrency < 1 or interval <= 0 or drain < 0:
            raise CommandError("--concurrency must be at least 1, --interval above 0 and --drain at least 0.")
        from agents.background.worker import ConcurrentWorker

        worker = ConcurrentWorker(
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
        from agents.runs import runtime

        runtime.warm()  # the SDKs and tables its first runs would otherwise build while the others wait
        worker.configure_signals()
        try:
            worker.run()
        finally:
            if settings.AGENT_OTEL_TRACES:  # the last spans, sent while gevent still can (not at exit)
                from reactsite.observability import tracing

                tracing.flush()
