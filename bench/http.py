"""Helpers of `manage.py bench` for the HTTP figures: a model server, a gunicorn, its CPU and memory, a load."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

REPLIES: list[dict[str, Any]] = [
    {"tool": ("calculator", {"expression": "12*7"})},
    {"tool": ("calculator", {"expression": "84+1"})},
    {"text": "85"},
]
RUN_BODY = {"input": "What is 12*7, plus 1?", "provider": "openai"}
TICKS = os.sysconf("SC_CLK_TCK")  # /proc's CPU times are in clock ticks


def _completion(turn: int) -> dict:
    """An OpenAI Chat Completions body for the given turn of the three-turn run."""
    reply = REPLIES[min(turn, len(REPLIES) - 1)]
    message: dict = {"role": "assistant", "content": reply.get("text")}
    if "tool" in reply:
        name, args = reply["tool"]
        message["tool_calls"] = [
            {"id": f"call_{turn}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        ]
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    finish = "tool_calls" if "tool" in reply else "stop"
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return {
        "id": "bench",
        "object": "chat.completion",
        "created": 0,
        "model": "bench",
        "choices": [choice],
        "usage": usage,
    }


class _Handler(BaseHTTPRequestHandler):
    """Chat Completions: the next reply of the three-turn run, counted from the tool messages sent."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once: no delayed-ACK stall
    server: _ModelHTTPServer

    def log_message(self, format, *args) -> None:  # noqa: A002 - silence
        return

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        payload = json.dumps(_completion(turn)).encode()
        if self.server.delay_s:
            time.sleep(self.server.delay_s)  # only this connection's thread waits: the server threads per request
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class _ModelHTTPServer(ThreadingHTTPServer):
    """A thread per connection, so a delayed answer holds up no other."""

    daemon_threads = True
    request_queue_size = 256  # the default backlog of 5 would drop connects when many gunicorn threads call at once
    delay_s = 0.0


