"""`manage.py bench`: the runtime's figures as a table (measured, never asserted)."""

from __future__ import annotations

import getpass
import itertools
import json
import random
import secrets
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from django.test.utils import override_settings
from rest_framework.authtoken.models import Token

from agents.management.tables import format_table

if TYPE_CHECKING:  # the HTTP helpers (requests, subprocesses) load only when an HTTP section runs
    from agents.management.bench_http import Gunicorn, Load, ServerUsage

RUN_INPUT = "What is 12*7, plus 1?"
_CHILD_SECRET = secrets.token_urlsafe(48)  # the SECRET_KEY of the processes the bench starts
SECTIONS = ("parser", "calculator", "engine", "persisted", "http", "latency", "background", "memory", "prune")


@dataclass
class Row:
    figure: str
    value: float
    unit: str
    work: str
    seed: str = ""


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
        parser.add_argument(
            "--prune-runs", type=int, default=100_000, help="prune: old runs (3 steps each) to delete (default 100000)"
        )

    def handle(self, *args, **opts) -> None:
        wanted = [s.strip() for s in opts["only"].split(",") if s.strip()]
        unknown = sorted(set(wanted) - set(SECTIONS))
        if unknown:
            raise CommandError(
                f"Unknown section(s): {', '.join(unknown)}. Choose from {', '.join(SECTIONS)}.", returncode=2
            )
        params = _params(opts)
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
        from agents.management.bench_http import Gunicorn, InstantModelServer, ServerUsage

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
        from agents.management.bench_http import Gunicorn, InstantModelServer, ServerUsage, closed_loop

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
        from django_tasks_db.models import DBTaskResult

        from agents.management.bench_http import InstantModelServer, ServerUsage, Worker
        from agents.models import RunStatus

        waiting = DBTaskResult.objects.filter(status="READY").count()
        if waiting:
            raise CommandError(
                f"background bench: {waiting} task(s) already wait in this database's queue, and the bench's worker "
                "would take them too. Run it where the queue is idle (say, a fresh database: DATABASE_URL)."
            )
        count, name = background_runs, f"background, {model_delay_ms:g} ms model"
        concurrency, patience_s = max(count, 200), 120.0 + count * 0.5  # a slow machine may need ~30 ms a run
        with _bench_user() as token, InstantModelServer(model_delay_ms) as model:
            env = _http_env(model.url)
            started = time.perf_counter()
            ids = _queue_runs(token, count, env)
            queued_s = time.perf_counter() - started
            self._progress(
                f"  background: {count} runs queued in {queued_s:.1f} s; one run_worker process drives them …"
            )
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

    def _warm_up(self, server: Gunicorn, token: str) -> None:
        """Warm every worker up before timing; say so when one stayed cold (its first run lands in the figures)."""
        if not _warm_up(server, token):
            self._progress("  warning: a gunicorn worker served no warm-up run; its first run is in the figures")

    def _bench_memory(self, *, sizes: list[int], queries: int, **_) -> list[Row]:
        rows = []
        user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
        try:
            have = 0
            for size in sorted(sizes):
                self._progress(f"  memory: {size} facts …")
                _add_facts(user, size - have, start=have)
                have = size
                p50, p95 = _recall_latency(user, queries)
                work = f"recall(limit=5), {queries} two-word queries"
                rows.append(Row(f"memory recall p50 @ {size:,} facts", p50, "ms", work))
                rows.append(Row(f"memory recall p95 @ {size:,} facts", p95, "ms", work))
        finally:
            user.delete()
        return rows

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


def _old_runs(user, count: int, batch: int = 5000) -> None:
    """`count` finished runs created 40 days ago, with 3 steps each (bulk inserts)."""
    from datetime import timedelta

    from django.utils import timezone

    from agents.models import Run, Step

    old = timezone.now() - timedelta(days=40)
    fields = {"input": "old", "provider": "demo", "model": "demo-1", "status": "done", "stop_reason": "final_answer"}
    for start in range(0, count, batch):
        n = min(batch, count - start)
        runs = Run.objects.bulk_create(
            [Run(owner=user, output="x", deadline=old, created_at=old, updated_at=old, **fields) for _ in range(n)]
        )
        Run.objects.filter(pk__in=[r.pk for r in runs]).update(created_at=old)  # auto_now_add overrode it
        steps = [
            Step(run=r, index=i, kind="error", data={"message": "x"}, created_at=old) for r in runs for i in range(3)
        ]
        Step.objects.bulk_create(steps)


