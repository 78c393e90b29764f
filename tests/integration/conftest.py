"""Fixtures of the integration tests: a real gunicorn on the test database."""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration._support import ROOT, app_env, stop, wait_healthy
from tests.providers.stub_llm import fake_key
from tests.support.http_stub import StubServer

GUNICORN_RATE_LIMIT_COUNT = 5
GUNICORN_RATE_LIMIT = f"{GUNICORN_RATE_LIMIT_COUNT}/m"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class Gunicorn:
    url: str
    stub: StubServer
    process: subprocess.Popen
    stdout: Path
    stderr: Path

    def access_log(self) -> list[tuple[str, str]]:
        """(worker pid, line) per request, from the access log (format '<pid> "<request line>" <status>')."""
        lines = self.stdout.read_text(errors="replace").splitlines()
        return [(line[1 : line.index(">")], line) for line in lines if line.startswith("<") and ">" in line]


@pytest.fixture(scope="session")
def gunicorn(django_db_setup, tmp_path_factory):
    """gunicorn with 2 workers on a free loopback port, on the test database and the shared cache.

    The OpenAI provider points at a scripted stub (`gunicorn.stub`); the rate limit is GUNICORN_RATE_LIMIT.
    """
    logs = tmp_path_factory.mktemp("gunicorn")
    with StubServer() as stub:
        env = app_env(
            OPENAI_API_KEY=fake_key(),
            OPENAI_BASE_URL=stub.url + "/v1",
            AGENT_RATE_LIMIT=GUNICORN_RATE_LIMIT,
            LOG_LEVEL="WARNING",
        )
        port = free_port()
        out, err = logs / "stdout.log", logs / "stderr.log"
        cmd = [
            str(Path(sys.executable).parent / "gunicorn"),
            "-c",
            "gunicorn.conf.py",
            "--workers",
            "2",
            "--bind",
            f"127.0.0.1:{port}",
            "--access-logfile",
            "-",
            "--access-logformat",
            '%(p)s "%(r)s" %(s)s',
            "--no-control-socket",  # not ~/.gunicorn/gunicorn.ctl: that one belongs to any other gunicorn here
            "reactsite.wsgi",
        ]
        with out.open("wb") as fout, err.open("wb") as ferr:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fout, stderr=ferr)
        try:
            url = f"http://127.0.0.1:{port}"
            wait_healthy(url, proc, err)
            yield Gunicorn(url=url, stub=stub, process=proc, stdout=out, stderr=err)
        finally:
            stop(proc)


@pytest.fixture
def server(gunicorn, transactional_db):
    """The session's gunicorn with an empty stub script (data written by the test is committed and visible)."""
    with gunicorn.stub._lock:
        gunicorn.stub._scripts.clear()
        gunicorn.stub.requests.clear()
    return gunicorn
