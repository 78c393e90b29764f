"""Prometheus metrics: what the runs do, counted by every process of a machine and added up at /metrics.

Switched on by `AGENT_METRICS` (reactsite/settings/); off, nothing here is imported and no observer is registered.
`install()` makes this process's metric objects and returns the observer that agents/apps.py registers with the runs'
hook points (agents/runs/telemetry.py) and connects to `run_done` (agents/runs/signals.py): this module knows runs
only by the attributes it reads of them, and imports nothing of the layers above it.

Several processes serve one site (gunicorn's workers, each `run_worker`), so the metrics use prometheus_client's
multiprocess mode: each process writes its values to memory-mapped files of its own (`<kind>_<pid>.db`) in one
directory (`AGENT_METRICS_DIR`, exported as PROMETHEUS_MULTIPROC_DIR), and `exposition()` adds every file up, with the
gauges read from the database at that moment (approvals waiting, the queue). A counter of a process that has gone
keeps counting in the total (its file stays) until gunicorn starts again, which removes the files of processes no
longer running (gunicorn.conf.py `on_starting`); the gauges of work in progress (runs in flight, streams open) of a
process that has gone are dropped at once (`child_exit`, and at each scrape for any other process).
"""

from __future__ import annotations

import hmac
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, multiprocess, values
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily

from agents.engine import ToolWaits

log = logging.getLogger(__name__)

# Model calls take from milliseconds (a cached or tiny reply) to minutes (a long reply of a slow model).
MODEL_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0, float("inf"))
# Tools: the calculator in microseconds, a web search or an MCP server in seconds.
TOOL_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, float("inf"))


class Metrics:
    """This process's metric objects. Registered in no registry: in multiprocess mode their values live in the
    directory's files, and `exposition()` reads those."""

    def __init__(self) -> None:
        self.runs_created, self.runs_finished = _run_counters()
        self.run_scores = Counter(
            "reactsite_run_scores",
            "Scores stored on runs, by name, source (online: an agent's evaluator; human: feedback) and whether it "
            "passed (none: feedback, which has no pass).",
            ["name", "source", "passed"],
            registry=None,
        )
        self.model_seconds, self.model_errors, self.model_tokens = _model_call_metrics()
        self.tool_seconds, self.tool_errors = _tool_call_metrics()
        self.runs_in_flight, self.streams_open = _in_progress_gauges()
        self.task_wait, self.task_seconds, self.tasks_claimed, self.sweeps = _worker_metrics()


def _run_counters() -> tuple[Counter, Counter]:
    """Runs created, and runs finished."""
    created = Counter("reactsite_runs_created", "Runs created, by mode.", ["mode"], registry=None)
    finished = Counter(
        "reactsite_runs_finished",
        "Runs finished, by stop reason and whether it is a final answer (the API's `ok`).",
        ["stop_reason", "ok"],
        registry=None,
    )
    return created, finished


def _model_call_metrics() -> tuple[Histogram, Counter, Counter]:
    """Model calls: their durations, their errors, and the tokens they reported."""
    seconds = Histogram(
        "reactsite_model_call_duration_seconds",
        "Model calls (a provider's own retries inside), by provider and model.",
        ["provider", "model"],
        buckets=MODEL_BUCKETS,
        registry=None,
    )
    errors = Counter(
        "reactsite_model_call_errors",
        "Model calls that raised (the provider failed after its retries, the call was stopped), by error.",
        ["provider", "model", "error"],
        registry=None,
    )
    tokens = Counter(
        "reactsite_model_tokens",
        "Tokens the providers reported, by provider, model and kind (input, output).",
        ["provider", "model", "kind"],
        registry=None,
    )
    return seconds, errors, tokens


def _tool_call_metrics() -> tuple[Histogram, Counter]:
    """Tool calls: their durations, and those that failed."""
    seconds = Histogram(
        "reactsite_tool_call_duration_seconds", "Tool calls, by tool.", ["tool"], buckets=TOOL_BUCKETS, registry=None
    )
    errors = Counter("reactsite_tool_call_errors", "Tool calls that failed (raised), by tool.", ["tool"], registry=None)
    return seconds, errors


