"""A background worker that keeps many runs in flight: one greenlet per task, django-tasks-db's queue and claim.

django-tasks-db's own `db_worker` runs one task at a time, so a process drives one background run at a time while
that run mostly waits on its model. Here (under gevent, patched by `manage.py run_worker` before Django loads) one
process claims up to `concurrency` tasks and runs each in its own greenlet; a run waiting on its model is a parked
greenlet that holds no database connection. The queue, the claim (`select_for_update(skip_locked)`, or an exclusive
transaction on SQLite) and the result bookkeeping are django-tasks-db's, so any number of such processes on any
number of machines share one queue, beside plain `db_worker`s.

The worker outlives its database: a lost or refused connection (a restart or failover of PostgreSQL, connections
terminated, the server full) on a claim, a sweep or at start is retried with backoff (0.1 s doubling to 5 s), logged
once when the outage starts and once when the database is back, and the broken connections are discarded. A run
whose body lost its connection keeps its lease until it runs out; then the sweep hands the run to the queue again
(`recovery.sweep_orphans`) and it goes on from its last commit.
"""

from __future__ import annotations

import logging
import signal
import time

import gevent
from django.db import close_old_connections, connections
from django.db.utils import InterfaceError, OperationalError
from django.tasks import TaskResultStatus
from django.utils import timezone
from django_tasks_db.management.commands.db_worker import Worker
from django_tasks_db.models import DBTaskResult
from django_tasks_db.utils import exclusive_transaction, is_locked_database_exception
from gevent.pool import Pool

from agents import periodic
from agents.runs import telemetry
from reactsite.serving import green

log = logging.getLogger(__name__)


def _database_errors() -> tuple[type[BaseException], ...]:
    """What a lost or refused connection raises: Django's wrappers, and the driver's and the pool's own errors where
    they reach us unwrapped (psycopg_pool.PoolTimeout is a psycopg.OperationalError)."""
    errors: list[type[BaseException]] = [OperationalError, InterfaceError]
    try:
        import psycopg
        import psycopg_pool
    except ImportError:  # SQLite only
        return tuple(errors)
    return (*errors, psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout)


DATABASE_ERRORS = _database_errors()
BACKOFF_FIRST_S, BACKOFF_MAX_S = 0.1, 5.0
SETTLE_S = 1.0  # attempts going through this long end an outage (Outage.ok)


def discard_connections() -> None:
    """Close this greenlet's connections, broken or not: the next query opens (or takes from the pool) a fresh one.

    A broken pooled connection is not handed back as good: psycopg_pool drops one whose session is gone, and checks
    the others before lending them again (`check` in reactsite/settings/database.py)."""
    for conn in connections.all(initialized_only=True):
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - broken beyond closing: Django forgets it all the same
            pass


class Outage:
    """The database lost or refusing connections, as seen by this worker: one warning when it starts, one info line
    when it is back (not one per attempt), and the backoff between attempts meanwhile.

    It is back once attempts have gone through for `settle_s` with none failing: the runs cut by one outage fail one
    by one as their model calls return, and a claim going through between two of them does not end the outage."""

    def __init__(
        self, first_s: float = BACKOFF_FIRST_S, max_s: float = BACKOFF_MAX_S, settle_s: float = SETTLE_S, clock=None
    ) -> None:
        self.first_s, self.max_s, self.settle_s = first_s, max_s, settle_s
        self.clock = clock or time.monotonic
        self.since: float | None = None  # the first failure of this outage
        self.healthy_since: float | None = None  # the first attempt through since the last failure
        self.failures = 0

    def failed(self, exc: BaseException, during: str) -> float:
        """Note a failed attempt (its connections are discarded); the seconds to wait before the next one."""
        discard_connections()
        self.healthy_since = None
        if self.since is None:
            self.since = self.clock()
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            log.warning(
                "database unavailable (%s during %s: %s); retrying with backoff up to %g s",
                type(exc).__name__, during, reason, self.max_s,
            )  # fmt: skip
        delay = min(self.max_s, self.first_s * 2**self.failures)
        self.failures += 1
        return delay

    def ok(self) -> None:
        """An attempt went through: once they have for `settle_s`, say the database is back."""
        if self.since is None:
            return
        now = self.clock()
        if self.healthy_since is None:
            self.healthy_since = now
        if now - self.healthy_since >= self.settle_s:
            down = self.healthy_since - self.since
            log.info("database available again after %.1f s (%d failed attempts)", down, self.failures)
            self.since, self.healthy_since, self.failures = None, None, 0

    def down_s(self) -> float:
        return 0.0 if self.since is None else self.clock() - self.since


