"""Background-run throughput at 1, 2, 4, … worker processes, on each task backend (issue 50).

For every (backend, worker count) it starts the worker processes, waits until each is connected and idle, has a
few warm-up runs driven, then queues `--runs` background runs (one model call each, to a local stub model that
answers every chat completion after `--model-ms`) and times them from the first enqueue until every one of them has
status "done". A row per measurement goes to stdout: runs/s, the seconds, how long the enqueue itself took, and the
CPU each part spent per run (the workers, PostgreSQL's backends of the bench database, the broker, the stub, the
enqueuers, and the rest of the host: anything else running shows there) with the host's busy share, so that the
bound can be read off the row. Progress goes to stderr.

Backends:

- `db`: `manage.py run_worker --concurrency 200`, taking tasks from the database queue.
- `celery-amqp`, `celery-redis`: `celery -A reactsite worker -P gevent -c 200` with RabbitMQ
  (amqp://guest:guest@127.0.0.1:5672//) or Redis (redis://127.0.0.1:6379/3) as the broker; each measurement has
  a queue of its own (`CELERY_TASK_DEFAULT_QUEUE=bench-<uuid>`), deleted afterwards.

Each backend gets a fresh PostgreSQL database (`<--db-prefix>_<backend>`, created and migrated here, dropped at the
end unless `--keep-db`). Every process of a measurement shares one environment (database, backend, stub model, a
throwaway SECRET_KEY). Workers are stopped with SIGTERM, then SIGKILL after 15 s; only the processes this script
started are signalled.

Run it from the project's root, with PostgreSQL on 127.0.0.1:5432 (user postgres, no password) and the brokers up:

    .venv/bin/python bench/workers_scale.py --backends db,celery-amqp,celery-redis --workers 1,2,4 --runs 400 \\
        --model-ms 200 --top
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import psutil
import psycopg

ROOT = Path(__file__).resolve().parent.parent
PYTHON = str(ROOT / ".venv" / "bin" / "python")
CELERY = str(ROOT / ".venv" / "bin" / "celery")
PG = "postgres://postgres@127.0.0.1:5432"
BROKERS = {
    "celery-amqp": ("amqp://guest:guest@127.0.0.1:5672//", 5672, "beam.smp"),
    "celery-redis": ("redis://127.0.0.1:6379/3", 6379, "redis-server"),
}
BACKENDS = ("db", *BROKERS)
STOP_GRACE_S = 15.0
REPLY = json.dumps(
    {
        "id": "x",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-4o-mini",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
    }
).encode()

# What each enqueuer runs (`python -c`, in the measurement's environment): Django set up, `warm` runs submitted
# under the warm-up user, "ready" printed; then, on a line of stdin, `count` runs under the measured user, and a
# JSON line with what it took.
ENQUEUER = """
import json, os, sys, time
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reactsite.settings")
import django
django.setup()
from django.contrib.auth import get_user_model
from agents.runs import submit
warm_name, name, warm, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
users = get_user_model().objects
opts = submit.RunOptions(input="say done", mode="background", provider="openai", tools=[], timeout_s=120)
warm_user, _ = users.get_or_create(username=warm_name)
user, _ = users.get_or_create(username=name)
for _ in range(warm):
    submit.submit_run(owner=warm_user, options=opts)
print("ready", flush=True)
sys.stdin.readline()
cpu, started = time.process_time(), time.monotonic()
ids = [str(submit.submit_run(owner=user, options=opts).pk) for _ in range(count)]
print(json.dumps({"s": time.monotonic() - started, "cpu": time.process_time() - cpu, "n": len(ids)}), flush=True)
"""

COUNTS = """
SELECT count(*), count(*) FILTER (WHERE r.status = 'done'), count(*) FILTER (WHERE r.stop_reason = 'final_answer')
FROM agents_run r JOIN auth_user u ON u.id = r.owner_id WHERE u.username = %s
"""


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# --- the stub model ----------------------------------------------------------------------------------------------


def serve_stub(port: int, model_ms: float) -> None:
    """The stub model, in this process (`--serve-stub`): every chat completion answered "done" after model_ms, each
    connection on a thread of its own."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # after main() unshadowed it

    class Reply(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's client expects

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path != "/v1/chat/completions":
                self.send_error(404)
                return
            time.sleep(model_ms / 1000)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(REPLY)))
            self.end_headers()
            self.wfile.write(REPLY)

        def log_message(self, format: str, *args: object) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 2048

    Server(("127.0.0.1", port), Reply).serve_forever()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# --- processes ---------------------------------------------------------------------------------------------------