def _in_progress_gauges() -> tuple[Gauge, Gauge]:
    """Work in progress: runs being driven and event streams open."""
    in_flight = Gauge(
        "reactsite_runs_in_flight",
        "Runs this process is driving now (between taking a run's lease and handing it back), by process.",
        registry=None,
        multiprocess_mode="liveall",  # one sample per live process (label pid); sum() for the site's
    )
    streams = Gauge(
        "reactsite_event_streams_open",
        "Event streams (SSE) open now, over every live process.",
        registry=None,
        multiprocess_mode="livesum",
    )
    return in_flight, streams


# A task waits from milliseconds (an idle worker) to minutes (a backlog); it runs for as long as its run's next unit.
TASK_BUCKETS = (0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, float("inf"))


def _worker_metrics() -> tuple[Histogram, Histogram, Counter, Counter]:
    """The workers' own: how long tasks waited in the queue and ran, the tasks claimed, the sweeps run."""
    wait = Histogram(
        "reactsite_task_queue_wait_seconds",
        "Seconds a background task waited between being due and a worker starting it, by task.",
        ["task"],
        buckets=TASK_BUCKETS,
        registry=None,
    )
    seconds = Histogram(
        "reactsite_task_duration_seconds",
        "Seconds a worker spent on a background task, by task and outcome (ok, error).",
        ["task", "outcome"],
        buckets=TASK_BUCKETS,
        registry=None,
    )
    claimed = Counter(
        "reactsite_worker_claims", "Tasks claimed from the database queue by run_worker processes.", registry=None
    )
    sweeps = Counter(
        "reactsite_sweeps", "Runs of the periodic sweeps, by sweep and outcome (ok, error).", ["sweep", "outcome"],
        registry=None,
    )  # fmt: skip
    return wait, seconds, claimed, sweeps


class Observer:
    """The runs' hooks (agents/runs/telemetry.py) counted in `metrics`; `run_done` is a receiver of the signal of
    that name. A hook records an exception going through it and lets it go on."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    @contextmanager
    def task(self, name: str, waited_s: float | None, record: Any) -> Iterator[None]:
        short = name.rsplit(".", 1)[-1]
        if waited_s is not None:
            self.metrics.task_wait.labels(short).observe(max(waited_s, 0.0))
        start, raised = time.perf_counter(), True
        try:
            yield
            raised = False
        finally:
            outcome = "error" if raised or record.is_error else "ok"
            self.metrics.task_seconds.labels(short, outcome).observe(time.perf_counter() - start)

    def tasks_claimed(self, count: int) -> None:
        self.metrics.tasks_claimed.inc(count)

    def sweep_done(self, name: str, seconds: float, error: BaseException | None) -> None:
        self.metrics.sweeps.labels(name, "ok" if error is None else "error").inc()

    def run_created(self, run: Any) -> None:
        self.metrics.runs_created.labels(run.mode).inc()

    def run_done(self, sender: Any = None, *, run: Any, **kwargs: Any) -> None:
        ok = "true" if run.stop_reason == "final_answer" else "false"
        self.metrics.runs_finished.labels(run.stop_reason or "none", ok).inc()

    def run_scored(self, score: Any) -> None:
        passed = "none" if score.passed is None else str(bool(score.passed)).lower()
        self.metrics.run_scores.labels(score.name, score.source, passed).inc()

    def driving(self, run: Any) -> AbstractContextManager[None]:
        return self.metrics.runs_in_flight.track_inprogress()

    def stream(self, run_id: Any) -> AbstractContextManager[None]:
        return self.metrics.streams_open.track_inprogress()

    @contextmanager
    def model_call(self, run: Any, request: Any, record: Any) -> Iterator[None]:
        provider, model = (run.provider, run.model) if run is not None else ("unknown", "unknown")
        start = time.perf_counter()
        try:
            yield
        except BaseException as exc:
            self.metrics.model_errors.labels(provider, model, type(exc).__name__).inc()
            self._tokens(provider, model, getattr(exc, "usage", None))  # a stopped stream: what was reported so far
            raise
        else:
            self._tokens(provider, model, getattr(record.reply, "usage", None))
        finally:
            self.metrics.model_seconds.labels(provider, model).observe(time.perf_counter() - start)

    def _tokens(self, provider: str, model: str, usage: Any) -> None:
        if usage is None:
            return
        tokens = self.metrics.model_tokens
        if usage.prompt_tokens:
            tokens.labels(provider, model, "input").inc(usage.prompt_tokens)
        if usage.completion_tokens:
            tokens.labels(provider, model, "output").inc(usage.completion_tokens)

    @contextmanager
    def tool_call(self, run: Any, name: str, call_id: str | None, record: Any) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        except ToolWaits:  # a sub-agent's call that answers later: not a call that ended, nor a failure
            raise
        except BaseException:
            self.metrics.tool_errors.labels(name).inc()
            self.metrics.tool_seconds.labels(name).observe(time.perf_counter() - start)
            raise
        if record.is_error:
            self.metrics.tool_errors.labels(name).inc()
        self.metrics.tool_seconds.labels(name).observe(time.perf_counter() - start)


def install(directory: str) -> Observer:
    """This process's metrics, written to `directory` (made if missing): the observer to register.

    prometheus_client picks its multiprocess mode when it is first imported, from PROMETHEUS_MULTIPROC_DIR. The
    settings export the variable before anything imports it, and gunicorn's master before it does; all the same a
    process may have imported prometheus_client earlier (a library, a test run), so its choice is made again here,
    before the first metric object exists: values go to files in `directory`, whatever came first.
    """
    Path(directory).mkdir(mode=0o700, parents=True, exist_ok=True)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    if not _replaced:
        _replaced.append(values.ValueClass)
    values.ValueClass = values.MultiProcessValue()
    return Observer(Metrics())


_replaced: list[Any] = []  # prometheus_client's own choice, which uninstall() puts back


def uninstall() -> None:
    """Close this process's metric files and give prometheus_client its own choice back (tests, one directory each)."""
    values.close_all_multiprocess_files()
    if _replaced:
        values.ValueClass = _replaced.pop()