def _params(opts: dict) -> dict:
    """The sections' parameters from the options, checked (a CommandError exiting 2 names the bad one)."""
    sizes = _whole_numbers(opts["sizes"], "--sizes")
    clients = _whole_numbers(opts["latency_clients"], "--latency-clients")
    counts = [*sizes, opts["queries"], opts["http_runs"], *clients, opts["background_runs"], opts["prune_runs"]]
    if any(n < 1 for n in counts):
        raise CommandError(
            "--sizes, --queries, --http-runs, --latency-clients, --background-runs and --prune-runs must be at least "
            "1.",
            returncode=2,
        )
    if not opts["latency_seconds"] > 0:
        raise CommandError("--latency-seconds must be more than 0.", returncode=2)
    if not 0 <= opts["model_delay_ms"] <= 60_000:
        raise CommandError("--model-delay-ms must be between 0 and 60000.", returncode=2)
    return {
        "sizes": sizes,
        "queries": opts["queries"],
        "http_runs": opts["http_runs"],
        "latency_clients": clients,
        "latency_seconds": opts["latency_seconds"],
        "model_delay_ms": opts["model_delay_ms"],
        "background_runs": opts["background_runs"],
        "prune_runs": opts["prune_runs"],
    }


def _whole_numbers(text: str, option: str) -> list[int]:
    """Comma-separated whole numbers."""
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise CommandError(f"{option} takes comma-separated whole numbers.", returncode=2) from None


@contextmanager
def _bench_user() -> Iterator[str]:
    """A throwaway user's API token; the user (and its runs) are deleted afterwards."""
    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
    try:
        yield Token.objects.create(user=user).key
    finally:
        user.delete()


def _queue_runs(token: str, count: int, env: dict[str, str]) -> list[uuid.UUID]:
    """`count` background runs of the token's user, each queued as the API queues one; their ids."""
    from agents.runs import submit

    owner = Token.objects.select_related("user").get(key=token).user
    options = submit.RunOptions(input=RUN_INPUT, provider="openai", mode="background")
    with override_settings(OPENAI_API_KEY=env["OPENAI_API_KEY"], OPENAI_BASE_URL=env["OPENAI_BASE_URL"]):
        return [submit.submit_run(owner=owner, options=options).pk for _ in range(count)]


def _left(ids: list[uuid.UUID], status: str, negate: bool = False) -> int:
    """How many of the runs are in `status` (with `negate`: not in it)."""
    from agents.models import Run

    runs = Run.objects.filter(pk__in=ids)
    return (runs.exclude(status=status) if negate else runs.filter(status=status)).count()


def _wait_for(condition: Callable[[], bool], worker, started: float, what: str, timeout_s: float) -> None:
    """Poll until `condition()`; CommandError (`what`, the worker's log tail) when the worker stops or time runs out."""
    while not condition():
        stopped = worker.proc.poll() is not None
        if stopped or time.perf_counter() - started > timeout_s:
            tail = "\n".join(list(worker.log)[-10:])
            why = "its worker stopped" if stopped else f"after {timeout_s:g} s"
            raise CommandError(f"background bench: {what} ({why}); the worker's log ends:\n{tail}")
        time.sleep(0.02)


def _check_answers(ids: list[uuid.UUID]) -> None:
    from agents.models import Run

    wrong = Run.objects.filter(pk__in=ids).exclude(stop_reason="final_answer", output="85").count()
    if wrong:
        raise CommandError(f"background bench: {wrong} of {len(ids)} runs did not end with the answer 85.")


def _local_postgres() -> tuple[str, str] | None:
    """(user, database) when the database is a PostgreSQL on this host, whose backends we can see in /proc."""
    conf = connection.settings_dict
    host = conf.get("HOST") or ""
    local = host in ("", "localhost", "127.0.0.1", "::1") or host.startswith("/")
    if connection.vendor != "postgresql" or not local:
        return None
    return conf.get("USER") or getpass.getuser(), conf["NAME"]


