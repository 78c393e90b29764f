"""Fixtures of the client tests: the served OpenAPI document, and a real server for generated clients to drive."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration._support import ROOT, app_env, stop, wait_healthy

# A client's flow makes more model and tool calls than the default rate limit allows in a minute.
SERVER_ENV = {
    "AGENT_RATE_LIMIT": "10000/m",
    "AGENT_ALLOWED_PROVIDERS": "demo",
    "AGENT_DEFAULT_PROVIDER": "demo",
    "TAVILY_API_KEY": "",
    "LOG_LEVEL": "WARNING",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def live_url(django_db_setup, tmp_path_factory) -> Iterator[str]:
    """gunicorn (one worker) on a free loopback port, on the test database and cache; no background worker."""
    log = tmp_path_factory.mktemp("clients") / "gunicorn.log"
    port = free_port()
    cmd = [
        str(Path(sys.executable).parent / "gunicorn"),
        "-c",
        "gunicorn.conf.py",
        "--workers",
        "1",
        "--bind",
        f"127.0.0.1:{port}",
    ]
    cmd += ["--no-control-socket", "reactsite.wsgi"]
    with log.open("wb") as out:
        server = subprocess.Popen(cmd, cwd=ROOT, env=app_env(**SERVER_ENV), stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, server, log, limit_s=30.0)
        yield url
    finally:
        stop(server)
