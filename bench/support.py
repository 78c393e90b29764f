"""What `manage.py bench` measures with: the processes it starts, the load it sends, the rows it builds and prints."""

from __future__ import annotations

import getpass
import itertools
import random
import secrets
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import connection
from django.test.utils import override_settings
from rest_framework.authtoken.models import Token

RUN_INPUT = "What is 12*7, plus 1?"

if TYPE_CHECKING:  # the HTTP helpers (requests, subprocesses) load only when an HTTP section runs
    from bench.http import Gunicorn, Load, ServerUsage


_CHILD_SECRET = secrets.token_urlsafe(48)  # the SECRET_KEY of the processes the bench starts


@dataclass
class Row:
    figure: str
    value: float
    unit: str
    work: str
    seed: str = ""


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
    counts.append(opts.get("stream_runs", 1))
    if any(n < 1 for n in counts):
        raise CommandError(
            "--sizes, --queries, --http-runs, --latency-clients, --background-runs, --prune-runs and --stream-runs "
            "must be at least 1.",
            returncode=2,
        )
    if not opts.get("stream_seconds", 1) > 0:
        raise CommandError("--stream-seconds must be more than 0.", returncode=2)
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
        "stream_runs": opts.get("stream_runs", 200),
        "stream_seconds": opts.get("stream_seconds", 8.0),
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
        chunk: list = []
        for _ in range(min(batch, count - made)):
            text = " ".join(rnd.choices(_VOCAB, cum_weights=_ZIPF, k=rnd.randint(6, 12)))
            chunk.append(Fact(owner=user, text=text, digest=_digest(f"{text} {start + made + len(chunk)}")))
        Fact.objects.bulk_create(chunk)
        made += len(chunk)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE memory_fact")  # what autovacuum would do after a bulk load