def _usage_rows(
    figure: str,
    usage: ServerUsage,
    runs: int,
    window: str,
    who: str = "the gunicorn master and workers",
    server: str = "server",
) -> list[Row]:
    """Server CPU per run, peak RSS and (on a local PostgreSQL) the database's CPU per run; `figure` has a {}."""
    per_run = max(runs, 1)
    rows = [
        Row(
            figure.format(f"{server} CPU"),
            usage.cpu_ms / per_run,
            "ms/run",
            f"user+system CPU of {who} over {window}, per run",
        ),
        Row(
            figure.format(f"{server} peak RSS"),
            usage.peak_rss_mb,
            "MB",
            f"VmHWM (peak since start) summed over {who}; shared pages count per process",
        ),
    ]
    if usage.db_cpu_ms is not None:
        database = connection.settings_dict["NAME"]
        work = f"user+system CPU of the PostgreSQL backends on {database} over {window}, per run"
        rows.append(Row(figure.format("+ PostgreSQL CPU"), usage.db_cpu_ms / per_run, "ms/run", work))
    return rows


def _latency_rows(load: Load, usage: ServerUsage, delay_ms: float, worker_class: str) -> list[Row]:
    """The rows of one client count of the latency section."""
    if not load.latencies_ms:
        raise CommandError(f"latency bench: no run succeeded ({load.errors} errors; the last: {load.last_error})")
    c, name = load.clients, f"http, {delay_ms:g} ms model"
    work = (
        f"closed loop: {c} clients back to back for {load.seconds:g} s, model {delay_ms:g} ms/call, 3-turn run, "
        f"gunicorn ({worker_class}), 2 workers"
    )
    p50, p99 = _percentiles(load.latencies_ms, (50, 99))
    errors = f"non-2xx {load.non_2xx}, transport errors or wrong answers {load.failed}"
    return [
        Row(f"{name}, runs/s @ c={c}", load.runs / load.seconds, "runs/s", work + "; runs finished in the window"),
        Row(f"{name}, run p50 @ c={c}", p50, "ms", work + "; every run started in the window"),
        Row(f"{name}, run p99 @ c={c}", p99, "ms", work + "; every run started in the window"),
        Row(f"{name}, errors @ c={c}", float(load.errors), "requests", errors),
        *_usage_rows(f"{name}, {{}} @ c={c}", usage, len(load.latencies_ms), "the window and its drain"),
    ]


def _warm_up(server: Gunicorn, token: str, rounds: int = 6) -> bool:
    """Runs until every worker has served some, so no worker's first run (lazy imports, model client) is timed."""
    before = server.worker_cpu_ms()
    for _ in range(rounds):
        # Which worker accepts a connection is the kernel's choice: one can take a whole round while the other idles.
        _http_runs(server.url, token, 8, 8)
        after = server.worker_cpu_ms()
        if all(after.get(pid, 0) - ms >= 50 for pid, ms in before.items()):  # an idle worker uses next to none
            return True
    return False


def _http_env(model_url: str) -> dict[str, str]:
    """The processes under test (gunicorn, run_worker): the bench's model as provider `openai`, no rate limit in the
    way, and configured as in production. DEBUG off: a checkout's `.env` has DEBUG=1, under which Django times and
    logs every query and, on SQLite, renders each one's parameters with an extra `SELECT QUOTE(…)` statement. So
    they get a secret of their own (random, for this bench only), as DEBUG off requires."""
    return {
        "DEBUG": "0",
        "SECRET_KEY": _CHILD_SECRET,
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "bench-not-a-key",
        "AGENT_RATE_LIMIT": "1000000000/m",  # a closed loop of hundreds of clients must never meet a 429
        "SECURE_SSL_REDIRECT": "0",
        "NO_PROXY": "127.0.0.1,localhost",
        "LOG_LEVEL": "WARNING",
    }


def _http_runs(url: str, token: str, runs: int, concurrency: int) -> tuple[float, float, float]:
    """(runs/s, p50 ms, p95 ms) of POST /api/v1/runs, each a whole three-turn run."""
    import requests

    body = {"input": RUN_INPUT, "provider": "openai"}
    headers = {"Authorization": f"Token {token}"}

    def one(_: int) -> float:
        with requests.Session() as session:
            start = time.perf_counter()
            response = session.post(url + "/api/v1/runs", json=body, headers=headers, timeout=60)
            elapsed = (time.perf_counter() - start) * 1000
        if response.status_code != 201 or response.json().get("output") != "85":
            raise CommandError(f"HTTP bench run failed: {response.status_code} {response.text[:200]}")
        return elapsed

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        latencies = list(pool.map(one, range(runs)))
    wall = time.perf_counter() - started
    p50, p95 = _percentiles(latencies, (50, 95))
    return runs / wall, p50, p95


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _rate(fn: Callable[[], object], seconds: float = 0.5) -> float:
    """Calls per second over about `seconds` of wall time."""
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(200):
            fn()
        calls += 200
    return calls / elapsed


