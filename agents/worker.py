"""A background worker that keeps many runs in flight: one greenlet per task, django-tasks-db's queue and claim.

django-tasks-db's own `db_worker` runs one task at a time, so a process drives one background run at a time while
that run mostly waits on its model. Here (under gevent, patched by `manage.py run_worker` before Django loads) one
process claims up to `concurrency` tasks and runs each in its own greenlet; a run waiting on its model is a parked
greenlet that holds no database connection. The queue, the claim (`select_for_update(skip_locked)`, or an exclusive
transaction on SQLite) and the result bookkeeping are django-tasks-db's, so any number of such processes on any
number of machines share one queue, beside plain `db_worker`s.
"""

from __future__ import annotations

import logging
import signal
import time

import gevent
from django.db import close_old_connections, connections
from django.db.utils import OperationalError
from django_tasks_db.management.commands.db_worker import Worker
from django_tasks_db.models import DBTaskResult
from django_tasks_db.utils import exclusive_transaction, is_locked_database_exception
from gevent.pool import Pool

from reactsite import green

log = logging.getLogger(__name__)


class ConcurrentWorker(Worker):
    """django-tasks-db's Worker, claiming tasks while fewer than `concurrency` run, each in its own greenlet."""

    def __init__(self, *, concurrency: int, drain_s: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.pool, self.drain_s = Pool(concurrency), drain_s
        self.in_flight: dict[gevent.Greenlet, str] = {}

    def configure_signals(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            gevent.signal_handler(sig, self.stop)

    def stop(self) -> None:
        """Claim nothing more; runs in flight get `drain_s` to finish, then go back on the queue."""
        log.warning("Shutting down: %d run(s) in flight", len(self.in_flight))
        self.running = False

    def run(self) -> None:
        log.info("Starting worker worker_id=%s concurrency=%d", self.worker_id, self.pool.size)
        sweeper = gevent.spawn(self._sweep)
        while self.running:
            self.pool.wait_available()
            claimed = self._claim(self.pool.free_count())
            for task in claimed:
                self._start(task)
            if claimed:
                continue
            if self.batch and not self.in_flight:
                break
            gevent.sleep(self.interval)
        sweeper.kill()
        self._drain()

    def _sweep(self) -> None:
        """Every third of a lease: hand runs whose worker died (anywhere) to the queue, and deny (as expired) the calls
        of paused runs whose approval time is up (those runs go on as after a denial), queue again webhook deliveries
        whose task was lost; hourly, retention."""
        from agents import leases, retention, services, webhooks

        next_prune = 0.0  # with AGENT_RETENTION_DAYS set: at start, then hourly
        while self.running:
            try:
                leases.sweep_orphans()
                services.sweep_expired_approvals()
                webhooks.sweep_stuck()
                if time.monotonic() >= next_prune:  # in its own greenlet: a long prune never delays the sweeps
                    next_prune = time.monotonic() + retention.SCHEDULE_S
                    gevent.spawn(self._prune, retention)
            except Exception:  # noqa: BLE001 - a failed sweep is retried next round; the worker goes on
                log.exception("sweep failed")
            finally:
                connections.close_all()
            gevent.sleep(leases.lease_s() / 3)

    @staticmethod
    def _prune(retention) -> None:
        try:
            pruned = retention.scheduled()
            if pruned is not None and pruned.total:
                log.info("pruned", extra={"rows": pruned.counts})
        except Exception:  # noqa: BLE001 - retried at the next schedule
            log.exception("prune failed")
        finally:
            connections.close_all()

    def _claim(self, limit: int) -> list[DBTaskResult]:
        """Up to `limit` ready tasks (as many as can start now), claimed for this worker in one transaction: the same
        query, order and claim as `db_worker`'s, which takes one task per transaction. With a deep queue that is
        three statements fewer per task (the transaction's begin and end, the query), and a claimed task never waits:
        `limit` is the pool's free room."""
        close_old_connections()
        tasks = DBTaskResult.objects.ready().filter(backend_name=self.backend_name)
        if not self.process_all_queues:
            tasks = tasks.filter(queue_name__in=self.queue_names)
        try:
            with exclusive_transaction(tasks.db):
                claimed = list(tasks.select_for_update(skip_locked=True)[: max(limit, 1)])
                for task in claimed:
                    task.claim(self.worker_id)
                return claimed
        except OperationalError as exc:
            if is_locked_database_exception(exc):
                return []  # another process holds the queue for a moment
            raise

    def _start(self, task: DBTaskResult) -> None:
        greenlet = self.pool.spawn(self._run_one, task)
        args = task.args_kwargs.get("args") or [""]
        self.in_flight[greenlet] = str(args[0])
        greenlet.link(lambda g: self.in_flight.pop(g, None))

    def _run_one(self, task: DBTaskResult) -> None:
        green.lend()  # an idle connection of an earlier task, if there is one (reactsite/green.py)
        try:
            self.run_task(task)
        finally:
            close_old_connections()  # an obsolete or broken one is closed ...
            green.take_back()  # ... the rest go back for the next task

    def _drain(self) -> None:
        """Wait for runs in flight; past `drain_s`, stop them: each hands its run back to the queue as it unwinds."""
        deadline = time.monotonic() + self.drain_s
        while self.in_flight and time.monotonic() < deadline:
            gevent.sleep(0.1)
        self.pool.kill(block=True, timeout=10)  # GreenletExit at their next wait (agents.services._hand_back)
        connections.close_all()
        green.close_idle()