class InstantModelServer:
    """An OpenAI-compatible server on 127.0.0.1: two calculator calls, then "85"; each answer after `delay_ms`."""

    def __init__(self, delay_ms: float = 0.0) -> None:
        self.delay_ms = delay_ms

    def __enter__(self) -> InstantModelServer:
        self.server = _ModelHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.delay_s = self.delay_ms / 1000
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Child:
    """A process of this checkout on the current database; its stderr drained (a full pipe would block it), its
    tail kept for errors. Stopped on exit: SIGTERM, then SIGKILL after 10 s."""

    log: deque[str]

    def _start(self, command: list[str], env: dict[str, str]) -> None:
        self.log = deque(maxlen=40)
        self.proc = subprocess.Popen(
            command, cwd=Path(__file__).resolve().parents[1], env={**os.environ, **env},
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        threading.Thread(target=self._read_log, daemon=True).start()

    def _read_log(self) -> None:
        assert self.proc.stderr is not None  # started with stderr=PIPE
        for line in self.proc.stderr:
            self.log.append(line.rstrip())
            self._saw(line)

    def _saw(self, line: str) -> None:
        """Each line of the process's log, as it comes."""

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Gunicorn(_Child):
    """gunicorn with the repo's config on a free port, talking to the current database."""

    def __init__(self, env: dict[str, str], workers: int = 2) -> None:
        self.port, self.env, self.workers = free_port(), env, workers
        self.url = f"http://127.0.0.1:{self.port}"
        self.worker_class = "?"

    def __enter__(self) -> Gunicorn:
        gunicorn = str(Path(sys.executable).with_name("gunicorn"))
        command = [
            gunicorn,
            "-c",
            "gunicorn.conf.py",
            "--workers",
            str(self.workers),
            "--bind",
            f"127.0.0.1:{self.port}",
        ]
        self._start([*command, "reactsite.wsgi"], self.env)  # no access line: gunicorn.conf.py leaves it off
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if requests.get(self.url + "/api/v1/health", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.2)  # a 503 (say, no cache table) must not become a busy loop either
        self.__exit__()
        tail = "\n".join(self.log)
        raise RuntimeError(f"gunicorn did not become healthy within 30 s; its log ends:\n{tail}")

    def _saw(self, line: str) -> None:
        if "Using worker:" in line:  # the worker class gunicorn names (its log lines are JSON)
            message = _message(line)
            self.worker_class = message.rsplit(":", 1)[1].strip()

    def worker_cpu_ms(self) -> dict[int, float]:
        """CPU ms used so far by each live worker (a child of the master)."""
        table = _processes()
        return {pid: p.ticks * 1000 / TICKS for pid, p in table.items() if p.ppid == self.proc.pid}


class Worker(_Child):
    """One `manage.py run_worker` process (the background worker) with `concurrency` tasks in flight at most."""

    def __init__(self, env: dict[str, str], concurrency: int) -> None:
        self.env, self.concurrency = env, concurrency

    def __enter__(self) -> Worker:
        command = [sys.executable, "manage.py", "run_worker", "--concurrency", str(self.concurrency)]
        self._start([*command, "--interval", "0.05"], self.env)
        return self


# --- CPU and memory of processes, from /proc ---------------------------------------------------------------------


@dataclass(frozen=True)
class _Proc:
    """What /proc/<pid>/stat says of one process."""

    ppid: int
    comm: str
    ticks: int  # utime + stime, plus cutime + cstime: the CPU of children it reaped (a restarted worker) stays counted


def _processes() -> dict[int, _Proc]:
    """Every process visible in /proc, read once."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:  # it exited while we looked
            continue
        comm, fields = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
        # fields[0] is field 3 (state) of proc(5): ppid is field 4, utime..cstime are fields 14-17
        table[int(stat.parent.name)] = _Proc(int(fields[1]), comm, sum(int(f) for f in fields[11:15]))
    return table


def process_tree(root: int, table: dict[int, _Proc] | None = None) -> list[int]:
    """`root` and all its descendants that are alive."""
    table = _processes() if table is None else table
    kids: dict[int, list[int]] = {}
    for pid, proc in table.items():
        kids.setdefault(proc.ppid, []).append(pid)
    tree, todo = [], [root] if root in table else []
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += kids.get(pid, [])
    return tree


def peak_rss_mb(pids: list[int]) -> float:
    """Sum of VmHWM (each process's peak resident set) in MB; pages shared after fork count once per process."""
    total_kb = 0
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/status").read_text().splitlines()
        except OSError:
            continue
        total_kb += sum(int(line.split()[1]) for line in lines if line.startswith("VmHWM:"))
    return total_kb / 1024


def postgres_backends(user: str, database: str, table: dict[int, _Proc] | None = None) -> list[int]:
    """Local PostgreSQL backends of `user` on `database`: PostgreSQL writes both into each backend's title."""
    table = _processes() if table is None else table
    marker, pids = f" {user} {database} ", []
    for pid, proc in table.items():
        if proc.comm != "postgres":
            continue
        try:
            title = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in f"{title} ":
            pids.append(pid)
    return pids


@dataclass
class ServerUsage:
    """CPU of a process tree (and of our PostgreSQL backends, if asked) over a window; the tree's peak RSS after."""

    root: int
    postgres: tuple[str, str] | None = None  # (user, database) whose backends to count
    cpu_ms: float = 0.0
    db_cpu_ms: float | None = None
    peak_rss_mb: float = 0.0
    _before: tuple[int, dict[int, int]] = field(default=(0, {}), repr=False)

    def _ticks(self) -> tuple[int, dict[int, int]]:
        """(ticks of the tree, ticks per backend of our database)."""
        table = _processes()
        tree = sum(table[pid].ticks for pid in process_tree(self.root, table))
        backends = postgres_backends(*self.postgres, table) if self.postgres else []
        return tree, {pid: table[pid].ticks for pid in backends}

    def __enter__(self) -> ServerUsage:
        self._before = self._ticks()
        return self

    def __exit__(self, *exc) -> None:
        tree, db = self._ticks()
        self.cpu_ms = (tree - self._before[0]) * 1000 / TICKS
        if db:
            # Per backend alive at the end: one that exited took its CPU along (to the postmaster's cutime, which
            # other databases' backends share), so it is left out rather than subtracted.
            before = self._before[1]
            self.db_cpu_ms = sum(t - before.get(pid, 0) for pid, t in db.items()) * 1000 / TICKS
        self.peak_rss_mb = peak_rss_mb(process_tree(self.root))


# --- closed-loop load --------------------------------------------------------------------------------------------


@dataclass
class Load:
    """What a closed-loop load saw: good runs (a 201 with the answer "85"), their latencies, and the failures."""

    clients: int
    seconds: float
    runs: int = 0  # good runs that finished inside the window
    latencies_ms: list[float] = field(default_factory=list)  # every good run started inside the window
    non_2xx: int = 0
    failed: int = 0  # transport errors and 2xx answers without the expected output
    last_error: str = ""

    @property
    def errors(self) -> int:
        """Every request that did not end in a good run."""
        return self.non_2xx + self.failed


def closed_loop(url: str, token: str, clients: int, seconds: float) -> Load:
    """`clients` threads, each with its own session, posting runs back to back until `seconds` have passed.

    A request started inside the window is waited for, so the caller can measure the server's CPU up to a quiet
    point; only runs that finished inside the window count towards runs/s.
    """
    load, window = Load(clients, seconds), {"end": 0.0}
    lock, barrier = threading.Lock(), threading.Barrier(clients + 1)

    def client() -> None:
        with requests.Session() as session:
            session.headers["Authorization"] = f"Token {token}"
            barrier.wait()
            while time.perf_counter() < window["end"]:
                _one(session, url, load, lock, window["end"])

    threads = [threading.Thread(target=client, daemon=True) for _ in range(clients)]
    for thread in threads:
        thread.start()
    window["end"] = time.perf_counter() + seconds
    barrier.wait()
    for thread in threads:
        thread.join()
    return load


def _one(session: requests.Session, url: str, load: Load, lock: threading.Lock, end: float) -> None:
    """One run posted by one client of the closed loop, recorded in `load`."""
    start = time.perf_counter()
    try:
        response = session.post(url + "/api/v1/runs", json=RUN_BODY, timeout=120)
        good = response.status_code == 201 and response.json().get("output") == "85"
    except (requests.RequestException, ValueError) as exc:
        with lock:
            load.failed += 1
            load.last_error = repr(exc)[:200]
        time.sleep(0.05)  # a refusing server must not turn the loop into a busy spin
        return
    done = time.perf_counter()
    with lock:
        if good:
            load.latencies_ms.append((done - start) * 1000)
            load.runs += done <= end
        elif 200 <= response.status_code < 300:
            load.failed += 1
            load.last_error = f"{response.status_code} {response.text[:200]}"
        else:
            load.non_2xx += 1
            load.last_error = f"{response.status_code} {response.text[:200]}"


def _message(line: str) -> str:
    """A log line's message: the `message` of a JSON line, else the line itself."""
    try:
        record = json.loads(line)
    except ValueError:
        return line
    return str(record.get("message", line)) if isinstance(record, dict) else line
