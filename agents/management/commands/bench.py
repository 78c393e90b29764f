"""`manage.py bench`: the runtime's figures as a table (measured, never asserted)."""

from __future__ import annotations

import itertools
import json
import random
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from rest_framework.authtoken.models import Token

from agents.management.tables import format_table

SECTIONS = ("parser", "calculator", "engine", "persisted", "http", "memory")


@dataclass
class Row:
    figure: str
    value: float
    unit: str
    work: str
    seed: str = ""


class Command(BaseCommand):
    help = "Measure parser, calculator, engine and persistence overhead and memory recall latency."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--json", action="store_true", help="print the rows as JSON")
        parser.add_argument("--only", default=",".join(SECTIONS), help=f"comma-separated subset of {SECTIONS}")
        parser.add_argument("--sizes", default="1000,10000,100000", help="memory sizes (facts for one user)")
        parser.add_argument("--queries", type=int, default=200, help="recall queries per memory size")
        parser.add_argument("--http-runs", type=int, default=40, help="runs per concurrency level over HTTP")

    def handle(self, *args, **opts) -> None:
        wanted = [s.strip() for s in opts["only"].split(",") if s.strip()]
        unknown = sorted(set(wanted) - set(SECTIONS))
        if unknown:
            raise CommandError(
                f"Unknown section(s): {', '.join(unknown)}. Choose from {', '.join(SECTIONS)}.", returncode=2
            )
        try:
            sizes = [int(s) for s in opts["sizes"].split(",") if s.strip()]
        except ValueError:
            raise CommandError("--sizes takes comma-separated whole numbers.", returncode=2) from None
        if any(n < 1 for n in [*sizes, opts["queries"], opts["http_runs"]]):
            raise CommandError("--sizes, --queries and --http-runs must be at least 1.", returncode=2)
        rows: list[Row] = []
        for section in wanted:
            self._progress(f"measuring {section} …")
            rows += getattr(self, f"_bench_{section}")(
                sizes=sizes, queries=opts["queries"], http_runs=opts["http_runs"]
            )
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
        from agents.management.bench_http import Gunicorn, InstantModelServer

        user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
        rows: list[Row] = []
        try:
            token = Token.objects.create(user=user).key
            with InstantModelServer() as model, Gunicorn(_http_env(model.url)) as server:
                for concurrency in (1, 8):
                    self._progress(f"  http: {http_runs} runs at concurrency {concurrency} …")
                    rate, p50, p95 = _http_runs(server.url, token, http_runs, concurrency)
                    work = f"3-turn run (2 calculator calls + answer) via gunicorn, 2 workers, c={concurrency}"
                    rows += [
                        Row(f"HTTP runs/s @ c={concurrency}", rate, "runs/s", work),
                        Row(f"HTTP run p50 @ c={concurrency}", p50, "ms", work),
                        Row(f"HTTP run p95 @ c={concurrency}", p95, "ms", work),
                    ]
        finally:
            user.delete()
        return rows

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


def _http_env(model_url: str) -> dict[str, str]:
    """The gunicorn under test: the instant model as provider `openai`, no rate limit in the way."""
    return {
        "OPENAI_BASE_URL": model_url,
        "OPENAI_API_KEY": "bench-not-a-key",
        "AGENT_RATE_LIMIT": "1000000/m",
        "SECURE_SSL_REDIRECT": "0",
        "NO_PROXY": "127.0.0.1,localhost",
        "LOG_LEVEL": "WARNING",
    }


def _http_runs(url: str, token: str, runs: int, concurrency: int) -> tuple[float, float, float]:
    """(runs/s, p50 ms, p95 ms) of POST /api/v1/runs, each a whole three-turn run."""
    import requests

    body = {"input": "What is 12*7, plus 1?", "provider": "openai"}
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
    p50, p95 = _percentiles(latencies)
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


def _percentiles(samples_ms: list[float]) -> tuple[float, float]:
    if len(samples_ms) == 1:  # quantiles() needs two
        return samples_ms[0], samples_ms[0]
    cuts = statistics.quantiles(samples_ms, n=100, method="inclusive")
    return cuts[49], cuts[94]


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
    from agents import services

    user = get_user_model().objects.create_user(f"bench-{uuid.uuid4().hex[:8]}")
    try:
        steps, start = 0, time.perf_counter()
        for _ in range(runs):
            run = services.start_run(
                owner=user, options=services.RunOptions(input="What is 12*7, plus 1?", tools=["calculator"])
            )
            run = services.execute(run_id=run.pk)
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
