"""Helpers of `manage.py bench` for the HTTP figures: an instant model server and a gunicorn to measure."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests

REPLIES = [
    {"tool": ("calculator", {"expression": "12*7"})},
    {"tool": ("calculator", {"expression": "84+1"})},
    {"text": "85"},
]


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
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once: no 40 ms delayed-ACK stall

    def log_message(self, format, *args) -> None:  # noqa: A002 - silence
        return

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        turn = sum(1 for m in body.get("messages", []) if m.get("role") == "tool")
        payload = json.dumps(_completion(turn)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class InstantModelServer:
    """An OpenAI-compatible server on 127.0.0.1 that answers at once: two calculator calls, then "85"."""

    def __enter__(self) -> InstantModelServer:
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Gunicorn:
    """gunicorn with the repo's config on a free port, talking to the current database."""

    def __init__(self, env: dict[str, str], workers: int = 2) -> None:
        self.port, self.env, self.workers = free_port(), env, workers
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Gunicorn:
        root = Path(__file__).resolve().parents[2]
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
        self.proc = subprocess.Popen(
            [*command, "--access-logfile", "/dev/null", "reactsite.wsgi"],
            cwd=root, env={**os.environ, **self.env}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if requests.get(self.url + "/api/v1/health", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                time.sleep(0.2)
        self.__exit__()
        raise RuntimeError("gunicorn did not become healthy within 30 s")

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