def start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """A child in a session of its own (so its group can be signalled by its id), its output to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(args, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each one's process group, then SIGKILL what is still there after STOP_GRACE_S."""
    for p in procs:
        if p.poll() is None:
            _signal_group(p, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            say(f"pid {p.pid} still running after {STOP_GRACE_S:.0f} s: SIGKILL")
            _signal_group(p, signal.SIGKILL)
            p.wait()


def _signal_group(p: subprocess.Popen, sig: signal.Signals) -> None:
    try:
        os.killpg(p.pid, sig)  # the group is the child's own (start_new_session)
    except ProcessLookupError:
        pass


def cpu_s(proc: psutil.Process) -> float:
    try:
        t = proc.cpu_times()
        return t.user + t.system + t.children_user + t.children_system
    except psutil.NoSuchProcess:
        return 0.0


def cpu_of(pids: list[int]) -> float:
    return sum(cpu_s(psutil.Process(pid)) for pid in pids if psutil.pid_exists(pid))


def postgres_cpu(database: str) -> dict[int, float]:
    """CPU seconds of each PostgreSQL backend serving `database` (read from their process titles)."""
    found = {}
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if p.info["name"] == "postgres" and f" {database} " in cmd:
            found[p.pid] = cpu_s(p)
    return found


def named_pids(name: str) -> list[int]:
    return [p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == name]


@dataclass
class Snapshot:
    """CPU seconds of the measurement's parts at one moment."""

    workers: float
    postgres: dict[int, float]
    broker: float
    stub: float
    host_busy: float
    host_all: float

    @classmethod
    def take(cls, workers: list[int], database: str, broker: list[int], stub: int) -> Snapshot:
        t = psutil.cpu_times()
        idle = t.idle + getattr(t, "iowait", 0.0)
        total = sum(t)
        return cls(cpu_of(workers), postgres_cpu(database), cpu_of(broker), cpu_of([stub]), total - idle, total)


# --- a measurement -----------------------------------------------------------------------------------------------


@dataclass
class Result:
    backend: str
    workers: int
    runs: int
    seconds: float
    enqueue_s: float
    ok: int
    worker_ms: float
    postgres_ms: float
    broker_ms: float
    stub_ms: float
    enqueue_ms: float
    other_ms: float
    host_busy: float

    HEADER = (
        "| backend | workers | runs | runs/s | seconds | enqueue s | final answers | worker CPU ms/run | "
        "PostgreSQL ms/run | broker ms/run | stub ms/run | enqueuer ms/run | rest of host ms/run | host busy |"
    )

    def row(self) -> str:
        return (
            f"| {self.backend} | {self.workers} | {self.runs} | {self.runs / self.seconds:.1f} | {self.seconds:.2f} | "
            f"{self.enqueue_s:.2f} | {self.ok} | {self.worker_ms:.2f} | {self.postgres_ms:.2f} | "
            f"{self.broker_ms:.2f} | {self.stub_ms:.2f} | {self.enqueue_ms:.2f} | {self.other_ms:.2f} | "
            f"{self.host_busy:.0%} |"
        )


@dataclass
class Bench:
    backend: str
    database: str
    env: dict[str, str]
    stub_pid: int
    logs: Path
    opts: argparse.Namespace

    def measure(self, workers: int, top: bool) -> Result:
        tag = uuid.uuid4().hex[:10]
        env = dict(self.env)
        if self.backend in BROKERS:
            env["CELERY_TASK_DEFAULT_QUEUE"] = f"bench-{tag}"
        procs = [self._worker(i, env, tag) for i in range(1, workers + 1)]
        enqueuers: list[subprocess.Popen] = []
        try:
            self._wait_ready(procs)
            with psycopg.connect(f"{PG}/{self.database}", autocommit=True) as db:
                self._enqueuers(env, tag, enqueuers)
                self._wait_done(db, f"warm-{tag}", self.opts.warmup * len(enqueuers), "warm-up")
                time.sleep(0.5)  # the warm-up's last writes and acknowledgements
                return self._timed(db, procs, enqueuers, workers, tag, top)
        finally:
            stop(enqueuers + procs)
            if self.backend in BROKERS:
                delete_queue(BROKERS[self.backend][0], env["CELERY_TASK_DEFAULT_QUEUE"])

    def _worker(self, i: int, env: dict[str, str], tag: str) -> subprocess.Popen:
        c = str(self.opts.concurrency)
        if self.backend == "db":
            args = [PYTHON, "manage.py", "run_worker", "--concurrency", c]
        else:
            args = [CELERY, "-A", "reactsite", "worker", "-P", "gevent", "-c", c, "-n", f"w{i}@%h", "-l", "warning"]
        return start(args, env, self.logs / f"{self.backend}-{tag}-w{i}.log")

    def _wait_ready(self, procs: list[subprocess.Popen], timeout_s: float = 60.0) -> None:
        """Until each worker holds a connection to its queue (the database or the broker) and its CPU has settled."""
        port = 5432 if self.backend == "db" else BROKERS[self.backend][1]
        deadline = time.monotonic() + timeout_s
        for p in procs:
            proc = psutil.Process(p.pid)
            last = cpu_s(proc)
            while True:
                if p.poll() is not None:
                    raise RuntimeError(f"worker {p.pid} exited with {p.returncode} (logs in {self.logs})")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"worker {p.pid} not ready after {timeout_s:.0f} s (logs in {self.logs})")
                time.sleep(0.5)
                now = cpu_s(proc)
                connected = any(c.raddr and c.raddr.port == port for c in proc.net_connections("tcp"))
                if connected and now - last < 0.02:
                    break
                last = now
        say(f"{self.backend}: {len(procs)} worker(s) ready")

    def _enqueuers(self, env: dict[str, str], tag: str, procs: list[subprocess.Popen]) -> None:
        """Start the enqueuers (into `procs`, so that they are stopped whatever happens) and wait for their warm-up."""
        n, share = self.opts.enqueuers, self.opts.runs // self.opts.enqueuers
        counts = [share + (1 if i < self.opts.runs % n else 0) for i in range(n)]
        with (self.logs / f"{self.backend}-{tag}-enqueue.log").open("ab") as errors:
            procs.extend(self._enqueuer(env, tag, count, errors) for count in counts)
        for p in procs:
            line = p.stdout.readline().strip() if p.stdout else ""
            if line != "ready":
                raise RuntimeError(f"an enqueuer failed ({line!r}): logs in {self.logs}")

    def _enqueuer(self, env: dict[str, str], tag: str, count: int, errors: BinaryIO) -> subprocess.Popen:
        return subprocess.Popen(
            [PYTHON, "-c", ENQUEUER, f"warm-{tag}", f"bench-{tag}", str(self.opts.warmup), str(count)],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            start_new_session=True,
        )

    def _wait_done(self, db: psycopg.Connection, user: str, n: int, what: str, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while (counts := db.execute(COUNTS, [user]).fetchone()) and counts[1] < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: {counts[1]} of {n} runs done after {timeout_s:.0f} s")
            time.sleep(0.2)

    def _timed(
        self,
        db: psycopg.Connection,
        procs: list[subprocess.Popen],
        enqueuers: list[subprocess.Popen],
        workers: int,
        tag: str,
        top: bool,
    ) -> Result:
        n, user = self.opts.runs, f"bench-{tag}"
        broker = named_pids(BROKERS[self.backend][2]) if self.backend in BROKERS else []
        parts = ([p.pid for p in procs], self.database, broker, self.stub_pid)
        before = Snapshot.take(*parts)
        started = time.monotonic()
        for p in enqueuers:
            if p.stdin:
                p.stdin.write("go\n")
                p.stdin.flush()
        reports = Reader(enqueuers)
        topped = not top
        deadline = started + 120.0
        while True:
            total, done, ok = db.execute(COUNTS, [user]).fetchone() or (0, 0, 0)
            if done >= n:
                break
            if not topped and done >= n // 2:
                topped = True
                snapshot = subprocess.run(["top", "-b", "-n1", "-w", "160"], capture_output=True, text=True).stdout
                say(f"top at {done}/{n} done, {self.backend} × {workers}:\n" + "\n".join(snapshot.splitlines()[:22]))
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.backend} × {workers}: {done} of {n} runs done ({total} queued) after 120 s")
            time.sleep(0.2)
        seconds = time.monotonic() - started
        after = Snapshot.take(*parts)
        sent = reports.wait()
        pg = sum(cpu - before.postgres.get(pid, 0.0) for pid, cpu in after.postgres.items())
        per_run = 1000 / n
        parts_s = after.workers - before.workers + pg + after.broker - before.broker + after.stub - before.stub
        enqueue_cpu = sum(r["cpu"] for r in sent)
        return Result(
            backend=self.backend,
            workers=workers,
            runs=n,
            seconds=seconds,
            enqueue_s=max(r["s"] for r in sent),
            ok=ok,
            worker_ms=(after.workers - before.workers) * per_run,
            postgres_ms=pg * per_run,
            broker_ms=(after.broker - before.broker) * per_run,
            stub_ms=(after.stub - before.stub) * per_run,
            enqueue_ms=enqueue_cpu * per_run,
            other_ms=(after.host_busy - before.host_busy - parts_s - enqueue_cpu) * per_run,
            host_busy=(after.host_busy - before.host_busy) / max(after.host_all - before.host_all, 1e-9),
        )


