"""`manage.py bench --only stream`: live runs measured. A model server on 127.0.0.1 that streams when asked
(Chat Completions chunks) and notes when it wrote each run's first chunk; gunicorn and one run_worker on the current
database; clients on 127.0.0.1 that follow each run's event stream and note when its first `assistant.delta` came.

- latency: from the model's first chunk to the client's first delta (both clocks are this machine's);
- fan-out: many streams open at once, each run writing words at a steady pace; every word counted, in order;
  each word's latency, from the model writing its chunk to the client reading the `assistant.delta` that carries it,
  and the words lost or delivered twice; the CPU of the server processes per delta delivered; the W3 closed loop's
  runs/s beside it, against alone;
- cost: the W3 closed loop (8 clients, three-turn runs, a streaming-capable model) with AGENT_LIVE on and off.
"""

from __future__ import annotations

import json
import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

from bench.http import _completion

WRITE = re.compile(r"#write (\d+)/(\d+) #(\w+)")  # in a run's input: write N words, one every M ms, tagged
WORD = re.compile(r"w(\d{4}) ")


def word(i: int) -> str:
    return f"w{i:04d} "


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: StreamingModelServer

    def log_message(self, format, *args) -> None:  # noqa: A002 - silence
        return

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        messages = body.get("messages", [])
        user = next((m.get("content") or "" for m in messages if m.get("role") == "user"), "")
        writes = WRITE.search(json.dumps(user))
        if writes:
            words, every_ms, tag = int(writes[1]), int(writes[2]), writes[3]
            return self._write(tag, [word(i) for i in range(words)], every_ms / 1000, body.get("stream"))
        turn = sum(1 for m in messages if m.get("role") == "tool")
        reply = _completion(turn)
        if not body.get("stream"):
            return self._whole(reply)
        message = reply["choices"][0]["message"]
        payload = b"".join(_chunks(message.get("content") or "", message.get("tool_calls") or [], reply))
        self.send_response(200)  # as the seed's stub streams: the whole stream at once, the connection kept
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _whole(self, reply: dict) -> None:
        payload = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _write(self, tag: str, words: list[str], every_s: float, stream: bool) -> None:
        reply = _completion(99)
        reply["choices"][0]["message"]["content"] = "".join(words)
        if not stream:
            return self._whole(reply)
        time.sleep(self.server.lead_s)  # the client's stream is open by now
        self.server.go.wait(120)  # a fan-out starts writing once every client follows its run
        self._stream(_chunks_of(words, reply), tag, every_s, len(words))

    def _stream(self, chunks: list[bytes], tag: str | None, every_s: float, words: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        stamps: list[float] = []
        if tag is not None:
            self.server.chunk_times[tag] = stamps
        for index, chunk in enumerate(chunks):
            if index and every_s:
                time.sleep(every_s)
            self.wfile.write(chunk)
            self.wfile.flush()
            if tag is not None and 1 <= index <= words:  # a word's chunk (the first is the role)
                stamps.append(time.time())
                if index == 1:
                    self.server.first_chunk[tag] = stamps[0]


def _sse(data) -> bytes:
    return f"data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def _chunk(delta: dict, finish: str | None = None) -> bytes:
    head = {"id": "bench", "object": "chat.completion.chunk", "created": 0, "model": "bench"}
    return _sse({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})


def _tail(reply: dict, finish: str) -> list[bytes]:
    head = {"id": "bench", "object": "chat.completion.chunk", "created": 0, "model": "bench"}
    return [_chunk({}, finish), _sse({**head, "choices": [], "usage": reply["usage"]}), _sse("[DONE]")]


def _chunks_of(words: list[str], reply: dict) -> list[bytes]:
    return [
        _chunk({"role": "assistant", "content": ""}),
        *(_chunk({"content": w}) for w in words),
        *_tail(reply, "stop"),
    ]


def _chunks(content: str, calls: list[dict], reply: dict) -> list[bytes]:
    out = [_chunk({"role": "assistant", "content": ""})]
    if content:
        out.append(_chunk({"content": content}))
    for index, call in enumerate(calls):
        function = call["function"]
        out.append(
            _chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function", "function": function}]})
        )
    return out + _tail(reply, "tool_calls" if calls else "stop")


class StreamingModelServer(ThreadingHTTPServer):
    """The bench's model: the three-turn calculator run (whole or streamed, as asked), or, for an input with
    `#write N/M #tag`, N words one every M ms (streamed), noting when the first went out."""

    daemon_threads = True
    request_queue_size = 512

    def __init__(self, lead_s: float = 1.0) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.lead_s = lead_s
        self.first_chunk: dict[str, float] = {}
        self.chunk_times: dict[str, list[float]] = {}  # by tag: when each word's chunk went out (time.time())
        self.go = threading.Event()
        self.go.set()
        self.url = f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> StreamingModelServer:
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()


# --- clients --------------------------------------------------------------------------------------------------


@dataclass
class Followed:
    """What one client saw on a run's event stream."""

    first_delta: float | None = None  # time.time() of the first assistant.delta
    arrivals: list[tuple[int, float]] = field(default_factory=list)  # (word, time.time() its delta was read)
    text: str = ""
    deltas: int = 0
    done: bool = False
    error: str = ""
    events: list[str] = field(default_factory=list)


def follow(url: str, token: str, run_id: str, seen: Followed, opened: threading.Event, limit_s: float) -> None:
    """Read a run's event stream to its `done` (or `limit_s`), collecting the text of its deltas."""
    headers = {"Authorization": f"Token {token}", "Accept": "text/event-stream"}
    try:
        with requests.get(f"{url}/api/v1/runs/{run_id}/events", headers=headers, stream=True, timeout=limit_s) as r:
            opened.set()
            event = ""
            for raw in r.iter_lines(decode_unicode=True):
                line = raw if isinstance(raw, str) else raw.decode()
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: ") and event == "assistant.delta":
                    now = time.time()
                    if seen.first_delta is None:
                        seen.first_delta = now
                    text = json.loads(line[6:])["text"]
                    seen.text += text
                    seen.arrivals += [(int(w), now) for w in WORD.findall(text)]
                    seen.deltas += 1
                elif line.startswith("data: ") and event == "done":
                    seen.done = True
                    return
    except requests.RequestException as exc:
        seen.error = repr(exc)[:200]
    finally:
        opened.set()


def start_run(url: str, token: str, text: str) -> str:
    body = {"input": text, "provider": "openai", "mode": "background"}
    response = requests.post(f"{url}/api/v1/runs", json=body, headers={"Authorization": f"Token {token}"}, timeout=30)
    if response.status_code != 202:
        raise RuntimeError(f"could not queue a run: {response.status_code} {response.text[:200]}")
    return response.json()["id"]


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def first_delta_latencies(url: str, token: str, model: StreamingModelServer, runs: int) -> list[float]:
    """`runs` runs one after another, each followed from before its model's first chunk: ms from that chunk to the
    client's first delta."""
    out = []
    for i in range(runs):
        tag = f"lat{i}x{time.monotonic_ns()}"
        run_id = start_run(url, token, f"#write 5/20 #{tag}")
        seen, opened = Followed(), threading.Event()
        reader = threading.Thread(target=follow, args=(url, token, run_id, seen, opened, 30), daemon=True)
        reader.start()
        reader.join(30)
        if seen.first_delta is not None and tag in model.first_chunk:
            out.append((seen.first_delta - model.first_chunk[tag]) * 1000)
    return out


@dataclass
class FanOut:
    runs: int
    words: int
    complete: int = 0  # runs whose deltas joined into exactly their words, in order
    words_seen: int = 0
    deltas: int = 0
    duplicated: int = 0  # words delivered more than once
    latencies_ms: list[float] = field(default_factory=list)  # each word: its chunk written → its delta read
    errors: list[str] = field(default_factory=list)


def fan_out(
    url: str,
    token: str,
    model: StreamingModelServer,
    runs: int,
    words: int,
    every_ms: int,
    limit_s: float,
    writing: threading.Event | None = None,
) -> FanOut:
    """`runs` runs at once, each followed by its own client, each writing `words` words one every `every_ms`; the
    model starts writing once every client's stream is open."""
    result = FanOut(runs, words)
    expected = "".join(word(i) for i in range(words))
    followers, model.go = [], threading.Event()
    try:
        for i in range(runs):
            tag = f"fan{i}x{time.monotonic_ns()}"
            run_id = start_run(url, token, f"#write {words}/{every_ms} #{tag}")
            seen, opened = Followed(), threading.Event()
            thread = threading.Thread(target=follow, args=(url, token, run_id, seen, opened, limit_s), daemon=True)
            thread.start()
            followers.append((thread, seen, opened, tag))
        for _, _, opened, _ in followers:
            opened.wait(60)
        time.sleep(0.5)  # the last streams' first reads are done
    finally:
        model.go.set()
        if writing is not None:
            writing.set()
    for thread, _, _, _ in followers:
        thread.join(limit_s)
    for _, seen, _, tag in followers:
        _word_latencies(result, seen, model.chunk_times.get(tag, []))
        result.deltas += seen.deltas
        result.words_seen += len(re.findall(r"w\d{4} ", seen.text))
        if seen.text == expected and seen.done:
            result.complete += 1
        elif seen.error or not seen.done:
            result.errors.append(seen.error or "stream ended before done")
    return result


def _word_latencies(result: FanOut, seen: Followed, stamps: list[float]) -> None:
    """Each word's latency (its chunk written → the first delta carrying it read), and the words read twice."""
    got: set[int] = set()
    for index, at in seen.arrivals:
        if index in got:
            result.duplicated += 1
            continue
        got.add(index)
        if index < len(stamps):
            result.latencies_ms.append((at - stamps[index]) * 1000)


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


# --- the section -------------------------------------------------------------------------------------------------


def measure(token: str, progress, *, runs: int, seconds: float, latency_runs: int = 30, every_ms: int = 20) -> list:
    """The stream section's rows (see the module's docstring)."""
    from bench.http import Gunicorn, ServerUsage, Worker, closed_loop
    from bench.support import Row, _http_env, _local_postgres, _warm_up

    rows: list[Row] = []
    words = max(int(seconds * 1000 / every_ms), 10)
    with StreamingModelServer() as model:
        env = _http_env(model.url)
        with Gunicorn(env) as server, Worker(env, concurrency=runs + 20) as worker:
            _warm_up(server, token)
            progress(f"  stream: {latency_runs} runs one after another, first chunk → first delta …")
            latencies = first_delta_latencies(server.url, token, model, latency_runs)
            work = f"{len(latencies)} background runs, each followed by a client (gunicorn + run_worker, 127.0.0.1)"
            rows += [
                Row("stream: model's first chunk → client's first delta p50", percentile(latencies, 50), "ms", work),
                Row("stream: model's first chunk → client's first delta p95", percentile(latencies, 95), "ms", work),
            ]
            progress(f"  stream: W3 alone, 8 clients for {seconds:g} s …")
            alone = closed_loop(server.url, token, 8, seconds)
            progress(f"  stream: {runs} streams at once, {words} words each at {1000 // every_ms}/s …")
            pg = _local_postgres()
            with ServerUsage(server.proc.pid, postgres=pg) as web, ServerUsage(worker.proc.pid) as work_cpu:
                fan = fan_out(server.url, token, model, runs, words, every_ms, seconds * 4 + 60)
            rows += _fan_rows(fan, web.cpu_ms + work_cpu.cpu_ms, every_ms)
            progress(f"  stream: W3 beside {runs} more streams …")
            box: dict[str, FanOut] = {}
            writing = threading.Event()
            args = (server.url, token, model, runs, words, every_ms, seconds * 4 + 60, writing)
            thread = threading.Thread(target=lambda: box.update(fan=fan_out(*args)))
            thread.start()
            writing.wait(300)
            time.sleep(0.5)  # the runs are writing
            beside = closed_loop(server.url, token, 8, seconds)
            thread.join()
            w3 = f"W3 closed loop, 8 clients, {seconds:g} s: alone, then beside {runs} streams writing"
            rows += [
                Row("stream: W3 runs/s alone", alone.runs / seconds, "runs/s", w3),
                Row(f"stream: W3 runs/s beside {runs} streams", beside.runs / seconds, "runs/s", w3),
                Row("stream: W3 beside streams / alone", beside.runs / max(alone.runs, 1), "×", w3),
                Row(
                    "stream: runs not delivered whole beside W3",
                    runs - box["fan"].complete,
                    "runs",
                    f"of {runs}: every word of every run, in order, then done",
                ),
            ]
    rows += _cost(token, progress, seconds)
    return rows


def _fan_rows(fan: FanOut, cpu_ms: float, every_ms: int) -> list:
    from bench.support import Row

    work = f"{fan.runs} runs at once, each followed by its own client, {fan.words} words at {1000 // every_ms}/s"
    written = fan.runs * fan.words
    lost = written - (fan.words_seen - fan.duplicated)
    latency = f"{len(fan.latencies_ms)} words of {work}: the model's chunk written → its delta read by the client"
    return [
        Row("stream: chunk → delta p50", percentile(fan.latencies_ms, 50), "ms", latency),
        Row("stream: chunk → delta p95", percentile(fan.latencies_ms, 95), "ms", latency),
        Row("stream: chunk → delta p99", percentile(fan.latencies_ms, 99), "ms", latency),
        Row("stream: words delivered twice", fan.duplicated, "words", work),
        Row("stream: server CPU per word written", cpu_ms / max(written, 1) * 1000, "µs/word", f"server: {work}"),
        Row("stream: runs delivered whole", fan.complete, "runs", f"{work}: every word, in order, then done"),
        Row("stream: words lost", lost, "words", work),
        Row("stream: deltas delivered", fan.deltas, "events", f"{work} (coalesced: at most one per ~50 ms)"),
        Row(
            "stream: server CPU per delta",
            cpu_ms / max(fan.deltas, 1) * 1000,
            "µs/delta",
            f"gunicorn + run_worker, {work}",
        ),
    ]


def _cost(token: str, progress, seconds: float, rounds: int = 2) -> list:
    """W3's server CPU per run with AGENT_LIVE on and off (fresh gunicorns, alternating): what streaming costs a
    client that does not follow the stream."""
    from bench.http import Gunicorn, ServerUsage, closed_loop
    from bench.support import Row, _http_env, _warm_up

    per_run: dict[str, list[float]] = {"1": [], "0": []}
    runs_s: dict[str, list[float]] = {"1": [], "0": []}
    with StreamingModelServer() as model:
        for round_ in range(rounds):
            for live in ("1", "0"):
                progress(f"  stream: W3 with AGENT_LIVE={live}, round {round_ + 1} of {rounds} …")
                with Gunicorn(_http_env(model.url) | {"AGENT_LIVE": live}) as server:
                    _warm_up(server, token)
                    with ServerUsage(server.proc.pid) as usage:
                        load = closed_loop(server.url, token, 8, seconds)
                    per_run[live].append(usage.cpu_ms / max(load.runs, 1))
                    runs_s[live].append(load.runs / seconds)
    work = f"W3 closed loop, 8 clients, {seconds:g} s, fresh gunicorn each, {rounds} rounds alternating (median)"
    on, off = median(per_run["1"]), median(per_run["0"])
    return [
        Row("stream: W3 server CPU, AGENT_LIVE=1", on, "ms/run", work),
        Row("stream: W3 server CPU, AGENT_LIVE=0", off, "ms/run", work),
        Row("stream: W3 CPU per run, live on / off", on / off if off else float("nan"), "×", work),
        Row("stream: W3 runs/s, live on / off", median(runs_s["1"]) / max(median(runs_s["0"]), 1e-9), "×", work),
    ]
