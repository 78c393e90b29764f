"""`manage.py bench`: the runtime's figures as a table (measured, never asserted)."""

from __future__ import annotations

import json
import sys
import time
import uuid
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.test.utils import override_settings

from agents.management.tables import format_table

if TYPE_CHECKING:  # the HTTP helpers (requests, subprocesses) load only when an HTTP section runs
    from bench.http import Gunicorn
from bench.support import (
    Row,
    _bench_user,
    _check_answers,
    _engine_overhead_us,
    _fmt,
    _http_env,
    _http_runs,
    _latency_rows,
    _left,
    _local_postgres,
    _old_runs,
    _params,
    _persisted_overhead_ms,
    _queue_runs,
    _rate,
    _usage_rows,
    _wait_for,
    _warm_up,
)

SECTIONS = (
    "parser",
    "calculator",
    "engine",
    "persisted",
    "http",
    "latency",
    "background",
    "memory",
    "recall",
    "prune",
    "stream",
    "advance",
    "prompt_cache",
)


class Command(BaseCommand):
    help = (
        "Measure parser, calculator, engine and persistence overhead, three-turn runs over HTTP (server CPU and "
        "memory too), the same run against a slow model under a closed-loop load (section latency, ~25 s), many "
        "background runs queued at once and driven by one worker process (section background), and memory recall "
        "latency."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--json", action="store_true", help="print the rows as JSON")
        parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
        parser.add_argument("--sizes", default="1000,10000,100000", help="memory sizes (facts for one user)")
        parser.add_argument("--queries", type=int, default=200, help="recall queries per memory size")
        parser.add_argument("--http-runs", type=int, default=40, help="runs per concurrency level over HTTP")
        _add_slow_model_arguments(parser)
        _add_volume_arguments(parser)

    def handle(self, *args, **opts) -> None:
        wanted = [s.strip() for s in opts["only"].split(",") if s.strip()]
        unknown = sorted(set(wanted) - set(SECTIONS))
        if unknown:
            raise CommandError(
                f"Unknown section(s): {', '.join(unknown)}. Choose from {', '.join(SECTIONS)}.", returncode=2
            )
        params = _params(opts) | {"advance_runs": opts["advance_runs"], "advance_turns": opts["advance_turns"]}
        rows: list[Row] = []
        with override_settings(DEBUG=False):  # in-process figures too: no query is timed and logged as under DEBUG
            for section in wanted:
                self._progress(f"measuring {section} …")
                rows += getattr(self, f"_bench_{section}")(**params)
        self._print(rows, as_json=opts["json"])

    def _progress(self, message: str) -> None:
        sys.stderr.write(message + "\n")
        sys.stderr.flush()

    def _print(self, rows: list[Row], *, as_json: bool) -> None:
        if as_json:
            self.stdout.write(json.dumps({"database": connection.vendor, "rows": [asdict(r) for r in rows]}, indent=2))
            return
        header = ("figure", "value", "unit", "work measured", "seed project")
        self.stdout.write(f"database: {connection.vendor}")
        for line in format_table(header, [(r.figure, _fmt(r.value), r.unit, r.work, r.seed) for r in rows]):
            self.stdout.write(line)

    # --- sections -------------------------------------------------------------------------------------------

    def _bench_parser(self, **_) -> list[Row]:
        from agents.engine.react import parse

        action = 'Thought: I need to compute 12*7.\nAction: calculator\nAction Input: {"expression": "12*7"}'
        final = "Thought: I now know the final answer.\nFinal Answer: 85"
        work = "react.parse of a {} reply"
        return [
            Row(
                "parser, Action reply",
                _rate(lambda: parse(action)),
                "parses/s",
                work.format("Thought/Action"),
                "~500k/s",
            ),
            Row(
                "parser, Final Answer reply",
                _rate(lambda: parse(final)),
                "parses/s",
                work.format("Final Answer"),
                "~1.16M/s",
            ),
        ]

    def _bench_calculator(self, **_) -> list[Row]:
        from agents.tools.calculator import evaluate

        return [
            Row(
                "calculator",
                _rate(lambda: evaluate("(12*7+1)/5 - 2^3")),
                "calls/s",
                "evaluate('(12*7+1)/5 - 2^3')",
                "~85k/s",
            )
        ]

    def _bench_engine(self, **_) -> list[Row]:
        per_step = _engine_overhead_us()
        return [
            Row(
                "engine overhead per step",
                per_step,
                "µs",
                "advance() with an instant in-process fake model and a no-op tool",
            )
        ]

    def _bench_persisted(self, **_) -> list[Row]:
        per_step = _persisted_overhead_ms()
        return [
            Row(
                "persisted overhead per step",
                per_step,
                "ms",
                f"services.execute, demo model, steps written to {connection.vendor}",
            )
        ]

    def _bench_http(self, *, http_runs: int, **_) -> list[Row]:
        from bench.http import Gunicorn, InstantModelServer, ServerUsage

        rows: list[Row] = []
        with _bench_user() as token, InstantModelServer() as model, Gunicorn(_http_env(model.url)) as server:
            self._warm_up(server, token)
            for concurrency in (1, 8):
                self._progress(f"  http: {http_runs} runs at concurrency {concurrency} …")
                with ServerUsage(server.proc.pid, postgres=_local_postgres()) as usage:
                    rate, p50, p95 = _http_runs(server.url, token, http_runs, concurrency)
                work = (
                    f"3-turn run (2 calculator calls + answer) via gunicorn ({server.worker_class}), 2 workers, "
                    f"c={concurrency}"
                )
                rows += [
                    Row(f"HTTP runs/s @ c={concurrency}", rate, "runs/s", work),
                    Row(f"HTTP run p50 @ c={concurrency}", p50, "ms", work),
                    Row(f"HTTP run p95 @ c={concurrency}", p95, "ms", work),
                    *_usage_rows(f"HTTP {{}} @ c={concurrency}", usage, http_runs, f"{http_runs} runs"),
                ]
        return rows

    def _bench_latency(
        self, *, latency_clients: list[int], latency_seconds: float, model_delay_ms: float, **_
    ) -> list[Row]:
        """The three-turn run against a model that takes `model_delay_ms` per call, under a closed-loop load."""
        from bench.http import Gunicorn, InstantModelServer, ServerUsage, closed_loop

        rows: list[Row] = []
        with (
            _bench_user() as token,
            InstantModelServer(model_delay_ms) as model,
            Gunicorn(_http_env(model.url)) as server,
        ):
            self._warm_up(server, token)
            for clients in latency_clients:
                self._progress(f"  latency: {clients} clients for {latency_seconds:g} s, model {model_delay_ms:g} ms …")
                with ServerUsage(server.proc.pid, postgres=_local_postgres()) as usage:
                    load = closed_loop(server.url, token, clients, latency_seconds)
                done = f"  latency: {load.runs} runs in the window, {len(load.latencies_ms)} started in it"
                self._progress(done + (f", {load.errors} errors, the last: {load.last_error}" if load.errors else ""))
                rows += _latency_rows(load, usage, model_delay_ms, server.worker_class)
        return rows

    def _bench_background(self, *, background_runs: int, model_delay_ms: float, **_) -> list[Row]:
        """`background_runs` background runs queued at once, then one `run_worker` process drives them all."""
        from bench.http import InstantModelServer

        _check_queue_idle()
        count, name = background_runs, f"background, {model_delay_ms:g} ms model"
        concurrency, patience_s = max(count, 200), 120.0 + count * 0.5  # room for a slow machine
        with _bench_user() as token, InstantModelServer(model_delay_ms) as model:
            env = _http_env(model.url)
            started = time.perf_counter()
            ids = _queue_runs(token, count, env)
            queued_s = time.perf_counter() - started
            self._progress(
                f"  background: {count} runs queued in {queued_s:.1f} s; one run_worker process drives them …"
            )
            up_s, done_s, usage = _drive_queued(ids, count, env, concurrency, patience_s)
        work = (
            f"{count} 3-turn runs queued at once (model {model_delay_ms:g} ms/call), one run_worker process "
            f"(--concurrency {concurrency})"
        )
        window = f"{count} runs, from the first taken to the last done"
        return [
            Row(f"{name}, {count} runs queued in", queued_s, "s", f"{count} × services.submit_run (run + task)"),
            Row(f"{name}, worker start-up", up_s, "s", "from starting run_worker until it takes the first run"),
            Row(f"{name}, {count} runs done in", done_s, "s", work + ": from its start, start-up included"),
            *_usage_rows(f"{name}, {{}}", usage, count, window, who="the run_worker process", server="worker"),
        ]

    def _bench_stream(self, *, stream_runs: int, stream_seconds: float, **_) -> list[Row]:
        """Live runs: first chunk to first delta, many streams at once, and what streaming costs W3."""
        from bench import stream as bench_stream

        with _bench_user() as token:
            return bench_stream.measure(token, self._progress, runs=stream_runs, seconds=stream_seconds)

    def _bench_advance(self, *, advance_runs: int, advance_turns: int, **_) -> list[Row]:
        """A step run advanced one unit at a time: its last advances against its first."""
        from bench import advance as bench_advance

        return bench_advance.measure(self._progress, runs=advance_runs, turns=advance_turns)

    def _bench_prompt_cache(self, **_) -> list[Row]:
        """A 10-turn Anthropic-shaped run's cost with and without the prompt cache, at documented prices (offline)."""
        from bench import prompt_cache as bench_prompt_cache

        return bench_prompt_cache.measure()

    def _warm_up(self, server: Gunicorn, token: str) -> None:
        """Warm every worker up before timing; say so when one stayed cold (its first run lands in the figures)."""
        if not _warm_up(server, token):
            self._progress("  warning: a gunicorn worker served no warm-up run; its first run is in the figures")

    def _bench_memory(self, *, sizes: list[int], queries: int, **_) -> list[Row]:
        """Full-text recall's latency (the figures of earlier waves; every mode: `recall`)."""
        from bench import recall as bench_recall

        return bench_recall.latency_rows(self._progress, sizes, queries, ["text"], name="memory recall")

    def _bench_recall(self, *, sizes: list[int], queries: int, **_) -> list[Row]:
        """Recall by meaning: latency per mode and size, what vectors add to remember, quality on the labelled set."""
        from bench import recall as bench_recall

        return bench_recall.measure(self._progress, sizes, queries)

    def _bench_prune(self, *, prune_runs: int, **_) -> list[Row]:
        """Retention's delete rate: `prune_runs` finished runs 40 days old, 3 steps each, of a throwaway user."""
        from agents.background import retention

        user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
        try:
            self._progress(f"  prune: storing {prune_runs:,} old runs …")
            _old_runs(user, prune_runs)
            started = time.perf_counter()
            pruned = retention.prune_runs(30, owner=user)
            seconds = time.perf_counter() - started
        finally:
            user.delete()
        rows = pruned.counts.get("runs", 0) + pruned.counts.get("steps", 0)
        work = f"{pruned.counts.get('runs', 0):,} runs + {pruned.counts.get('steps', 0):,} steps, batches of 1000"
        return [
            Row("prune rows/s", rows / seconds, "rows/s", work),
            Row("prune runs/s", pruned.counts.get("runs", 0) / seconds, "runs/s", work),
        ]


def _check_queue_idle() -> None:
    """CommandError when tasks already wait in the queue: the bench's worker would take them too."""
    from django_tasks_db.models import DBTaskResult

    waiting = DBTaskResult.objects.filter(status="READY").count()
    if waiting:
        raise CommandError(
            f"background bench: {waiting} task(s) already wait in this database's queue, and the bench's worker "
            "would take them too. Run it where the queue is idle (say, a fresh database: DATABASE_URL)."
        )


def _drive_queued(
    ids: list[uuid.UUID], count: int, env: dict[str, str], concurrency: int, patience_s: float
) -> tuple[float, float, Any]:
    """One `run_worker` process drives the queued runs `ids` to their end, their answers checked: the seconds until
    it took the first and until all were done, and the worker's usage meanwhile. Their tasks are deleted after."""
    from django_tasks_db.models import DBTaskResult

    from agents.models import RunStatus
    from bench.http import ServerUsage, Worker

    try:
        with Worker(env, concurrency=concurrency) as worker:
            begun = time.perf_counter()
            _wait_for(lambda: _left(ids, RunStatus.QUEUED) < count, worker, begun, "none taken", patience_s)
            up_s = time.perf_counter() - begun
            with ServerUsage(worker.proc.pid, postgres=_local_postgres()) as usage:
                done = lambda: _left(ids, RunStatus.DONE, negate=True) == 0  # noqa: E731 - read again each poll
                _wait_for(done, worker, begun, "not all done", patience_s)
            done_s = time.perf_counter() - begun
        _check_answers(ids)
    finally:  # the runs go with the bench user; their finished tasks go here
        DBTaskResult.objects.filter(args_kwargs__args__0__in=[str(pk) for pk in ids]).delete()
    return up_s, done_s, usage


def _add_slow_model_arguments(parser) -> None:
    """The options of the sections that run against a model that takes its time: latency and background."""
    parser.add_argument(
        "--latency-clients",
        default="64",
        help="latency: comma-separated client counts of the closed loop (default 64; 64,256 adds ~30 s)",
    )
    parser.add_argument(
        "--latency-seconds", type=float, default=10.0, help="latency: seconds per client count (default 10)"
    )
    parser.add_argument(
        "--model-delay-ms", type=float, default=200.0, help="latency: ms the model takes per call (default 200)"
    )
    parser.add_argument(
        "--background-runs",
        type=int,
        default=200,
        help="background: runs queued at once for one worker process (default 200; the model: --model-delay-ms); "
        "no other worker may serve the database meanwhile",
    )


def _add_volume_arguments(parser) -> None:
    """How much the prune, stream and advance sections do."""
    parser.add_argument(
        "--prune-runs", type=int, default=100_000, help="prune: old runs (3 steps each) to delete (default 100000)"
    )
    parser.add_argument("--stream-runs", type=int, default=200, help="stream: runs followed at once (default 200)")
    parser.add_argument(
        "--stream-seconds",
        type=float,
        default=8.0,
        help="stream: seconds each streaming run writes (50 words/s) and each W3 window lasts (default 8)",
    )
    parser.add_argument("--advance-runs", type=int, default=5, help="advance: step runs driven (default 5)")
    parser.add_argument(
        "--advance-turns", type=int, default=50, help="advance: turns of each step run (default 50, at most 50)"
    )