class Reader:
    """The enqueuers' JSON reports, read on a thread while the driver polls."""

    def __init__(self, procs: list[subprocess.Popen]) -> None:
        self.reports: list[dict] = []
        self.threads = [threading.Thread(target=self._read, args=(p,), daemon=True) for p in procs]
        for t in self.threads:
            t.start()

    def _read(self, p: subprocess.Popen) -> None:
        line = p.stdout.readline() if p.stdout else ""
        if line.strip():
            self.reports.append(json.loads(line))

    def wait(self) -> list[dict]:
        for t in self.threads:
            t.join(30)
        if len(self.reports) != len(self.threads):
            raise RuntimeError("an enqueuer did not report")
        return self.reports


def delete_queue(url: str, queue: str) -> None:
    """The measurement's queue and exchange, gone from the broker (RabbitMQ keeps an empty durable queue)."""
    from kombu import Connection

    try:
        with Connection(url) as conn:
            channel = conn.default_channel
            channel.queue_delete(queue)
            channel.exchange_delete(queue)
    except Exception as exc:  # noqa: BLE001 - a leftover empty queue is harmless, the figures are what matter
        say(f"could not delete queue {queue}: {exc}")


# --- databases ---------------------------------------------------------------------------------------------------


@contextmanager
def fresh_database(name: str, env: dict[str, str], keep: bool) -> Iterator[None]:
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    say(f"migrating {name}")
    subprocess.run([PYTHON, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    try:
        yield
    finally:
        if not keep:
            with psycopg.connect(f"{PG}/postgres", autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def environment(backend: str, database: str, stub_port: int, secret: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CELERY_", "AGENT_", "DB_"))}
    env.update(
        DATABASE_URL=f"{PG}/{database}",
        OPENAI_API_KEY="sk-test-0000000000000000",
        OPENAI_BASE_URL=f"http://127.0.0.1:{stub_port}/v1",
        LOG_LEVEL="WARNING",
        REACTSITE_ENV_FILE="",
        SECRET_KEY=secret,
        DEBUG="0",
        AGENT_TASK_BACKEND="db" if backend == "db" else "celery",
    )
    if backend in BROKERS:
        env["CELERY_BROKER_URL"] = BROKERS[backend][0]
    return env


# --- the command -------------------------------------------------------------------------------------------------


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default=",".join(BACKENDS), help=f"comma-separated, of {', '.join(BACKENDS)}")
    parser.add_argument("--workers", default="1,2,4", help="worker process counts, comma-separated")
    parser.add_argument("--runs", type=int, default=400, help="runs timed per measurement")
    parser.add_argument("--model-ms", type=float, default=200.0, help="the stub model's delay per reply")
    parser.add_argument("--concurrency", type=int, default=200, help="tasks in flight per worker process")
    parser.add_argument("--enqueuers", type=int, default=1, help="processes submitting the runs, in parallel")
    parser.add_argument("--warmup", type=int, default=20, help="untimed runs each enqueuer submits first")
    parser.add_argument("--db-prefix", default="bench_scale", help="databases are <prefix>_<backend>")
    parser.add_argument("--keep-db", action="store_true", help="leave the databases in place")
    parser.add_argument("--top", action="store_true", help="a `top` snapshot (stderr) halfway through each largest")
    parser.add_argument("--logs", type=Path, default=Path("/tmp/workers_scale"), help="the children's output")
    parser.add_argument("--serve-stub", type=int, metavar="PORT", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.serve_stub is None:
        opts.backends = [b.strip() for b in opts.backends.split(",") if b.strip()]
        unknown = sorted(set(opts.backends) - set(BACKENDS))
        if unknown:
            parser.error(f"unknown backend(s): {', '.join(unknown)}")
        try:
            opts.workers = [int(w) for w in opts.workers.split(",")]
        except ValueError:
            parser.error("--workers takes whole numbers, comma-separated")
        if min(opts.workers) < 1 or opts.runs < 1 or opts.enqueuers < 1 or opts.warmup < 0 or opts.model_ms < 0:
            parser.error("--workers, --runs and --enqueuers must be at least 1, --warmup and --model-ms at least 0")
    return opts


def main(argv: list[str] | None = None) -> int:
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # run as a script: bench/http.py would shadow the standard library's http
    opts = parse(argv)
    if opts.serve_stub is not None:
        serve_stub(opts.serve_stub, opts.model_ms)
        return 0
    opts.logs.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_urlsafe(48)  # the children's SECRET_KEY, thrown away with them
    port = free_port()
    stub_log = opts.logs / "stub.log"
    stub_args = [sys.executable, __file__, "--serve-stub", str(port), "--model-ms", str(opts.model_ms)]
    stub = start(stub_args, dict(os.environ), stub_log)
    results: list[Result] = []
    try:
        wait_port(port)
        say(f"stub model on 127.0.0.1:{port}, {opts.model_ms:g} ms a reply; logs in {opts.logs}")
        for backend in opts.backends:
            database = f"{opts.db_prefix}_{backend.replace('-', '_')}"
            env = environment(backend, database, port, secret)
            with fresh_database(database, env, opts.keep_db):
                bench = Bench(backend, database, env, stub.pid, opts.logs, opts)
                for workers in opts.workers:
                    say(f"{backend} × {workers} worker(s): {opts.runs} runs")
                    result = bench.measure(workers, opts.top and workers == max(opts.workers))
                    say(f"  {result.runs / result.seconds:.1f} runs/s in {result.seconds:.2f} s")
                    results.append(result)
    finally:
        stop([stub])
        print(Result.HEADER)
        print("|---" * (Result.HEADER.count("|") - 1) + "|")
        for result in results:
            print(result.row())
    return 0


if __name__ == "__main__":
    sys.exit(main())