class ConcurrentWorker(Worker):
    """django-tasks-db's Worker, claiming tasks while fewer than `concurrency` run, each in its own greenlet."""

    def __init__(self, *, concurrency: int, drain_s: float, **kwargs) -> None:
        super().__init__(**kwargs)
        self.pool, self.drain_s = Pool(concurrency), drain_s
        self.in_flight: dict[gevent.Greenlet, str] = {}
        self.outage = Outage()  # shared by the claim loop, the sweeps and the runs: one outage, logged once

    def configure_signals(self) -> None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            gevent.signal_handler(sig, self.stop)

    def stop(self) -> None:
        """Claim nothing more; runs in flight get `drain_s` to finish, then go back on the queue."""
        log.warning("Shutting down: %d run(s) in flight", len(self.in_flight))
        self.running = False

    def run(self) -> None:
        log.info("Starting worker worker_id=%s concurrency=%d", self.worker_id, self.pool.size)
        sweepers = [gevent.spawn(self._every, sweep) for sweep in periodic.sweeps()]
        while self.running:
            self.pool.wait_available()
            try:
                claimed = self._claim(self.pool.free_count())
            except DATABASE_ERRORS as exc:  # the database away or refusing: wait, never exit
                self._nap(self.outage.failed(exc, "claim"))
                continue
            self.outage.ok()
            for task in claimed:
                self._start(task)
            if claimed:
                continue
            if self.batch and not self.in_flight:
                break
            gevent.sleep(self.interval)
        gevent.killall(sweepers)
        self._drain()

    def _nap(self, seconds: float) -> None:
        """Sleep, waking early when the worker is told to stop."""
        deadline = time.monotonic() + seconds
        while self.running and time.monotonic() < deadline:
            gevent.sleep(min(0.1, max(deadline - time.monotonic(), 0)))

    def _every(self, sweep: periodic.Sweep) -> None:
        """Run one registered sweep (agents/periodic.py) on its interval, in its own greenlet: a long one (retention)
        never delays the others. The database away: the claim loop says so too; the sweep waits on the backoff."""
        while self.running:
            try:
                periodic.run(sweep)
            except DATABASE_ERRORS as exc:
                self._nap(self.outage.failed(exc, f"the {sweep.name} sweep"))
                continue
            except Exception:  # noqa: BLE001 - a failed sweep is retried at its next interval; the worker goes on
                log.exception("the %s sweep failed", sweep.name)
            else:
                self.outage.ok()
            finally:
                discard_connections()
            self._nap(sweep.interval_s())

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
            telemetry.tasks_claimed(len(claimed))
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
        green.lend()  # an idle connection of an earlier task, if there is one (reactsite/serving/green.py)
        now = timezone.now()
        due = max(task.enqueued_at, task.run_after) if task.run_after and task.run_after <= now else task.enqueued_at
        try:
            with telemetry.task(task.task_path, (now - due).total_seconds()) as record:
                self.run_task(task)
                record.is_error = task.status == TaskResultStatus.FAILED
        except DATABASE_ERRORS as exc:
            self._record_failure(task, exc)
        finally:
            close_old_connections()  # an obsolete or broken one is closed ...
            green.take_back()  # ... the rest go back for the next task

    def _record_failure(self, task: DBTaskResult, exc: BaseException) -> None:
        """The run's body lost its connection and `run_task` could not mark the task failed either (it retries on
        the same broken connection): mark it on a fresh connection, waiting for the database if it is away.

        The run itself is not lost: its lease is no longer renewed, and once it runs out the sweep hands the run to
        the queue again (a task still marked running would delay that by two leases: `recovery.sweep_orphans`)."""
        cause = exc.__context__ if exc.__context__ is not None else exc  # what run_task was recording: the run's
        while True:
            self._nap(self.outage.failed(exc, "a run"))
            try:
                task.set_failed(cause)
            except DATABASE_ERRORS:
                if not self.running:
                    return  # shutting down: the sweep of a live worker judges the task (as a lost worker's)
                continue
            self.outage.ok()
            return

    def _drain(self) -> None:
        """Wait for runs in flight; past `drain_s`, stop them: each hands its run back to the queue as it unwinds."""
        deadline = time.monotonic() + self.drain_s
        while self.in_flight and time.monotonic() < deadline:
            gevent.sleep(0.1)
        self.pool.kill(block=True, timeout=10)  # GreenletExit at their next wait (agents.runs.drive._hand_back)
        discard_connections()
        green.close_idle()