UNAUTHORISED = "A valid bearer token is required.\n"
CHALLENGE = 'Bearer realm="metrics"'


def authorised(authorization: str, token: str) -> bool:
    """Whether a scrape may read the metrics: no AGENT_METRICS_TOKEN set, or `Authorization: Bearer <that token>`
    (compared in constant time)."""
    if not token:
        return True
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


WaitingCounts = Callable[[], tuple[int, int]]


class _Database:
    """The gauges no process counts by itself, read from the database at each scrape: `read()` answers (runs
    awaiting a decision on their own calls, tasks ready in the background queue)."""

    def __init__(self, read: WaitingCounts) -> None:
        self.read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            approvals, ready = self.read()
        except Exception as exc:  # noqa: BLE001 - the database away: the processes' metrics are still worth a scrape
            log.warning("metrics: could not read the database (%s)", type(exc).__name__)
            return
        yield GaugeMetricFamily(
            "reactsite_approvals_waiting",
            "Runs paused for a human decision on their own calls (a parent showing its child's pause not counted).",
            value=approvals,
        )
        yield GaugeMetricFamily(
            "reactsite_queue_ready_tasks",
            "Tasks ready in the background queue, not yet taken by a worker (django-tasks-db's ready rows; on Celery "
            "the messages waiting in the broker's queue).",
            value=ready,
        )


def exposition(directory: str, read: WaitingCounts, accept: str = "") -> tuple[bytes, str]:
    """(body, content type) of a scrape: every process's files in `directory` added up, then the database's gauges,
    in the text format the Accept header asks for (Prometheus's text format by default)."""
    drop_dead(directory, only_live_gauges=True)
    registry = CollectorRegistry(auto_describe=False)
    multiprocess.MultiProcessCollector(registry, path=directory)
    registry.register(_Database(read))
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


def drop_dead(directory: str, *, only_live_gauges: bool = False) -> None:
    """Remove the files of processes that are no longer running: every one (gunicorn starting: a restart is a reset
    of the counters, which Prometheus's rate() expects), or only their gauges of work in progress (runs in flight,
    streams open: what a process was doing when it died is done no more)."""
    if not os.path.isdir(directory):
        return
    for entry in os.scandir(directory):
        name, _, pid = entry.name.removesuffix(".db").rpartition("_")
        if not entry.name.endswith(".db") or not pid.isdigit() or _alive(int(pid)):
            continue
        if only_live_gauges and not name.startswith("gauge_live"):
            continue
        try:
            os.remove(entry.path)
        except FileNotFoundError:  # another process removed it first
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
