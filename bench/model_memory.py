"""`manage.py bench --only model_memory`: the memory of a machine serving as production does, the gunicorn master and
its two workers plus one `run_worker`, after warm-up and some work (three-turn runs, background runs, remembers and
recalls, so every process has embedded text).

RSS counts a page shared by several processes once per process (the embedding weights mapped from the wheel, the
code after fork); PSS divides each shared page among the processes that map it, so PSS summed is what the machine
really holds. Both come from /proc/<pid>/smaps_rollup; the weights' own share from /proc/<pid>/smaps.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.support import Row, _bench_user, _http_env, _left, _queue_runs, _wait_for, _warm_up

SEED = "seed recipe, 2 uvicorn workers, after 400 runs: RSS 168 MB, PSS 126 MB (docs/memory.md)"
FACTS = [
    "My car is a red Volvo",
    "I live in Lisbon",
    "I am allergic to peanuts",
    "I work as a nurse",
    "My sister is called Ana",
    "I play the cello on Sundays",
]
QUERIES = ["what do I drive?", "where is my home?", "what food should I avoid?", "what is my job?"]


def measure(progress, background_runs: int = 20) -> list[Row]:
    from agents.models import RunStatus
    from bench.http import Gunicorn, InstantModelServer, Worker, peak_rss_mb, process_tree

    with _bench_user() as token, InstantModelServer() as model:
        env = _http_env(model.url)
        with Gunicorn(env) as server, Worker(env, concurrency=50) as worker:
            progress("  model_memory: runs, remembers and recalls in every worker …")
            _warm_up(server, token)
            _memory_requests(server.url, token)
            ids = _queue_runs(token, background_runs, env)
            _wait_for(lambda: _left(ids, RunStatus.DONE, negate=True) == 0, worker, time.perf_counter(), "runs", 120)
            _settle([server.proc.pid, worker.proc.pid])
            tree = process_tree(server.proc.pid)
            workers = [pid for pid in tree if pid != server.proc.pid]
            parts = {"master": [server.proc.pid], "workers": workers, "run_worker": [worker.proc.pid]}
            usage = {name: [usage_of(pid) for pid in pids] for name, pids in parts.items()}
            peak = peak_rss_mb(tree)
    return _rows(usage, peak, len(workers))


def usage_of(pid: int) -> dict[str, float]:
    """Rss, Pss, Pss_Anon (MB) of one process, and the Rss and Pss of its mappings of the embedding weights."""
    found = _smaps_rollup(pid)
    found["weights_rss"] = found["weights_pss"] = 0.0
    weights, inside = _weights_path(), False
    for line in _read(f"/proc/{pid}/smaps").splitlines():
        head = line.split(None, 5)
        if head and "-" in head[0] and len(head) >= 5:  # a mapping's header line: address perms offset dev inode path
            inside = len(head) == 6 and head[5].strip() == weights
        elif inside and head and head[0] in ("Rss:", "Pss:"):
            found["weights_" + head[0][:-1].lower()] += int(head[1]) / 1024
    return found


def _smaps_rollup(pid: int) -> dict[str, float]:
    wanted = {"Rss:", "Pss:", "Pss_Anon:", "Pss_File:"}
    found = {}
    for line in _read(f"/proc/{pid}/smaps_rollup").splitlines():
        head = line.split()
        if head and head[0] in wanted:
            found[head[0][:-1]] = int(head[1]) / 1024
    return {key: found.get(key, 0.0) for key in ("Rss", "Pss", "Pss_Anon", "Pss_File")}


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:  # the process exited
        return ""


def _weights_path() -> str:
    from memory import embeddings

    return str(embeddings.weights_path().resolve())


def _memory_requests(url: str, token: str, rounds: int = 4) -> None:
    """Facts remembered and recalled by meaning over the API, concurrently, so both workers embed some."""
    import requests

    headers = {"Authorization": f"Token {token}"}

    def remember(text: str) -> None:
        requests.post(f"{url}/api/v1/memory/facts", json={"text": text}, headers=headers, timeout=30)

    def recall(query: str) -> None:
        response = requests.get(
            f"{url}/api/v1/memory/facts", params={"q": query, "mode": "hybrid"}, headers=headers, timeout=30
        )
        response.raise_for_status()

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(remember, [f"{fact} ({n})" for n in range(rounds) for fact in FACTS]))
        list(pool.map(recall, QUERIES * rounds * 2))


def _settle(pids: list[int], quiet_s: float = 1.0, timeout_s: float = 20.0) -> None:
    """Until the processes use no CPU for `quiet_s` (their warm-up and last requests are over)."""
    from bench.http import TICKS, _processes, process_tree

    def ticks() -> int:
        table = _processes()
        return sum(table[p].ticks for root in pids for p in process_tree(root, table))

    deadline, last = time.monotonic() + timeout_s, ticks()
    while time.monotonic() < deadline:
        time.sleep(quiet_s)
        now = ticks()
        if now - last <= TICKS * quiet_s * 0.02:  # under 2 % of a core
            return
        last = now


def _rows(usage: dict[str, list[dict[str, float]]], peak_rss: float, workers: int) -> list[Row]:
    def total(key: str, *names: str) -> float:
        return sum(part[key] for name in names or tuple(usage) for part in usage[name])

    every = f"the gunicorn master, its {workers} workers and one run_worker"
    work = " (model: the bench's, as provider openai, whose SDK each process imports), after runs and recalls"
    server, largest = ("master", "workers"), max(usage["workers"], key=lambda part: part["Pss"], default=None)
    rows = [
        Row("model_memory, server + worker RSS", total("Rss"), "MB", f"Rss summed over {every}{work}"),
        Row("model_memory, server + worker PSS", total("Pss"), "MB", f"Pss summed over {every}: what they hold"),
        Row("model_memory, server + worker anonymous PSS", total("Pss_Anon"), "MB", f"Pss_Anon summed over {every}"),
        Row("model_memory, server RSS", total("Rss", *server), "MB", "Rss of the gunicorn master and workers", SEED),
        Row("model_memory, server PSS", total("Pss", *server), "MB", "Pss of the gunicorn master and workers", SEED),
        Row("model_memory, server peak RSS", peak_rss, "MB", "VmHWM summed over the gunicorn master and workers"),
        Row("model_memory, run_worker RSS", total("Rss", "run_worker"), "MB", "Rss of the run_worker process"),
        Row("model_memory, run_worker PSS", total("Pss", "run_worker"), "MB", "Pss of the run_worker process"),
        Row(
            "model_memory, embedding weights resident (RSS)",
            total("weights_rss"),
            "MB",
            "Rss of the mappings of the weights file summed over the processes: the rows each one touched",
        ),
        Row(
            "model_memory, embedding weights held (PSS)",
            total("weights_pss"),
            "MB",
            "Pss of the mappings of the weights file, summed: the one copy in the page cache, as far as read",
        ),
    ]
    if largest is not None:
        rows.append(Row("model_memory, largest gunicorn worker RSS", largest["Rss"], "MB", "Rss of one worker"))
        rows.append(Row("model_memory, largest gunicorn worker PSS", largest["Pss"], "MB", "Pss of one worker"))
    return rows
