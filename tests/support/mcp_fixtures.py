"""The test MCP server (tests/support/mcp_server.py) as configured servers: over stdio, or over streamable HTTP on
127.0.0.1 (a free port, as a subprocess the test can stop and start again). Fixtures import from here."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

SERVER = str(Path(__file__).with_name("mcp_server.py"))


def stdio_server(name: str = "t", **extra: Any) -> dict[str, Any]:
    """A stdio entry of AGENT_MCP_SERVERS that runs the test server."""
    return {"name": name, "command": sys.executable, "args": [SERVER], **extra}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(check: Callable[[], Any], timeout: float = 15.0, step: float = 0.05) -> Any:
    """Poll `check` until it returns something true; AssertionError past `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"still false after {timeout} s")
        time.sleep(step)


class HttpServer:
    """The test server over streamable HTTP, as a subprocess on 127.0.0.1:<port>/mcp."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def entry(self, name: str = "h", **extra: Any) -> dict[str, Any]:
        """Its entry of AGENT_MCP_SERVERS."""
        return {"name": name, "url": self.url, **extra}

    def start(self) -> HttpServer:
        command = [sys.executable, SERVER, "--http", "--port", str(self.port)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(self._accepting)
        return self

    def _accepting(self) -> bool:
        assert self.process is not None and self.process.poll() is None, "the test MCP server exited"
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.process = None


@pytest.fixture
def http_server() -> Iterator[HttpServer]:
    server = HttpServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh_mcp() -> Iterator[None]:
    """No MCP state from an earlier test, and none left behind (sessions closed, stdio servers stopped)."""
    from agents.tools import mcp

    mcp.shutdown()
    yield
    mcp.shutdown()