def _percentiles(samples_ms: list[float], points: tuple[int, ...] = (50, 95)) -> tuple[float, ...]:
    """The given percentiles of the samples."""
    if len(samples_ms) == 1:  # quantiles() needs two
        return tuple(samples_ms[0] for _ in points)
    cuts = statistics.quantiles(samples_ms, n=100, method="inclusive")
    return tuple(cuts[p - 1] for p in points)


def _engine_overhead_us(units: int = 2000) -> float:
    from agents.engine import ModelReply, RunState, ToolCall, Toolset, advance
    from agents.tools import Tool

    noop = Tool("noop", "does nothing", {"type": "object"}, lambda a, c: "ok", inline=True)
    reply = ModelReply(tool_calls=(ToolCall("c1", "noop", {}),))

    class Instant:
        def complete(self, request):
            return reply

    toolset, start = Toolset({"noop": noop}), time.perf_counter()
    for _ in range(units // 20):
        state = RunState(input="bench", tools=["noop"], max_turns=21)
        for _ in range(20):
            state, _events = advance(state, Instant(), toolset, time.time)
    return (time.perf_counter() - start) / units * 1e6


def _persisted_overhead_ms(runs: int = 20) -> float:
    from agents.runs import drive, submit

    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
    try:
        steps, start = 0, time.perf_counter()
        for _ in range(runs):
            run = submit.start_run(owner=user, options=submit.RunOptions(input=RUN_INPUT, tools=["calculator"]))
            run = drive.execute(run_id=run.pk)
            steps += run.steps.count()
        return (time.perf_counter() - start) / steps * 1000
    finally:
        user.delete()


_SYLLABLES = [
    "ka",
    "lo",
    "mi",
    "zu",
    "te",
    "ra",
    "no",
    "vi",
    "se",
    "pa",
    "du",
    "fe",
    "go",
    "hu",
    "ji",
    "ly",
    "mo",
    "ne",
]


def _vocabulary(size: int = 20000) -> list[str]:
    """Synthetic content words; used with Zipf-like frequencies, as words are in real text."""
    rnd = random.Random(1)
    words: set[str] = set()
    while len(words) < size:
        words.add("".join(rnd.choice(_SYLLABLES) for _ in range(rnd.randint(2, 4))))
    return sorted(words)


_VOCAB = _vocabulary()
# Zipf's law over word ranks, starting past the ~150 most frequent ranks: in real text those are stop words, which
# recall drops from queries; what remains is the long tail of content words.
_ZIPF = list(itertools.accumulate(1 / (rank + 150) ** 1.07 for rank in range(len(_VOCAB))))


def _add_facts(user, count: int, start: int = 0, batch: int = 2000) -> None:
    """`count` facts of 6-12 words each, content-word frequencies Zipf-distributed over a 20k-word vocabulary.

    `start` is how many facts the user has already: seed and digests follow the position, so two equal increments
    (--sizes 50,100) add new facts instead of repeating the first ones (which broke the (owner, digest) constraint).
    """
    from memory.models import Fact
    from memory.services import _digest

    rnd = random.Random(start + count)
    made = 0
    while made < count:
        chunk = []
        for _ in range(min(batch, count - made)):
            text = " ".join(rnd.choices(_VOCAB, cum_weights=_ZIPF, k=rnd.randint(6, 12)))
            chunk.append(Fact(owner=user, text=text, digest=_digest(f"{text} {start + made + len(chunk)}")))
        Fact.objects.bulk_create(chunk)
        made += len(chunk)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE memory_fact")  # what autovacuum would do after a bulk load


def _recall_latency(user, queries: int) -> tuple[float, float]:
    from memory.models import Fact
    from memory.services import recall

    rnd = random.Random(7)
    texts = list(Fact.objects.filter(owner=user).order_by("?").values_list("text", flat=True)[:queries])
    samples = []
    for text in texts:
        query = " ".join(rnd.sample(text.split(), 2))  # two words of a stored fact, as a user would ask
        start = time.perf_counter()
        recall(user, query, limit=5)
        samples.append((time.perf_counter() - start) * 1000)
    return _percentiles(samples)
